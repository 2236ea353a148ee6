"""The node's environment: which ``METASTORE_*`` variables are settings, and how one
is read as its setting's type.

A misspelled variable stops the node (``refuse_unknown_variables``); a value is parsed
without guessing (``parse_variable``). ``ServerConfig.load`` reads every setting this
way, and commands that read one setting outside it (``env_flag``) read it the same way.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping

from metastore.storage.credentials import ENV_PREFIX as CREDENTIALS_ENV_PREFIX
from metastore.util.setting_rules import ConfigError, integer, number

ENV_PREFIX = "METASTORE_"
# METASTORE_* names a node's environment may hold that are not its settings: the
# pipeline commands' client credentials (one environment often serves both), the
# storage credential references a catalog may name at any time, and the test suite's
# own variables. Any other METASTORE_* name is a misspelled setting and stops the node.
NOT_SETTINGS = frozenset({"METASTORE_TOKEN", "METASTORE_CREDENTIAL"})
NOT_SETTING_PREFIXES = (CREDENTIALS_ENV_PREFIX, "METASTORE_TEST_")
# what Kubernetes puts in every pod's environment for a Service named "metastore"
SERVICE_LINKS = re.compile(r"^METASTORE_(SERVICE_(HOST|PORT)\w*|PORT_\d+_(TCP|UDP|SCTP)\w*)$")
SERVICE_LINK_HINT = (
    "; Kubernetes sets it for a Service named metastore:"
    " set enableServiceLinks: false in the pod, or name the Service otherwise"
)


def refuse_unknown_variables(env: Mapping[str, str], settings: set[str]) -> None:
    """A METASTORE_* variable that names no setting stops the node: a misspelled name
    (``METASTORE_PIN_CPUS``, ``METASTORE_AUHT``) would otherwise leave its setting at the
    default without a word, and a default can be the unsafe side (auth ``auto``)."""
    for variable in sorted(env):
        if (
            not variable.startswith(ENV_PREFIX)
            or variable in settings
            or variable in NOT_SETTINGS
            or variable.startswith(NOT_SETTING_PREFIXES)
        ):
            continue
        # compared without the shared prefix, which would make every name look close
        names = sorted(name.removeprefix(ENV_PREFIX) for name in settings)
        close = difflib.get_close_matches(variable.removeprefix(ENV_PREFIX), names, 1, 0.7)
        hint = f"; did you mean {ENV_PREFIX}{close[0]}?" if close else ""
        if SERVICE_LINKS.match(variable):
            hint = SERVICE_LINK_HINT
        raise ConfigError(variable, f"is not a setting of this node{hint}")


_BOOLS = {"1": True, "true": True, "yes": True, "on": True}
_BOOLS |= {"0": False, "false": False, "no": False, "off": False}


def env_flag(env: Mapping[str, str], variable: str) -> bool:
    """An on/off variable read outside ``ServerConfig`` (the ``topics`` command's
    ``METASTORE_PUBLISH_EVENTS``), with the node's words: a typo is refused, not off."""
    raw = env.get(variable, "off")
    name = variable.removeprefix(ENV_PREFIX).lower()
    return bool(parse_variable(name, variable, "bool", raw, secret=False))


def parse_variable(name: str, variable: str, type_name: str, raw: str, *, secret: bool) -> object:
    """An environment string as the setting's type; no surrounding spaces, no guessing."""
    value: object = raw
    try:
        if type_name == "bool":
            value = _BOOLS[raw.lower()]
        elif type_name == "int":
            value = integer(raw)
        elif type_name == "float":
            value = number(raw)
    except (KeyError, ValueError):
        shown = "(secret)" if secret else repr(raw)
        hint = SERVICE_LINK_HINT if name == "port" and raw.startswith("tcp://") else ""
        raise ConfigError(name, f"cannot parse {shown} as {type_name}{hint}", variable) from None
    return value


def setting_names(
    settings: Iterable[str], overrides: Mapping[str, object], env: Mapping[str, str]
) -> dict[str, str]:
    """Each setting by the name an operator knows it by: the ``--flag`` given, else the
    METASTORE_ variable set, else the flag the command has for it (a key of ``overrides``
    whose value is None), else its variable. What a refusal or a failed start names, so
    the operator finds the line to change: a setting's own name (``data_dir``) appears in
    no command line or environment file of theirs."""
    names: dict[str, str] = {}
    for name in settings:
        flag, variable = "--" + name.replace("_", "-"), ENV_PREFIX + name.upper()
        if overrides.get(name) is not None:
            names[name] = flag
        elif variable in env:
            names[name] = variable
        else:
            names[name] = flag if name in overrides else variable
    return names
