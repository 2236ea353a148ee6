"""Storage credentials by reference: what a catalog stores instead of its secrets.

A catalog's storage (``metastore.storage.settings``) is a record every node replicates
from the changelog, so it must never hold a secret. It names where each node
finds the secrets instead: an environment variable (``{"env": NAME}``) or a file
(``{"file": PATH}``) whose content is a JSON object of FileIO secret properties,
e.g. ``{"s3.access-key-id": "...", "s3.secret-access-key": "..."}``. Every node
that touches the catalog's files needs that variable or file; a node without
it answers 503 (``StorageUnavailable``) naming the reference, never its content.

What a reference may name is bounded, since catalogs are created over the API:

- **Variables** named ``METASTORE_STORAGE_CREDENTIALS_<NAME>`` (the operator's
  opt-in: any other variable of the node, its cluster secret say, is out of
  reach), or ``METASTORE_WAREHOUSE_IO``, the node's own FileIO setting, whose
  secret keys seeded catalogs refer to.
- **Files** by absolute, normalized path; a node reads them only inside its
  ``METASTORE_CREDENTIALS_DIR`` (``/run/secrets``, where container secrets are
  mounted, by default).
- **Content**: only secret-looking FileIO keys (``is_secret_key``) of the S3 /
  client families are taken, so a referenced object cannot redirect the
  storage (an endpoint) or name a class to load.

Messages name the reference and the offending key, never a value.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metastore.errors import BadRequest, StorageUnavailable
from metastore.util.memory_only import check as may_wait
from metastore.util.small_files import NotSmallFile, read_small_file

ENV_PREFIX = "METASTORE_STORAGE_CREDENTIALS_"
NODE_IO_ENV = "METASTORE_WAREHOUSE_IO"  # the node's FileIO setting: its secret keys only
DIR_ENV = "METASTORE_CREDENTIALS_DIR"
_ENV_NAME = re.compile(rf"^{ENV_PREFIX}[A-Z0-9_]{{1,100}}$")
MAX_FILE_BYTES = 64 * 1024

# FileIO property families the server's storage may use (S3 and the shared AWS client
# settings); a key outside them, or one that names a class to load, is refused.
IO_PREFIXES = ("s3.", "client.")
_SECRET_PARTS = (
    "secret",
    "password",
    "passwd",
    "token",
    "access-key",
    "account-key",
    "credential",
    "connection-string",
    "private-key",
)


def is_secret_key(key: str) -> bool:
    """A FileIO property whose value is a secret (or close enough to one to be kept out
    of records and responses): access keys, secret keys, session tokens, passwords."""
    lowered = key.lower()
    return any(part in lowered for part in _SECRET_PARTS)


def io_key_problem(key: str) -> str | None:
    """Why ``key`` cannot be a FileIO property of a catalog's storage, or None."""
    if not key.startswith(IO_PREFIXES):
        return f"{key!r} is not an S3 FileIO property (s3.* or client.*)"
    if key.endswith("-impl"):
        return f"{key!r} names a class to load; the server loads no class a client names"
    return None


@dataclass(frozen=True, slots=True)
class CredentialSources:
    """Where this node looks up references: its environment and its credentials dir."""

    environ: Mapping[str, str]
    directory: str = "/run/secrets"

    @classmethod
    def of_process(cls, directory: str, node_io: str = "") -> CredentialSources:
        """This process's environment (with ``node_io`` as ``METASTORE_WAREHOUSE_IO``,
        which the node's configuration may hold without the environment)."""
        environ = dict(os.environ)
        if node_io:
            environ[NODE_IO_ENV] = node_io
        return cls(environ, directory)


@dataclass(frozen=True, slots=True)
class Credentials:
    """A reference to FileIO secrets: exactly one of ``env`` and ``file``."""

    env: str | None = None
    file: str | None = None

    @classmethod
    def from_json(cls, value: Any, what: str = "storage credentials") -> Credentials:
        """``{"env": NAME}`` or ``{"file": PATH}``; 400 for anything else."""
        if not isinstance(value, dict) or len(value) != 1 or set(value) - {"env", "file"}:
            raise BadRequest(f'{what} must be {{"env": NAME}} or {{"file": PATH}}')
        [(kind, name)] = value.items()
        if not isinstance(name, str):
            raise BadRequest(f"{what}: {kind} must be a string")
        if kind == "env":
            if name != NODE_IO_ENV and not _ENV_NAME.fullmatch(name):
                raise BadRequest(
                    f"{what}: environment variable {name[:200]!r} must be named "
                    f"{ENV_PREFIX}<NAME> (A-Z 0-9 _)"
                )
            return cls(env=name)
        if (
            not name.startswith("/")
            or os.path.normpath(name) != name
            or any(ord(ch) < 0x20 or ch == "\x7f" for ch in name)
            or len(name) > 4096
        ):
            raise BadRequest(f"{what}: file must be an absolute, normalized path")
        return cls(file=name)

    def to_json(self) -> dict[str, str]:
        return {"env": self.env} if self.env is not None else {"file": str(self.file)}

    def describe(self) -> str:
        if self.env is not None:
            return f"environment variable {self.env}"
        return f"file {self.file}"

    def resolve(self, sources: CredentialSources) -> dict[str, str]:
        """The secret FileIO properties this reference names, read now (blocking for a
        file); ``StorageUnavailable`` naming the reference when this node lacks them."""
        text = self._read(sources)
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise self._unavailable("does not hold a JSON object of strings")
        if self.env == NODE_IO_ENV:  # the node's plain properties are stored already
            return {k: v for k, v in value.items() if is_secret_key(k)}
        for key in value:
            problem = io_key_problem(key)
            if problem is None and not is_secret_key(key):
                problem = f"{key!r} is not a secret; put it in io-properties"
            if problem is not None:
                raise self._unavailable(f"holds a key the server refuses: {problem}")
        return dict(value)

    def _read(self, sources: CredentialSources) -> str:
        if self.env is not None:
            text = sources.environ.get(self.env)
            if text is None:
                raise self._unavailable("is not set on this node")
            return text
        may_wait()  # a file
        path = str(self.file)
        directory = os.path.realpath(sources.directory) if sources.directory else ""
        real = os.path.realpath(path)
        if not directory or not real.startswith(directory.rstrip("/") + "/"):
            raise self._unavailable(
                f"is outside this node's credentials directory ({DIR_ENV}="
                f"{sources.directory or '(none)'})"
            )
        try:
            data = read_small_file(real, MAX_FILE_BYTES)
        except OSError as exc:
            raise self._unavailable(f"cannot be read here ({exc.strerror})") from None
        except NotSmallFile as exc:
            raise self._unavailable(str(exc)) from None
        try:
            return data.decode()
        except UnicodeDecodeError:
            raise self._unavailable("is not UTF-8 text") from None

    def _unavailable(self, problem: str) -> StorageUnavailable:
        return StorageUnavailable(
            f"storage credentials: {self.describe()} {problem}; every node that writes"
            " to this catalog needs it"
        )
