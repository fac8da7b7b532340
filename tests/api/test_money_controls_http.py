"""Budgets, the student discount, tariffs and stopped storage over real HTTP (issue 9 parts 3, 4,
6, 7), on SQLite and PostgreSQL: each route's happy path, who may do what, and bad input that
answers 422 and changes nothing."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from danlu.billing import student
from danlu.core.errors import InvalidInput
from tests.conftest import LiveServer, wait_for

CMD = ["sh", "-c", "exec sleep 600"]


def code(r: httpx.Response) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["code"]


def rent(client: httpx.Client, **extra: Any) -> str:
    r = client.post("/instances", json={"gpu_model": "T4", "command": CMD, **extra})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_budgets_scopes_roles_and_bad_input(live: LiveServer) -> None:
    with live.new_user("alice") as alice, live.new_user("bob") as bob:
        iid = rent(alice)
        r = alice.put("/budgets", json={"hard": "5.00", "soft": "2.50"})
        assert r.status_code == 200, r.text
        assert {k: r.json()[k] for k in ("scope", "period", "soft", "hard", "currency")} == {
            "scope": "account",
            "period": "month",
            "soft": "2.50",
            "hard": "5.00",
            "currency": "CNY",
        }
        r = alice.put("/budgets", json={"instance": iid, "period": "total", "hard": "1.00"})
        assert r.status_code == 200 and r.json()["scope"] == f"instance:{iid}", r.text
        again = alice.put("/budgets", json={"instance": iid, "period": "total", "hard": "2.00"})  # replaces it
        assert again.json()["id"] == r.json()["id"] and again.json()["hard"] == "2.00"
        listed = alice.get("/budgets").json()

        def budgets() -> list[dict[str, str]]:
            """The budgets as set (their ``spent`` moves as the meter posts the running rental's usage)."""
            return [{k: v for k, v in b.items() if k != "spent"} for b in alice.get("/budgets").json()]

        as_set = budgets()
        assert [b["scope"] for b in listed] == ["account", f"instance:{iid}"]

        for body, want in [
            ({}, "invalid_budget"),
            ({"period": "week", "hard": "1.00"}, "invalid_budget_period"),
            ({"hard": "-1.00"}, "invalid_amount"),
            ({"hard": "0"}, "invalid_amount"),
            ({"member": "bob", "instance": iid, "hard": "1.00"}, "invalid_budget_scope"),
            ({"instance": "not-an-id", "hard": "1.00"}, "invalid_budget_scope"),
            ({"hard": "1.00", "extra": 1}, "invalid_request"),
        ]:
            bad = alice.put("/budgets", json=body)
            assert bad.status_code == 422, (body, bad.text)
            assert bad.json()["error"]["code"] == want, (body, bad.text)
        assert budgets() == as_set  # nothing changed

        # another user's instance (and budget) is not found, as for one that does not exist
        assert code(bob.put("/budgets", json={"instance": iid, "hard": "1.00"})) == (404, "instance_not_found")
        assert code(bob.delete(f"/budgets/{listed[0]['id']}")) == (404, "budget_not_found")
        assert bob.get("/budgets").json() == []
        assert budgets() == as_set

        # a team: a member looks but cannot set the account's or a member's budget; the owner can
        assert alice.post("/teams", json={"name": "lab"}).status_code == 201
        assert alice.post("/teams/lab/members", json={"user": "bob", "role": "member"}).status_code == 201
        assert code(bob.put("/budgets", params={"team": "lab"}, json={"hard": "9.00"})) == (403, "team_role_required")
        denied = bob.put("/budgets", params={"team": "lab"}, json={"member": "bob", "hard": "9.00"})
        assert code(denied) == (403, "team_role_required")
        assert bob.get("/budgets", params={"team": "lab"}).json() == []
        mine = alice.put("/budgets", params={"team": "lab"}, json={"member": "bob", "hard": "3.00"})
        assert mine.status_code == 200 and mine.json()["scope"] == "member:bob", mine.text
        assert [b["scope"] for b in bob.get("/budgets", params={"team": "lab"}).json()] == ["member:bob"]
        assert code(bob.delete(f"/budgets/{mine.json()['id']}")) == (403, "team_role_required")
        assert code(alice.put("/budgets", params={"team": "lab"}, json={"member": "zed", "hard": "1.00"}))[0] == 404

        assert alice.delete(f"/budgets/{listed[0]['id']}").status_code == 204
        assert [b["scope"] for b in alice.get("/budgets").json()] == [f"instance:{iid}"]
        assert code(alice.delete(f"/budgets/{listed[0]['id']}")) == (404, "budget_not_found")
        assert alice.delete("/budgets/0").status_code == 422
        alice.delete(f"/instances/{iid}")


def test_student_verification_and_discount(live: LiveServer) -> None:
    with live.new_user("stu") as stu, live.admin() as adm:
        assert code(stu.put("/admin/student/discount", json={"percent": "50"})) == (403, "admin_only")
        for bad in ("120", "12.345", "-1", "x"):
            assert code(adm.put("/admin/student/discount", json={"percent": bad})) == (422, "invalid_discount"), bad
        assert adm.put("/admin/student/discount", json={"percent": "12.5"}).json() == {"percent": "12.5"}

        assert stu.get("/student/verification").json()["status"] == "none"
        for body in ({"institution": " x "}, {"institution": "a" * 129}, {"institution": "Fudan\x00"}):
            r = stu.post("/student/verification", json=body)
            assert r.status_code == 422, (body, r.text)
        assert stu.get("/student/verification").json()["status"] == "none"  # nothing was recorded
        r = stu.post("/student/verification", json={"institution": "Fudan University", "evidence": "stu@fudan.edu.cn"})
        assert r.status_code == 201 and r.json()["status"] == "pending", r.text
        assert code(stu.post("/student/verification", json={"institution": "Fudan University"})) == (
            409,
            "verification_exists",
        )
        assert code(stu.get("/admin/student/requests")) == (403, "admin_only")
        assert code(stu.post("/admin/student/stu/approve")) == (403, "admin_only")
        [pending] = adm.get("/admin/student/requests").json()
        assert (pending["user"], pending["evidence"]) == ("stu", "stu@fudan.edu.cn")

        assert code(adm.post("/admin/student/stu/refuse", json={"reason": "  "})) == (422, "invalid_reason")
        assert stu.get("/student/verification").json()["status"] == "pending"
        refused = adm.post("/admin/student/stu/refuse", json={"reason": "no student e-mail"})
        assert refused.status_code == 200 and refused.json()["status"] == "refused", refused.text
        shown = stu.get("/student/verification").json()
        assert (shown["status"], shown["reason"]) == ("refused", "no student e-mail")
        assert code(adm.post("/admin/student/stu/approve")) == (404, "verification_not_found")

        assert stu.post("/student/verification", json={"institution": "Fudan University"}).status_code == 201
        approved = adm.post("/admin/student/stu/approve")
        assert approved.status_code == 200, approved.text
        assert (approved.json()["status"], approved.json()["discount"]) == ("approved", "12.5")
        assert stu.get("/student/verification").json()["decided_at"] is not None
        assert adm.get("/admin/student/requests").json() == []
        assert adm.post("/admin/student/nobody/approve").status_code == 404


def test_tariffs_admin_and_public(live: LiveServer) -> None:
    night = {"name": "night", "days": ["mon", "tue"], "from": "23:00", "to": "08:00", "multiplier": "0.5"}
    with live.new_user("rena") as rena, live.admin() as adm:
        assert code(rena.post("/admin/tariffs", json=night)) == (403, "admin_only")
        assert code(rena.get("/admin/tariffs")) == (403, "admin_only")
        for change in (
            {"to": "23:00"},  # from == to
            {"multiplier": "1.5"},
            {"multiplier": "0.12345"},
            {"days": []},
            {"days": ["moon"]},
            {"from": "25:00"},
            {"plans": ["storage"]},
        ):
            r = adm.post("/admin/tariffs", json={**night, **change})
            assert r.status_code == 422, (change, r.text)
            assert r.json()["error"]["code"] in ("invalid_tariff", "invalid_request"), (change, r.text)
        assert adm.get("/admin/tariffs", params={"all": "true"}).json() == []

        r = adm.post("/admin/tariffs", json={**night, "plans": ["on-demand"]})
        assert r.status_code == 201, r.text
        rule = r.json()
        assert {k: rule[k] for k in ("name", "days", "from", "to", "multiplier", "plans", "retired_at")} == {
            "name": "night",
            "days": ["mon", "tue"],
            "from": "23:00",
            "to": "08:00",
            "multiplier": "0.5",
            "plans": ["on-demand"],
            "retired_at": None,
        }
        assert rena.get("/tariffs").json() == [rule]  # renters see the rules in force
        retired = adm.delete(f"/admin/tariffs/{rule['id']}")
        assert retired.status_code == 200 and retired.json()["retired_at"] is not None, retired.text
        assert rena.get("/tariffs").json() == []
        assert adm.get("/admin/tariffs").json() == []
        assert [t["id"] for t in adm.get("/admin/tariffs", params={"all": "true"}).json()] == [rule["id"]]
        assert code(adm.delete(f"/admin/tariffs/{rule['id']}")) == (404, "tariff_not_found")


def test_stopped_storage_policy_and_what_an_instance_shows(live: LiveServer) -> None:
    with live.new_user("sam") as sam, live.admin() as adm:
        assert code(sam.get("/admin/storage")) == (403, "admin_only")
        assert code(sam.put("/admin/storage", json={"warn_after": "1d"})) == (403, "admin_only")
        default = adm.get("/admin/storage").json()
        assert (default["warn_after"], default["release_after"]) == ("7d", "7d")
        bad = (
            {"warn_after": "10m"},
            {"release_after": "400d"},
            {"warn_after": "7x"},
            {"price_gb_month": "-1"},
            {"snapshot_price_gb_month": "abc"},
            {"snapshot_quota_gb": -1},
            {"snapshot_quota_gb": 10**9},
            {"snapshot_retention": "12h"},
            {"snapshot_retention": "9999d"},
            {"snapshot_before_release": "maybe"},
        )
        for body in bad:
            r = adm.put("/admin/storage", json=body)
            assert r.status_code == 422, (body, r.text)
        assert adm.get("/admin/storage").json() == default  # nothing changed
        r = adm.put("/admin/storage", json={"price_gb_month": "0.30", "warn_after": "2d"})
        assert r.status_code == 200, r.text
        assert r.json() == {
            "price_gb_month": "0.30",
            "warn_after": "2d",
            "release_after": "7d",
            "currency": "CNY",
            "snapshot_price_gb_month": "0.00",
            "snapshot_quota_gb": 0,
            "snapshot_retention": "0",
            "snapshot_before_release": False,
        }
        r = adm.put("/admin/storage", json={"snapshot_price_gb_month": "0.10", "snapshot_quota_gb": 50})
        assert (r.json()["snapshot_price_gb_month"], r.json()["snapshot_quota_gb"]) == ("0.10", 50)
        r = adm.put("/admin/storage", json={"snapshot_retention": "90d", "snapshot_before_release": True})
        assert (r.json()["snapshot_retention"], r.json()["snapshot_before_release"]) == ("90d", True)
        assert adm.put("/admin/storage", json={"release_after": "36h"}).json()["release_after"] == "36h"

        iid = rent(sam)
        assert sam.get(f"/instances/{iid}").json()["stopped_storage_per_day"] is not None
        assert sam.post(f"/instances/{iid}/stop").status_code == 200
        wait_for(lambda: sam.get(f"/instances/{iid}").json()["status"] == "stopped")
        shown = sam.get(f"/instances/{iid}").json()
        assert shown["workspace_release_at"] is not None and shown["stopped_storage_per_day"] is not None, shown
        sam.delete(f"/instances/{iid}")


def test_service_refuses_what_the_schema_would_have_stopped(live: LiveServer) -> None:
    """The services hold their own rules for callers other than the API: a superscript digit was
    a 500 (``Decimal('²')``) in the student discount."""
    with pytest.raises(InvalidInput):
        student.set_discount(live.platform, "²")
