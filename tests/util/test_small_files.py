"""The small files settings name: a regular file within a bound, or refused at once
(``metastore.util.small_files``), and every setting that names one refuses the rest with one
line through a real ``metastore serve``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.process import free_port
from metastore.config.environment import ENV_PREFIX
from metastore.errors import StorageUnavailable
from metastore.storage.credentials import Credentials, CredentialSources
from metastore.util.small_files import NotSmallFile, read_small_file


def test_a_regular_file_up_to_the_bound_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_bytes(b"x" * 100)
    assert read_small_file(str(path), 100) == b"x" * 100
    with pytest.raises(NotSmallFile, match="is larger than 99 bytes"):
        read_small_file(str(path), 99)
    path.write_bytes(b"")
    assert read_small_file(str(path), 10) == b""


def test_what_is_no_regular_file_is_refused_without_waiting(tmp_path: Path) -> None:
    """A FIFO without a writer would block an open(); /dev/zero would never end."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero", str(tmp_path)):
        with pytest.raises(NotSmallFile, match="is not a regular file"):
            read_small_file(path, 1024)
    with pytest.raises(FileNotFoundError):
        read_small_file(str(tmp_path / "missing"), 1024)


def test_a_credential_file_that_is_no_regular_file_is_unavailable(tmp_path: Path) -> None:
    fifo = tmp_path / "minio.json"
    os.mkfifo(fifo)
    with pytest.raises(StorageUnavailable, match="is not a regular file") as unavailable:
        Credentials(file=str(fifo)).resolve(CredentialSources({}, str(tmp_path)))
    assert unavailable.value.status == 503
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"s3.secret-access-key": "k" * 70_000}))
    with pytest.raises(StorageUnavailable, match="is larger than 65,536 bytes"):
        Credentials(file=str(big)).resolve(CredentialSources({}, str(tmp_path)))


CLUSTER = {"METASTORE_WAREHOUSE": "s3://lake/wh", "METASTORE_AUTH": "off"}
PROVIDER = {
    "METASTORE_AUTH": "on",
    "METASTORE_OIDC_ISSUER": "https://idp.example",
    "METASTORE_OIDC_AUDIENCE": "metastore",
}
TLS = {"METASTORE_TLS_CERT": "cert.pem", "METASTORE_TLS_KEY": "key.pem"}  # in tmp_path
SETTINGS = {  # the variable naming a file, and what else the node needs to read it
    "METASTORE_CLUSTER_SECRET_FILE": CLUSTER,
    "METASTORE_KAFKA_PROPERTIES_FILE": CLUSTER,
    "METASTORE_OIDC_JWKS_FILE": PROVIDER,
    "METASTORE_TLS_CERT": TLS,
    "METASTORE_TLS_KEY": TLS,
    "METASTORE_TLS_CA": TLS,
}


@pytest.mark.parametrize("variable", sorted(SETTINGS))
@pytest.mark.parametrize("kind", ["fifo", "device", "huge"])
def test_serve_refuses_a_setting_naming_no_small_file(
    variable: str, kind: str, tmp_path: Path
) -> None:
    if kind == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)
        problem = f"{path} is not a regular file"
    elif kind == "device":
        path, problem = Path("/dev/zero"), "/dev/zero is not a regular file"
    else:
        path = tmp_path / "huge"
        with path.open("wb") as stream:
            stream.truncate(64 * 1024 * 1024)  # sparse: a log-sized file costs no disk
        problem = "is larger than"
    base = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    others = dict(SETTINGS[variable])
    if SETTINGS[variable] is TLS:  # regular files for the others, loaded after the check
        for name, file in TLS.items():
            (tmp_path / file).write_text("-----BEGIN CERTIFICATE-----\n")
            others[name] = str(tmp_path / file)
    env = {**base, **others, variable: str(path)}
    command = [sys.executable, "-m", "metastore", "serve", "--port", str(free_port())]
    command += ["--data-dir", str(tmp_path / "data")]
    if SETTINGS[variable] is CLUSTER:
        command += ["--kafka", "127.0.0.1:1"]
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"metastore: invalid configuration: {variable}: "), lines[0]
    assert problem in lines[0], lines[0]
    assert not (tmp_path / "data").exists()
