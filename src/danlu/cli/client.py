"""The HTTP client the CLI commands use. Reads DANLU_URL / DANLU_TOKEN, else the config file
written by ``danlu login`` (~/.config/danlu/config.json, or $DANLU_CONFIG)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from danlu.cli.output import fail

DEFAULT_URL = "http://127.0.0.1:8000"


def config_path() -> Path:
    explicit = os.environ.get("DANLU_CONFIG")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "danlu" / "config.json"


def load_config() -> dict[str, str]:
    try:
        data = json.loads(config_path().read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return {k: str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def save_config(url: str, token: str) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"url": url, "token": token}, f)
    return path


class Client:
    def __init__(self, url: str | None = None, token: str | None = None) -> None:
        cfg = load_config()
        self.url = (url or os.environ.get("DANLU_URL") or cfg.get("url") or DEFAULT_URL).rstrip("/")
        self.token = token or os.environ.get("DANLU_TOKEN") or cfg.get("token")
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        import httpx  # imported on use: it is most of a CLI command's start-up time

        self._httpx = httpx
        self._http = httpx.Client(base_url=self.url + "/api/v1", headers=headers, timeout=60)

    def request(self, method: str, path: str, *, ok: tuple[int, ...] = (200, 201, 204), **kw: Any) -> Any:
        try:
            resp = self._http.request(method, path, **kw)
        except self._httpx.HTTPError as exc:
            fail(f"cannot reach the danlu server at {self.url} ({exc}); start it with `make run` or set DANLU_URL")
        if resp.status_code not in ok:
            try:
                err = resp.json()["error"]
                fail(err["message"], err["code"])
            except (ValueError, KeyError, TypeError):
                fail(f"HTTP {resp.status_code} from {self.url}: {resp.text[:200]}")
        if resp.status_code == 204 or not resp.content:
            return None
        return resp.json()

    def send(self, method: str, path: str, **kw: Any) -> Any:
        """The raw response, whatever its status; a dropped or refused connection raises httpx's error (for a
        caller that retries: danlu.cli.resumable_copy)."""
        return self._http.request(method, path, **kw)

    def stream(self, method: str, path: str, **kw: Any) -> Any:
        """``httpx.Client.stream``: the response as it arrives, in a ``with`` block."""
        return self._http.stream(method, path, **kw)

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def post(self, path: str, **kw: Any) -> Any:
        return self.request("POST", path, **kw)

    def put(self, path: str, **kw: Any) -> Any:
        return self.request("PUT", path, **kw)

    def delete(self, path: str, **kw: Any) -> Any:
        return self.request("DELETE", path, **kw)
