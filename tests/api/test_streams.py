"""Live updates over the API for clients other than the console: server-sent events of the
instance listing (status and live cost) and of a log as it grows, with bearer tokens."""

from __future__ import annotations

import json

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
