"""Teams over real HTTP, on SQLite and PostgreSQL: roles, who pays, who sees, and removing a member."""

from __future__ import annotations

from sqlalchemy import select

from danlu.db.models import Event
from tests.conftest import LiveServer, wait_for

CMD = ["sh", "-c", "exec sleep 600"]


def test_roles_payer_visibility_and_removal(live: LiveServer) -> None:
    with (
        live.new_user("owner1", topup=None) as owner,
        live.new_user("bob", topup="1.00") as bob,
        live.new_user("vera", topup="100.00") as vera,
        live.new_user("out", topup="100.00") as out,
        live.admin() as adm,
    ):
        r = owner.post("/teams", json={"name": "lab"})
        assert r.status_code == 201, r.text
        assert r.json()["role"] == "owner"
        assert owner.post("/teams/lab/members", json={"user": "bob", "role": "member"}).status_code == 201
        assert owner.post("/teams/lab/members", json={"user": "vera", "role": "viewer"}).status_code == 201
        t = adm.post("/admin/teams/lab/topup", json={"amount": "50.00"}, headers={"Idempotency-Key": "lab-1"})
        assert t.status_code == 200 and t.json()["balance"] == "50.00", t.text

        # a viewer sees the team but cannot rent on it
        assert vera.get("/teams/lab").json()["role"] == "viewer"
        assert vera.get("/balance", params={"team": "lab"}).json()["balance"] == "50.00"
        denied = vera.post("/instances", json={"gpu_model": "T4", "command": CMD, "team": "lab"})
        assert denied.status_code == 403 and denied.json()["error"]["code"] == "team_role_required", denied.text
        assert vera.post("/jobs", json={"command": CMD, "team": "lab"}).status_code == 403

        # a member rents on the team: the team pays, not bob (who has 1.00, too little for an A100)
        rented = bob.post("/instances", json={"gpu_model": "A100-80GB", "command": CMD, "team": "lab"})
        assert rented.status_code == 201, rented.text
        iid = rented.json()["id"]
        job = bob.post("/jobs", json={"command": CMD, "gpu_types": ["T4"], "team": "lab"})
        assert job.status_code == 201, job.text
        jid = job.json()["id"]
        assert bob.get("/balance").json()["balance"] == "1.00"
        wait_for(lambda: bob.get(f"/instances/{iid}").json()["billed_seconds"] >= 2)
        assert bob.post(f"/instances/{iid}/stop").status_code == 200
        wait_for(lambda: bob.get(f"/instances/{iid}").json()["status"] == "stopped")
        team_ledger = owner.get("/ledger", params={"team": "lab"}).json()
        assert any(e["kind"] == "usage" for e in team_ledger), team_ledger
        assert float(owner.get("/balance", params={"team": "lab"}).json()["balance"]) < 50.0
        assert bob.get("/balance").json()["balance"] == "1.00"
        # team members see it; an outsider gets 404 on the instance, its job and the team
        assert vera.get(f"/instances/{iid}").status_code == 200
        # … and in the team's listing (until a newcomer's pass only by typing its id); not in their own
        for member in (vera, owner):
            assert [v["id"] for v in member.get("/instances", params={"team": "lab"}).json()] == [iid]
        assert vera.get("/instances").json() == []
        listed = out.get("/instances", params={"team": "lab"})
        assert listed.status_code == 404 and listed.json()["error"]["code"] == "team_not_found", listed.text
        assert vera.get(f"/jobs/{jid}").status_code == 200
        for path in (f"/instances/{iid}", f"/jobs/{jid}", f"/jobs/{jid}/events", "/teams/lab"):
            r = out.get(path)
            assert r.status_code == 404, (path, r.text)
        assert out.get("/balance", params={"team": "lab"}).status_code == 404
        assert out.post(f"/instances/{iid}/stop").status_code == 404
        assert out.post("/teams/lab/members", json={"user": "out", "role": "owner"}).status_code == 404

        # removing a member stops nothing: their running instance keeps running, with an event
        assert bob.post(f"/instances/{iid}/start").status_code == 200
        removed = owner.delete("/teams/lab/members/bob")
        assert removed.status_code == 200, removed.text
        assert iid in removed.json()["running_instances"]  # (with the job's run, if it started)
        assert [m["user"] for m in removed.json()["team"]["members"]] == ["owner1", "vera"]
        assert owner.get(f"/instances/{iid}").json()["status"] == "running"
        with live.platform.db.read() as s:
            kinds = s.execute(select(Event.kind, Event.user_id).where(Event.instance_id == iid)).all()
        assert len([k for k, _ in kinds if k == "member_removed"]) == 2, kinds
        assert bob.get("/teams/lab").status_code == 404
        assert bob.post("/instances", json={"gpu_model": "T4", "command": CMD, "team": "lab"}).status_code == 404
        assert owner.post(f"/instances/{iid}/stop").status_code == 200  # an owner decides
        owner.post(f"/jobs/{jid}/cancel")
        owner.delete(f"/instances/{iid}")
