"""Small HTTP helpers for the pipeline tests (blocking: the tests run no event loop)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


class Http:
    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url
        self.token = token

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            return exc.code, json.loads(raw) if raw else None

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, found = self.call(method, path, body)
        assert 200 <= status < 300, f"{method} {path}: {status} {found}"
        return found

    def login(self, client_id: str, secret: str) -> Http:
        form = urllib.parse.urlencode(
            {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
        ).encode()
        request = urllib.request.Request(self.url + "/v1/oauth/tokens", form, method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            return Http(self.url, json.loads(response.read())["access_token"])

    def pages(self, path: str, key: str) -> list[Any]:
        """Every item of a paged listing."""
        items: list[Any] = []
        token: str | None = None
        while True:
            sep = "&" if "?" in path else "?"
            query = f"{sep}pageToken={urllib.parse.quote(token)}" if token else ""
            found = self.ok("GET", path + query)
            items.extend(found[key])
            token = found.get("next-page-token")
            if not token:
                return items
