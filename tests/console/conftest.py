"""Fixtures for the web console: a real node and headless Chromium driven by Playwright.

Chromium is the system's (Debian's ``chromium`` package, installed by the setup
script); Playwright only drives it, so no browser is downloaded. Every page a test
opens records the browser's console errors and uncaught exceptions; a test fails
on any it did not expect.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Playwright, sync_playwright

from harness.node import NodeProcess

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",  # this machine has no route out: no update checks
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("no Chromium on this machine: `make setup` installs Debian's chromium package")


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    launched = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
    yield launched
    launched.close()


@dataclass
class Console:
    """What the browser reported while a test ran."""

    errors: list[str] = field(default_factory=list)
    expected: list[str] = field(default_factory=list)  # substrings of errors a test provoked

    def on_message(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"{message.text} ({message.location.get('url', '')})")

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(x in e for x in self.expected)]


@pytest.fixture
def console() -> Console:
    return Console()


@pytest.fixture
def page(browser: Browser, console: Console) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(15_000)
    opened = context.new_page()
    opened.on("console", console.on_message)
    opened.on("pageerror", lambda exc: console.errors.append(f"uncaught: {exc}"))
    yield opened
    context.close()
    assert not console.unexpected(), f"the browser reported errors: {console.unexpected()}"


def console_node(root: Path, env: dict[str, str] | None = None) -> NodeProcess:
    """A node for a module's tests (``with`` starts it and stops it by PID)."""
    return NodeProcess(root / "data", log_path=root / "node.log", env=env)
