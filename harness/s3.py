"""An S3-compatible server (moto's standalone server) as a child process.

Started on a free loopback port, awaited until it answers, stopped by PID. It
serves S3, STS and IAM on one endpoint and keeps everything in memory. By default
it accepts any credentials (``KEYS``); ``S3Process(iam=True)`` makes it enforce
IAM: after the fixture has created an admin user (``admin``'s keys) and a role
it may assume (``role_arn``), every request must be signed by a known key and be
allowed by that principal's policies. ``harness.moto_server`` adds one thing
moto lacks in that mode: an assumed role's session policy is enforced too.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.process import Child, free_port, kill_pid

REGION = "us-east-1"
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Keys:
    access_key_id: str
    secret_access_key: str

    def io_properties(self) -> dict[str, str]:
        """The secret FileIO properties of these keys (a catalog's storage credentials)."""
        return {
            "s3.access-key-id": self.access_key_id,
            "s3.secret-access-key": self.secret_access_key,
        }


KEYS = Keys("testing", "testing")  # what an unenforcing server accepts (any key does)
# The role every assumed-role credential comes from (IAM mode): all of S3, so the
# session policy alone decides what such a credential may do.
ROLE_NAME = "metastore-vending"
ADMIN_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
}
ROLE_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
}


class S3Process(Child):
    def __init__(
        self, port: int | None = None, *, iam: bool = False, log_path: Path | None = None
    ) -> None:
        self.port = port or free_port()
        self.iam = iam
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.admin = KEYS
        self.role_arn = ""

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def io_properties(self) -> dict[str, str]:
        """FileIO properties (no secrets) that reach this server: path-style, its region."""
        return {
            "s3.endpoint": self.endpoint,
            "s3.region": REGION,
            "s3.force-virtual-addressing": "false",
        }

    def start(self, timeout: float = 30.0) -> S3Process:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "AWS_DEFAULT_REGION": REGION,
            "MOTO_ALLOW_NONEXISTENT_REGION": "true",
        }
        out = self.log_path.open("ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harness.moto_server", "-H", "127.0.0.1", "-p", str(self.port)],
            env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        if self.log_path is not None:
            out.close()  # type: ignore[union-attr]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"S3 server exited with {self.proc.returncode}")
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(self.endpoint + "/moto-api/data.json", timeout=1) as reply,
            ):
                if reply.status == 200:
                    break
            time.sleep(0.05)
        else:
            self.kill()
            raise TimeoutError(f"S3 server on {self.endpoint} not ready after {timeout}s")
        if self.iam:
            self._enforce_iam()
        return self

    def _enforce_iam(self) -> None:
        """Create the admin user and the vending role, then turn enforcement on."""
        iam = self.client("iam")
        iam.create_user(UserName="admin")
        iam.put_user_policy(
            UserName="admin", PolicyName="all", PolicyDocument=json.dumps(ADMIN_POLICY)
        )
        key = iam.create_access_key(UserName="admin")["AccessKey"]
        self.admin = Keys(key["AccessKeyId"], key["SecretAccessKey"])
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}
            ],
        }
        role = iam.create_role(RoleName=ROLE_NAME, AssumeRolePolicyDocument=json.dumps(trust))
        iam.put_role_policy(
            RoleName=ROLE_NAME, PolicyName="s3", PolicyDocument=json.dumps(ROLE_POLICY)
        )
        self.role_arn = role["Role"]["Arn"]
        request = urllib.request.Request(
            self.endpoint + "/moto-api/reset-auth",
            data=b"0",
            method="POST",
            headers={"Content-Type": "text/plain"},  # not a form: moto reads the raw body
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.status == 200

    def client(
        self, service: str = "s3", keys: Keys | None = None, token: str | None = None
    ) -> Any:
        """A boto3 client of this server (the admin's keys unless given)."""
        import boto3
        from botocore.config import Config

        keys = keys or self.admin
        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=keys.access_key_id,
            aws_secret_access_key=keys.secret_access_key,
            aws_session_token=token,
            config=Config(s3={"addressing_style": "path"}),
        )

    def make_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def keys_in(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key under ``prefix`` in ``bucket``."""
        pages = (
            self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        )
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def kill(self) -> None:
        """Stop by PID. SIGKILL: it keeps nothing on disk."""
        kill_pid(self.proc)

    def __enter__(self) -> S3Process:
        return self.start()
