"""Guessing is slow (issue 28, finding 3): console sign-in had no limit (300 wrong passwords in
132 s, each an argon2 hash; /healthz slowed to a 1.18 s median for everyone), nor had API tokens.
Now wrong passwords are counted per account and per address, wrong tokens per address; past the
free ones each try waits (doubling, at most 15 min) and is answered 429 with Retry-After, before
any hashing."""

from __future__ import annotations

import contextlib
import time

import httpx
import pytest

from danlu.core.errors import TooManyAttempts
from danlu.core.throttle import Throttle
from tests.conftest import LiveServer
from tests.console.helpers import browser, set_password


def test_the_wait_doubles_past_the_free_tries_and_fades() -> None:
    t = Throttle(free=2, base_ms=1000, max_ms=8000, forget_ms=60_000)
    key = ["name:alice"]
    for now in (0, 10, 20):
        t.check(key, now)
        t.failed(key, now)
    with pytest.raises(TooManyAttempts) as e:
        t.check(key, 500)  # the third failure at 20 ms: wait until 1,020 ms
    assert e.value.details["retry_after_s"] == 1
    t.check(key, 1020)
    waits = []
    now = 1020
    for _ in range(5):
        t.failed(key, now)
        try:
            t.check(key, now)
        except TooManyAttempts as exc:
            waits.append(exc.details["retry_after_s"])
        now += 100_000 // 10  # 10 s later: past every wait but the cap's
    assert waits == [2, 4, 8, 8, 8]  # doubling, capped
    t.check(key, now + 60_000)  # quiet for forget_ms: starts again from zero
    t.failed(["addr:x"], 0)
    t.succeeded(key)
    t.check(key, now)  # a success clears the account


def test_console_sign_in_is_throttled_per_account_before_hashing(live: LiveServer) -> None:
    live.new_user("alice").close()
    set_password(live, "alice", "alice-password-1")
    # The live server runs on the real clock: a first wait of 60 s (not 1 s) cannot run out while a
    # loaded machine hashes the six free guesses (seen once: the right password, 8 s in, got 303).
    throttle = live.platform.sign_in_throttle
    throttle.base_ms = 60_000
    c = browser(live)
    answers = [c.post("/login", data={"name": "alice", "password": f"guess-{i}"}).status_code for i in range(8)]
    assert answers[:6] == [401] * 6 and set(answers[6:]) == {429}, answers
    r = c.post("/login", data={"name": "alice", "password": "alice-password-1"})  # even the right one waits
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert "too many wrong passwords" in r.text
    throttle.base_ms = 1_000  # a shorter wait from here on: what matters is that a waited-out one lets her in
    for _ in range(10):  # each try waits as long as the server says
        r = c.post("/login", data={"name": "alice", "password": "alice-password-1"})
        if r.status_code != 429:
            break
        time.sleep(int(r.headers["retry-after"]) + 0.2)
    assert r.status_code == 303, r.text
    r = browser(live).post("/login", data={"name": "alice", "password": "wrong-again"})
    assert r.status_code == 401  # her success cleared the account's count


def test_wrong_api_tokens_are_throttled_per_address(live: LiveServer) -> None:
    c = live.new_user("alice")
    bad = live.client("dl_not-a-real-token")
    statuses = [bad.get("/me").status_code for _ in range(23)]
    assert statuses[:21] == [401] * 21 and set(statuses[21:]) == {429}, statuses
    r = bad.get("/me")
    assert r.json()["error"]["code"] == "too_many_attempts" and int(r.headers["retry-after"]) >= 1
    assert live.client("").get("/me").status_code == 401  # no token at all is not a guess
    del c


def test_wrong_tokens_at_the_port_proxy_and_sessions_count_as_guesses_too(live: LiveServer) -> None:
    """An attacker's pass (issue 28): the port proxy (``/p/``, ``/pa/``) and the session and tunnel WebSockets
    checked tokens without counting the wrong ones: 40 guesses at /p/ were forty 401s, never a 429. They now
    count against the address like the API's, each page, socket and link alike."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    live.platform.token_throttle.base_ms = 60_000  # a first wait that cannot run out during the test
    answers = []
    for i in range(22):
        where = ("/p/i-0123456789/8888/", "/pa/i-0123456789/8888/x")[i % 2]
        r = httpx.get(live.url + where, headers={"Authorization": f"Bearer dl_guess{i}"})
        answers.append(r.status_code)
    assert answers[:21] == [401] * 21 and answers[21] == 429, answers
    assert int(r.headers["retry-after"]) >= 1 and r.json()["error"]["code"] == "too_many_attempts"
    # the same address's API guess waits too (one count), and so does a session's socket
    assert live.client("dl_another-guess").get("/me").status_code == 429
    said = b""  # a session is accepted, then refused with a status frame saying why
    url = f"ws://127.0.0.1:{live.port}/api/v1/instances/i-0123456789/exec?command=true"
    with (
        connect(url, additional_headers={"Authorization": "Bearer dl_guess-ws"}) as ws,
        contextlib.suppress(ConnectionClosed),
    ):
        while True:
            message = ws.recv(timeout=30)
            said += message if isinstance(message, bytes) else message.encode()
    assert b"too_many_attempts" in said, said
