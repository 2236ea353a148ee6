"""PyIceberg's integration tests, from its source distribution on PyPI.

The sdist of the pinned release carries ``tests/conftest.py`` and
``tests/integration/``; CI machines reach PyPI, so the tests are taken from there
rather than from GitHub. The archive is downloaded once into the cache, checked
against the pinned SHA-256 (a mismatch is an error, never a silent re-download),
and only the files the run needs are extracted: the tests and the provisioning
script that names the tables their docker setup creates with Spark. PyIceberg
itself is never extracted; the tests import the installed package.
"""

from __future__ import annotations

import hashlib
import shutil
import tarfile
import urllib.request
from pathlib import Path

VERSION = "0.12.0"
URL = (
    "https://files.pythonhosted.org/packages/85/08/"
    "bde71e0bbcf1a62c92d7fa457b508691596c65fa7e52c1982c78c461cd1c/pyiceberg-0.12.0.tar.gz"
)
SHA256 = "19f165d298054f9436108691098b60fa0fa99d0eff5fb884700c43b29334a39d"
_TOP = f"pyiceberg-{VERSION}/"
_TAKEN = ("tests/conftest.py", "tests/integration/", "dev/provision.py")


class SourceError(RuntimeError):
    """The archive could not be fetched or is not the pinned one."""


def archive(cache: Path) -> Path:
    """The pinned sdist in ``cache``, downloaded and checked on first use."""
    path = cache / URL.rsplit("/", 1)[1]
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".part")
        try:
            with urllib.request.urlopen(URL, timeout=120) as response, partial.open("wb") as out:
                shutil.copyfileobj(response, out)
        except OSError as error:
            partial.unlink(missing_ok=True)
            raise SourceError(f"cannot download {URL}: {error}") from error
        check(partial)
        partial.rename(path)
    else:
        check(path)
    return path


def extract(cache: Path) -> Path:
    """The directory holding ``tests/`` and ``dev/provision.py`` of the pinned release."""
    root = cache / f"pyiceberg-{VERSION}"
    marker = root / ".complete"
    if marker.exists():
        return root
    if root.exists():
        shutil.rmtree(root)
    with tarfile.open(archive(cache)) as tar:
        members = [m for m in tar.getmembers() if wanted(m.name)]
        for member in members:
            member.name = member.name.removeprefix(_TOP)
        tar.extractall(root, members=members, filter="data")
    marker.touch()
    return root


def wanted(name: str) -> bool:
    inner = name.removeprefix(_TOP)
    return name.startswith(_TOP) and any(
        inner == taken or (taken.endswith("/") and inner.startswith(taken)) for taken in _TAKEN
    )


def check(path: Path) -> None:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SHA256:
        raise SourceError(f"{path} has SHA-256 {digest}, expected {SHA256}")
