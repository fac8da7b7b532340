"""Idempotency-Key on the money endpoints (docs/billing.md "Idempotency"), over real HTTP on SQLite
and PostgreSQL: a replay answers the first response and changes nothing; the same key with another
request is 409; keys are the caller's own, per endpoint; concurrent duplicates run once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import func, select

from danlu.billing import idempotency
from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.core.errors import Conflict
from danlu.db.models import IdempotencyRecord, LedgerTransaction, VoucherCampaign, VoucherGrant
from tests.conftest import LiveServer

CAMPAIGN = {"name": "hello", "amount": "5.00", "on": "code", "code": "HELLO-2026", "valid_for": "7d"}


def count(p: Platform, model: type, *where: object) -> int:
    with p.db.read() as s:
        return int(s.execute(select(func.count()).select_from(model).where(*where)).scalar_one())


def key(k: str) -> dict[str, str]:
    return {"Idempotency-Key": k}


def test_a_replayed_topup_answers_the_first_response_and_pays_once(live: LiveServer) -> None:
    p = live.platform
    with live.new_user("ann", topup=None) as ann, live.admin() as a:
        first = a.post("/admin/users/ann/topup", json={"amount": "5.00"}, headers=key("t-1"))
        assert first.status_code == 200, first.text
        assert a.post("/admin/users/ann/topup", json={"amount": "1.00"}).status_code == 200  # no key: runs
        again = a.post("/admin/users/ann/topup", json={"amount": "5.00"}, headers=key("t-1"))
        # the first response, byte for byte (balance 5.00, created true), not a fresh look at 6.00
        assert (again.status_code, again.content) == (first.status_code, first.content)
        assert first.json()["balance"] == "5.00" and first.json()["created"] is True
        assert ann.get("/balance").json()["balance"] == "6.00"
        assert count(p, LedgerTransaction, LedgerTransaction.kind == "topup") == 2

        reused = a.post("/admin/users/ann/topup", json={"amount": "7.00"}, headers=key("t-1"))
        assert reused.status_code == 409 and reused.json()["error"]["code"] == "idempotency_key_reused"
        assert ann.get("/balance").json()["balance"] == "6.00"

        # the same key on another endpoint (a team's top-up) is another request altogether
        assert ann.post("/teams", json={"name": "lab"}).status_code == 201
        team = a.post("/admin/teams/lab/topup", json={"amount": "5.00"}, headers=key("t-1"))
        assert team.status_code == 200 and team.json()["balance"] == "5.00", team.text
        replay = a.post("/admin/teams/lab/topup", json={"amount": "5.00"}, headers=key("t-1"))
        assert replay.content == team.content
        assert count(p, LedgerTransaction, LedgerTransaction.kind == "topup") == 3


def test_campaign_grant_and_finalize_replay_without_doing_it_twice(live: LiveServer) -> None:
    p = live.platform
    with live.new_user("bo", topup=None), live.admin() as a:
        made = a.post("/admin/voucher-campaigns", json=CAMPAIGN, headers=key("c-1"))
        assert made.status_code == 201, made.text
        again = a.post("/admin/voucher-campaigns", json=CAMPAIGN, headers=key("c-1"))
        assert (again.status_code, again.content) == (201, made.content)  # not 409 voucher_campaign_exists
        other = a.post("/admin/voucher-campaigns", json={**CAMPAIGN, "amount": "6.00"}, headers=key("c-1"))
        assert other.status_code == 409 and other.json()["error"]["code"] == "idempotency_key_reused"
        assert count(p, VoucherCampaign) == 1

        manual = {"name": "gift", "amount": "2.00", "on": "manual", "valid_for": "1d", "per_account": 3}
        assert a.post("/admin/voucher-campaigns", json=manual).status_code == 201
        g1 = a.post("/admin/voucher-campaigns/gift/grant", json={"user": "bo"}, headers=key("g-1"))
        g2 = a.post("/admin/voucher-campaigns/gift/grant", json={"user": "bo"}, headers=key("g-1"))
        assert g1.status_code == 201, g1.text
        assert (g2.status_code, g2.content) == (201, g1.content)
        assert count(p, VoucherGrant) == 1  # per_account 3 would have allowed a second one
        assert count(p, LedgerTransaction, LedgerTransaction.kind == "voucher") == 1
        g3 = a.post("/admin/voucher-campaigns/gift/grant", json={"user": "bo"}, headers=key("g-2"))
        assert g3.status_code == 201 and g3.json()["id"] != g1.json()["id"]

        f1 = a.post("/admin/invoices/finalize", json={}, headers=key("f-1"))
        f2 = a.post("/admin/invoices/finalize", json={}, headers=key("f-1"))
        assert f1.status_code == 200, f1.text
        assert (f2.status_code, f2.content) == (200, f1.content)
        f3 = a.post("/admin/invoices/finalize", json={"period": "2026-01"}, headers=key("f-1"))
        assert f3.status_code == 409 and f3.json()["error"]["code"] == "idempotency_key_reused"


def test_keys_belong_to_their_caller(live: LiveServer) -> None:
    p = live.platform
    with live.new_user("cy", topup=None) as cy, live.new_user("di", topup=None) as di, live.admin() as a:
        assert a.post("/admin/voucher-campaigns", json=CAMPAIGN).status_code == 201
        r1 = cy.post("/vouchers/redeem", json={"code": "HELLO-2026"}, headers=key("mine"))
        r2 = di.post("/vouchers/redeem", json={"code": "HELLO-2026"}, headers=key("mine"))
        assert (r1.status_code, r2.status_code) == (201, 201), (r1.text, r2.text)
        assert r1.json()["id"] != r2.json()["id"]
        assert count(p, VoucherGrant) == 2
        assert cy.get("/vouchers").json()[0]["id"] == r1.json()["id"]
        assert di.get("/vouchers").json()[0]["id"] == r2.json()["id"]


def test_an_error_is_not_stored_so_a_retry_can_succeed(live: LiveServer) -> None:
    with live.new_user("ed", topup=None) as ed, live.admin() as a:
        body = {"code": "HELLO-2026"}
        missing = ed.post("/vouchers/redeem", json=body, headers=key("r-1"))
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "voucher_code_not_found"
        assert count(live.platform, IdempotencyRecord) == 0
        assert a.post("/admin/voucher-campaigns", json=CAMPAIGN).status_code == 201
        ok = ed.post("/vouchers/redeem", json=body, headers=key("r-1"))
        assert ok.status_code == 201, ok.text
        assert ed.get("/vouchers").json()[0]["remaining"] == "5.00"


def test_ten_concurrent_redeems_with_one_key_grant_once_and_answer_alike(live: LiveServer) -> None:
    p = live.platform
    with live.new_user("fay", topup=None) as fay, live.admin() as a:
        assert a.post("/admin/voucher-campaigns", json=CAMPAIGN).status_code == 201
        token = fay.headers["Authorization"]

        def redeem(_: int) -> tuple[int, bytes]:
            with httpx.Client(base_url=str(fay.base_url), headers={"Authorization": token}, timeout=60) as c:
                r = c.post("/vouchers/redeem", json={"code": "HELLO-2026"}, headers=key("burst"))
                return r.status_code, r.content

        with ThreadPoolExecutor(max_workers=10) as pool:
            answers = list(pool.map(redeem, range(10)))
        assert len(set(answers)) == 1, answers  # without the key's guard: one 201 and nine 409s
        assert answers[0][0] == 201
        assert count(p, VoucherGrant) == 1
        assert count(p, LedgerTransaction, LedgerTransaction.kind == "voucher") == 1


def test_the_header_is_in_the_openapi_document_of_every_money_route(live: LiveServer) -> None:
    doc = httpx.get(live.url + "/openapi.json", timeout=30).json()
    routes = [
        "/api/v1/admin/users/{name}/topup",
        "/api/v1/admin/teams/{name}/topup",
        "/api/v1/vouchers/redeem",
        "/api/v1/admin/voucher-campaigns",
        "/api/v1/admin/voucher-campaigns/{name}/grant",
        "/api/v1/admin/invoices/finalize",
    ]
    for route in routes:
        params = doc["paths"][route]["post"].get("parameters", [])
        header = [q for q in params if q["in"] == "header" and q["name"].lower() == "idempotency-key"]
        assert header and header[0]["schema"]["anyOf"][0]["maxLength"] == 120, (route, params)


# --- the service itself: a crashed request's claim, and a running one ---------------------------


def test_a_crashed_requests_claim_is_taken_over_after_its_lease(platform: Platform, fake_clock: FakeClock) -> None:
    with platform.db.write() as s:
        s.add(
            IdempotencyRecord(
                scope="user:1 POST /x",
                key="k",
                request_hash=idempotency.request_hash({"a": 1}),
                response_json=idempotency.PENDING + "dead",
                created_at_ms=fake_clock.now_ms(),
            )
        )
    calls: list[int] = []

    def work() -> tuple[int, object]:
        calls.append(1)
        return 201, {"n": len(calls)}

    fake_clock.advance(ms=idempotency.LEASE_MS + 1)
    assert idempotency.run_once(platform, "user:1 POST /x", "k", {"a": 1}, work) == (201, {"n": 1})
    assert idempotency.run_once(platform, "user:1 POST /x", "k", {"a": 1}, work) == (201, {"n": 1})
    assert calls == [1]


def test_a_duplicate_of_a_running_request_waits_then_says_in_progress(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    with platform.db.write() as s:
        s.add(
            IdempotencyRecord(
                scope="user:1 POST /x",
                key="k",
                request_hash=idempotency.request_hash({"a": 1}),
                response_json=idempotency.PENDING + "alive",
                created_at_ms=platform.clock.now_ms(),
            )
        )
    monkeypatch.setattr(idempotency, "WAIT_S", 0.2)

    def work() -> tuple[int, object]:
        raise AssertionError("a duplicate must not run while the first one does")

    with pytest.raises(Conflict) as info:
        idempotency.run_once(platform, "user:1 POST /x", "k", {"a": 1}, work)
    assert info.value.code == "idempotency_request_in_progress"
