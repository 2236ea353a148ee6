"""``metastore --help`` as a terminal shows it: plain text (no reST backticks from the
source), every command the parser accepts listed with a description on one line."""

from __future__ import annotations

import os
import re
import subprocess
import sys


def metastore(*args: str) -> subprocess.CompletedProcess[str]:
    """The command in a real process, on an 80-column terminal."""
    env = {**os.environ, "COLUMNS": "80"}
    return subprocess.run(
        [sys.executable, "-m", "metastore", *args],
        env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def commands() -> list[str]:
    """What the parser accepts, in its own words: the choices it lists for a wrong one."""
    done = metastore("no-such-command")
    assert done.returncode == 2, done.stderr
    listed = re.search(r"\(choose from (.*)\)", done.stderr)
    assert listed is not None, done.stderr
    return re.findall(r"'([a-z-]+)'", listed[1])


def test_help_lists_every_command_on_one_line_without_backticks() -> None:
    done = metastore("--help")
    assert done.returncode == 0, done.stderr
    assert "`" not in done.stdout, done.stdout
    text = done.stdout.splitlines()
    names = commands()
    assert {"serve", "topics", "replay", "audit", "export", "rebuild", "gc", "maintain"} <= set(
        names
    )
    for name in names:
        rows = [i for i, line in enumerate(text) if re.match(rf"^ {{4}}{name} +\S", line)]
        assert len(rows) == 1, f"{name} has no line of its own:\n{done.stdout}"
        after = text[rows[0] + 1] if rows[0] + 1 < len(text) else ""
        continued = after.startswith(" " * 6) and not re.match(r"^ {4}[a-z]", after)
        assert not continued, f"{name}'s description runs past its line:\n{done.stdout}"


def test_each_commands_help_is_plain_text() -> None:
    for command in [*([name] for name in commands()), ["topics", "create"]]:
        done = metastore(*command, "--help")
        assert done.returncode == 0, (command, done.stderr)
        assert "`" not in done.stdout, done.stdout
