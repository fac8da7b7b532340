"""Live updates over the API for clients other than the console: server-sent events of the
instance listing (status and live cost) and of a log as it grows, with bearer tokens."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from danlu.api.routers import instances as instances_router
from tests.conftest import LiveServer

LOOP = ["sh", "-c", "i=0; while true; do i=$((i+1)); echo line $i; sleep 0.3; done"]


def test_the_listing_streams_its_changes_and_the_log_streams_as_it_grows(live: LiveServer) -> None:
    c = live.new_user("alice")
    iid = c.post("/instances", json={"gpu_model": "A100-80GB", "command": LOOP}).json()["id"]
    statuses: list[str] = []
    costs: list[str] = []
    with c.stream("GET", "/stream/instances") as s:
        assert s.headers["content-type"].startswith("text/event-stream")
        for line in s.iter_lines():
            if line.startswith("data:"):
                mine = next(i for i in json.loads(line[5:]) if i["id"] == iid)
                statuses.append(mine["status"])
                costs.append(mine["cost"])
                if len(statuses) == 3:
                    c.post(f"/instances/{iid}/stop")
                if mine["status"] in ("stopping", "stopped") or len(statuses) > 30:
                    break
    assert statuses[0] == "running" and statuses[-1] in ("stopping", "stopped")
    text = ""
    with c.stream("GET", f"/instances/{iid}/logs/stream", params={"offset": 0}) as s:
        for line in s.iter_lines():
            if line.startswith("data:"):
                text += json.loads(line[5:])["text"]
                if "line 2\n" in text:
                    break
    assert text.startswith("line 1\n")
    bob = live.new_user("bob")
    r = bob.get(f"/instances/{iid}/logs/stream")
    assert (r.status_code, r.json()["error"]["code"]) == (404, "instance_not_found")


def _ending(s: httpx.Response) -> dict[str, Any]:
    """Reads a stream until its ``event: error`` (within 60 s: 200 rechecks); returns that error."""
    event, deadline = None, time.monotonic() + 60
    for line in s.iter_lines():
        assert time.monotonic() < deadline, "the stream went on past the right it was opened with"
        if line == "event: error":
            event = "error"
        elif line.startswith("data:") and event == "error":
            return dict(json.loads(line[5:])["error"])
    raise AssertionError("the stream ended without saying why")


def test_a_stream_ends_with_its_right_a_revoked_token_or_a_member_removed(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack finding (issue 28, 2): open streams went on after the token was revoked (75 s later),
    and a removed member's log stream died with a traceback. Now each is checked as sessions are."""
    monkeypatch.setattr(instances_router, "RECHECK_S", 0.3, raising=False)
    alice = live.new_user("alice")
    iid = alice.post("/instances", json={"gpu_model": "A100-80GB", "command": LOOP}).json()["id"]
    made = alice.post("/tokens", json={"name": "laptop"}).json()
    laptop = live.client(made["token"])
    with laptop.stream("GET", f"/instances/{iid}/logs/stream") as logs, laptop.stream("GET", "/stream/instances") as ls:
        assert alice.delete(f"/tokens/{made['id']}").status_code in (200, 204)
        assert _ending(logs)["code"] == "invalid_token"
        assert _ending(ls)["code"] == "invalid_token"

    with live.admin() as a:
        bob = live.new_user("bob", topup=None)
        assert alice.post("/teams", json={"name": "lab"}).status_code == 201
        assert alice.post("/teams/lab/members", json={"user": "bob", "role": "member"}).status_code == 201
        assert a.post("/admin/teams/lab/topup", json={"amount": "100.00"}).status_code == 200
    tid = alice.post("/instances", json={"gpu_model": "A100-80GB", "command": LOOP, "team": "lab"}).json()["id"]
    with bob.stream("GET", f"/instances/{tid}/logs/stream") as logs:
        assert alice.delete("/teams/lab/members/bob").status_code == 200
        assert _ending(logs)["code"] == "instance_not_found"  # as a new request would answer
