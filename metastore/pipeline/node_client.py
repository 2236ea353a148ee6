"""Talking to a running node: its checkpoints, its changelog, with its authentication.

Blocking HTTP (``urllib``): a job's driver does a handful of calls before and after
the Spark work. A node with authentication on takes the same bearer tokens as every
other client: given ``--credential``, the job first exchanges it at the node's
OAuth2 token endpoint (``client_credentials``), as PyIceberg does. Checkpoints are a
service admin's. Every failure to reach or use the node is a ``JobError`` (exit 2)
naming the node and the cause, never a traceback.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from metastore.pipeline.exits import JobError

TIMEOUT_S = 60.0  # a checkpoint flushes the memtable: seconds at most


class NodeClient:
    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        credential: tuple[str, str] | None = None,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self.url = url.rstrip("/")
        self._token = token
        self._credential = credential
        self._timeout_s = timeout_s

    def create_checkpoint(self) -> dict[str, Any]:
        """``{"id", "path", "created-at-ms"}`` and, from a cluster node, ``changelog``."""
        found: dict[str, Any] = self.call("POST", "/api/v1/admin/checkpoints")
        return found

    def delete_checkpoint(self, checkpoint_id: str) -> None:
        self.call("DELETE", f"/api/v1/admin/checkpoints/{urllib.parse.quote(checkpoint_id)}")

    def bearer(self) -> str | None:
        """The token to send: the given one, or one issued for the credential."""
        if self._token is None and self._credential is not None:
            client_id, secret = self._credential
            form = urllib.parse.urlencode(
                {
                    "grant_type": "client_credentials",
                    "client_id": client_id,
                    "client_secret": secret,
                }
            ).encode()
            reply = self._send("POST", "/v1/oauth/tokens", form, form=True, auth=False)
            self._token = str(reply["access_token"])
        return self._token

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        return self._send(method, path, data, form=False, auth=True)

    def _send(self, method: str, path: str, data: bytes | None, *, form: bool, auth: bool) -> Any:
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = (
                "application/x-www-form-urlencoded" if form else "application/json"
            )
        token = self.bearer() if auth else None
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(self.url + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise JobError(f"node {self.url}: {method} {path}: {_problem(exc)}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise JobError(f"cannot reach the node at {self.url} ({reason})") from None
        return json.loads(raw) if raw else None


def _problem(exc: urllib.error.HTTPError) -> str:
    """The node's own message (Iceberg or OAuth error shape), else the HTTP status."""
    try:
        body = json.loads(exc.read() or b"null")
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and "message" in error:
        return f"{exc.code} {error.get('type', '')}: {error['message']}".replace("  ", " ")
    if isinstance(body, dict) and "error_description" in body:
        return f"{exc.code} {body.get('error')}: {body['error_description']}"
    hint = " (authentication is on: pass --token or --credential)" if exc.code == 401 else ""
    return f"{exc.code} {exc.reason}{hint}"
