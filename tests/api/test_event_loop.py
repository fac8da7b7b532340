"""Blocking database work never runs on the event loop (issue 12): every transaction the server
opens while answering the API, the console and their live streams is opened off the loop's thread
(handlers in the thread pool, or a cache hit that reads nothing)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import pytest

from tests.conftest import LiveServer
from tests.console.helpers import csrf_of, set_password, sign_in


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@pytest.fixture
def watched(live: LiveServer) -> Iterator[list[str]]:
    """Wraps the platform's read and write transactions: each one opened on a thread running an
    event loop is recorded (with the thread's name)."""
    db = live.platform.db
    seen: list[str] = []

    def wrap(name: str, original: Callable[..., AbstractContextManager[Any]]) -> Callable[..., Any]:
        def opened(*args: Any, **kwargs: Any) -> AbstractContextManager[Any]:
            if _on_event_loop():
                seen.append(f"{name} on {threading.current_thread().name}")
            return original(*args, **kwargs)

        return opened

    read, write = db.read, db.write
    db.read, db.write = wrap("read", read), wrap("write", write)  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        db.read, db.write = read, write  # type: ignore[method-assign]


def test_no_transaction_is_opened_on_the_event_loop(live: LiveServer, watched: list[str]) -> None:
    c = live.new_user("alice")
    iid = c.post("/instances", json={"gpu_model": "T4", "command": ["sh", "-c", "echo hi; sleep 30"]}).json()["id"]
    for path in ("/me", "/balance", "/offers", "/instances", "/instances", "/jobs", "/ledger", "/tokens"):
        assert c.get(path).status_code == 200, path
    assert live.client("dl_not-a-token").get("/offers").status_code == 401
    with c.stream("GET", f"/instances/{iid}/logs/stream") as s:
        for line in s.iter_lines():
            if line.startswith("data:") and "hi" in json.loads(line[5:])["text"]:
                break
    set_password(live, "alice", "alice-password-1")
    web = sign_in(live, "alice", "alice-password-1")
    for path in ("/instances", f"/instances/{iid}", "/offers", "/billing", "/account"):
        assert web.get(path).status_code == 200, path
    assert web.post("/account/tokens", data={"csrf": csrf_of(web), "name": "t"}).status_code == 200
    with web.stream("GET", "/live/instances") as s:
        for line in s.iter_lines():
            if line.startswith("data:"):
                break
    c.post(f"/instances/{iid}/stop")
    assert watched == [], f"transactions opened on the event loop: {sorted(set(watched))}"
