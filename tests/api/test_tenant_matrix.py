"""The cross-tenant matrix, generated from the app's route table.

Every route whose path carries an object id (``{..._id}``), called by tenant B on tenant A's real
object, answers 404 with our error body — the same answer as for an id that does not exist, so it
leaks nothing — and changes nothing: A's objects seen through A's own API, both balances and
ledgers, and the database rows behind them are identical before and after. Every operator-only
route answers a non-admin 403 ``admin_only`` and changes nothing either.

A new route is covered without anyone remembering to: the routes are read from the app, a request
body is derived from the route's request model, and an id parameter with no fixture object fails
the test with a message saying which fixture to add.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh
import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic import BaseModel
from sqlalchemy import select

from danlu.accounts.policies import Policy
from danlu.api.deps import route_policy
from danlu.console.web import ConsoleRoute
from danlu.core.clock import FakeClock
from danlu.db.models import (
    Account,
    AllocationRow,
    ApiToken,
    Budget,
    Gpu,
    Instance,
    Job,
    LedgerEntry,
    LedgerTransaction,
    PortLink,
    TeamMember,
    User,
    VoucherGrant,
    Webhook,
)
from tests.conftest import LiveServer, make_platform, require_sandbox, wait_for

ID_PARAM = re.compile(r"\{(\w+_id)(?::\w+)?\}")
# Ids of no object; others are instances.
# Each test calls every route with each of A's objects: ~30 s alone; 10× that on a loaded machine
# (the default 120 s ran out in one CI run with other suites beside it).
pytestmark = pytest.mark.timeout(400)
FAKE_IDS = {
    "job_id": "j-0000000000",
    "budget_id": "987654321",
    "hold_id": "h-0000000000",
    "webhook_id": "987654321",
    "token_id": "987654321",
    "key_id": "987654321",
    "link_id": "987654321",
    "snapshot_id": "s-0000000000",
}
# Path parameters that name no object, with a valid value: the refusal must be about the object.
NOT_IDS = {"port": "8888"}
# Sample values for request-body fields, by field name; anything else gets a value from its type.
# Required query parameters: "1", or what the route's pattern takes (a refused query would make its 404 prove
# nothing).
SAMPLE_QUERY = {"sha256": "0" * 64}
SAMPLE_FIELDS: dict[str, Any] = {
    "password": "intruder-password-1",
    "new": "intruder-password-1",
    "command": ["sh", "-c", "echo intruder; sleep 600"],
    "gpu_model": "T4",
    "gpu_count": 1,
    "gpus": 1,
    "amount": "1.00",
    "price_per_hour": "1.00",
    "reason": "cross-tenant drill",
    "name": "intruder",
    "stop": "23:00",
    "start": "08:00",
    "source": "/nonexistent/rootfs",
    "valid_for": "72h",
    "on": "manual",
    "user": "tenant-b",
    "role": "owner",
    "code": "INTRUDER-CODE",
    "team": "a-team",
    "percent": "20",
    "days": ["mon"],
    "from_": "23:00",
    "to": "08:00",
    "multiplier": "0.5",
    "quote_id": "q-" + "0" * 24,
    "term": "package-day",
    "discount": "50",
    "institution": "Intruder University",
}


@dataclass(frozen=True)
class RouteInfo:
    method: str
    path: str  # full path template, e.g. /api/v1/instances/{instance_id}/stop
    path_params: tuple[str, ...]
    query_required: tuple[str, ...]
    body_model: type[BaseModel] | None
    admin_only: bool

    @property
    def id_params(self) -> tuple[str, ...]:
        return tuple(ID_PARAM.findall(self.path))

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


def route_table(app: FastAPI) -> list[RouteInfo]:
    """Every (method, path) the app serves, flattened through included routers."""
    out = []
    for ctx in iter_route_contexts(app.routes):
        route = ctx.original_route
        if not isinstance(route, APIRoute) or isinstance(route, ConsoleRoute):
            continue  # the console's pages: test_another_tenants_console_pages_answer_404_and_change_nothing
        body = route.body_field
        model = body.field_info.annotation if body is not None else None
        optional = [a for a in typing.get_args(model) if a is not type(None)] if typing.get_origin(model) else []
        if len(optional) == 1:  # ``Model | None``: an optional body (start's resize, a snapshot's name)
            model = optional[0]
        assert model is None or (isinstance(model, type) and issubclass(model, BaseModel)), (
            f"{ctx.path}: request body {model!r} is not a pydantic model; teach the tenant matrix to build it"
        )
        for method in sorted(ctx.methods or ()):
            out.append(
                RouteInfo(
                    method=method,
                    path=str(ctx.path),
                    path_params=tuple(p.name for p in route.dependant.path_params),
                    query_required=tuple(q.name for q in route.dependant.query_params if q.field_info.is_required()),
                    body_model=model,
                    admin_only=route_policy(route.dependant) is Policy.OPERATOR,
                )
            )
    return out


def _value_for(annotation: Any, name: str) -> Any:
    if name in SAMPLE_FIELDS:
        return SAMPLE_FIELDS[name]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _value_for(args[0], name) if args else None
    if origin is typing.Annotated:
        return _value_for(typing.get_args(annotation)[0], name)
    if origin is typing.Literal:
        return typing.get_args(annotation)[0]
    if annotation is bool:
        return False
    if annotation is int:
        return 1
    if annotation is float:
        return 1.0
    if annotation is str:
        return "x"
    if origin is list or annotation is list:
        return []
    if origin is dict or annotation is dict:
        return {}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return minimal_body(annotation)
    raise AssertionError(f"no sample value for field {name!r} ({annotation!r}): add one to SAMPLE_FIELDS")


def minimal_body(model: type[BaseModel]) -> dict[str, Any]:
    """The smallest body the model accepts: its required fields, from SAMPLE_FIELDS or their type."""
    body = {name: _value_for(f.annotation, name) for name, f in model.model_fields.items() if f.is_required()}
    model.model_validate(body)  # a body the route would reject would make its 404 prove nothing
    return body


@dataclass
class World:
    """Tenant A's objects, the intruder B, and the live server they share."""

    live: LiveServer
    app: FastAPI
    a: httpx.Client
    b: httpx.Client
    a_name: str
    team: str  # A's team, with A's member M renting and running a job on it
    objects: dict[str, list[str]] = field(default_factory=dict)  # id parameter name -> A's objects
    a_views: list[str] = field(default_factory=list)  # A's own GETs that show A's objects


@pytest.fixture
def world(db_url: str, tmp_path: Path) -> Iterator[World]:
    require_sandbox()
    clock = FakeClock()
    p, token = make_platform(
        db_url, tmp_path / "data", clock, stop_grace_s=2, tick_interval_s=0.1, meter_interval_s=1.0
    )
    with LiveServer(p, token) as live:
        with live.admin() as adm:
            assert adm.put("/admin/prices/A100-80GB", json={"price_per_hour": "36.00"}).status_code == 200
            assert adm.put("/admin/prices/T4", json={"price_per_hour": "3.60"}).status_code == 200
            assert adm.put("/admin/plans/package-day", json={"discount": "10"}).status_code == 200
        a, b = live.new_user("tenant-a"), live.new_user("tenant-b")
        # A's package of one T4 (77.76): A's T4 rental below runs on it.
        hold = a.post("/holds", json={"term": "package-day", "gpu_model": "T4"})
        assert hold.status_code == 201, hold.text
        hid = hold.json()["id"]
        cmd = ["sh", "-c", "echo hello-from-a; exec sleep 600"]
        running = a.post("/instances", json={"gpu_model": "T4", "command": cmd, "name": "a-running"})
        stopped = a.post("/instances", json={"gpu_model": "A100-80GB", "command": cmd, "name": "a-stopped"})
        assert running.status_code == 201 and stopped.status_code == 201, (running.text, stopped.text)
        rid, sid = running.json()["id"], stopped.json()["id"]
        # A's team: A owns it, member M rents and runs a job on the team's account; B is outside.
        m = live.new_user("team-member", topup=None)
        assert a.post("/teams", json={"name": "a-team"}).status_code == 201
        assert a.post("/teams/a-team/members", json={"user": "team-member", "role": "member"}).status_code == 201
        with live.admin() as adm:
            assert adm.post("/admin/teams/a-team/topup", json={"amount": "100.00"}).status_code == 200
            gift = {"name": "matrix-gift", "amount": "1.00", "valid_for": "7d", "on": "manual"}
            assert adm.post("/admin/voucher-campaigns", json=gift).status_code == 201
            assert adm.post("/admin/voucher-campaigns/matrix-gift/grant", json={"team": "a-team"}).status_code == 201
        team_rent = m.post(
            "/instances", json={"gpu_model": "A100-80GB", "command": cmd, "name": "t-run", "team": "a-team"}
        )
        assert team_rent.status_code == 201, team_rent.text
        tid = team_rent.json()["id"]
        team_job = m.post(
            "/jobs",
            json={
                "command": ["sh", "-c", "echo job-of-team; exec sleep 600"],
                "gpu_types": ["A100-80GB"],
                "team": "a-team",
            },
        )
        assert team_job.status_code == 201, team_job.text
        tjid = team_job.json()["id"]
        wait_for(lambda: "hello-from-a" in a.get(f"/instances/{sid}/logs").json()["text"])
        assert a.post(f"/instances/{sid}/stop").status_code == 200
        wait_for(lambda: a.get(f"/instances/{sid}").json()["status"] == "stopped")
        job = a.post("/jobs", json={"command": ["sh", "-c", "echo job-of-a; exec sleep 600"], "gpu_types": ["T4"]})
        assert job.status_code == 201, job.text
        jid = job.json()["id"]
        wait_for(lambda: a.get(f"/jobs/{jid}").json()["status"] == "running")
        wait_for(lambda: a.get(f"/jobs/{tjid}").json()["status"] == "running")
        wait_for(lambda: "hello-from-a" in a.get(f"/instances/{rid}/logs").json()["text"])
        wait_for(lambda: "job-of-a" in a.get(f"/jobs/{jid}/logs").json()["text"])
        with p.db.read() as s:
            run_id = s.scalars(select(Instance.id).where(Instance.job_id == jid)).one()
            team_run_id = s.scalars(select(Instance.id).where(Instance.job_id == tjid)).one()
        # Time passes once, so A has billed seconds and usage in the ledger, then stands still:
        # every snapshot below must be identical unless an intruder's call changed something.
        clock.advance(30)
        wait_for(lambda: a.get(f"/instances/{rid}").json()["billed_seconds"] == 30)
        wait_for(lambda: any(e.get("kind") == "usage" for e in a.get("/ledger").json()))
        budgets = [
            a.put("/budgets", json={"instance": rid, "hard": "50.00"}),
            a.put("/budgets", params={"team": "a-team"}, json={"member": "team-member", "soft": "20.00"}),
        ]
        assert all(r.status_code == 200 for r in budgets), [r.text for r in budgets]
        # A's webhook: a public address (an IP literal, so nothing resolves), for a kind that does
        # not fire here, so its delivery counts stand still between snapshots.
        hook = a.post("/webhooks", json={"url": "https://1.1.1.1/a-hook", "kinds": ["member_removed"]})
        assert hook.status_code == 201, hook.text
        public = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
        key = a.post("/ssh-keys", json={"public_key": public})  # A's SSH key for the gateway (issue 25)
        assert key.status_code == 201, key.text
        named = a.post("/tokens", json={"name": "a-laptop"})  # A's named API token (issue 12)
        assert named.status_code == 201, named.text
        link = a.post(f"/instances/{rid}/ports/8888/links")  # A's link to an app of hers (issue 25)
        assert link.status_code == 201, link.text
        snap = a.post(f"/instances/{sid}/snapshots", json={"name": "a-snap"})  # A's snapshot (issue 26)
        assert snap.status_code == 201, snap.text
        app = live.server.config.app
        assert isinstance(app, FastAPI)
        w = World(live=live, app=app, a=a, b=b, a_name="tenant-a", team="a-team")
        # Each id parameter a route may carry -> A's real objects of that kind. A new kind of id in
        # a route fails test_every_id_route_is_covered until it gets its fixture objects here.
        w.objects = {
            "instance_id": [rid, sid, run_id, tid, team_run_id],
            "job_id": [jid, tjid],
            "budget_id": [str(r.json()["id"]) for r in budgets],
            "hold_id": [hid],
            "webhook_id": [str(hook.json()["id"])],
            "token_id": [str(named.json()["id"])],
            "key_id": [str(key.json()["id"])],
            "link_id": [str(link.json()["id"])],
            "snapshot_id": [str(snap.json()["id"])],
        }
        w.a_views = [
            "/instances",
            "/instances?all=true",
            *(f"/instances/{i}{suffix}" for i in (rid, sid) for suffix in ("", "/events", "/logs")),
            "/jobs",
            "/snapshots",
            *(f"/jobs/{jid}{suffix}" for suffix in ("", "/events", "/logs")),
            "/balance",
            "/ledger",
            "/me",
            *(f"/instances/{tid}{suffix}" for suffix in ("", "/events")),
            f"/jobs/{tjid}",
            "/teams",
            "/teams/a-team",
            "/balance?team=a-team",
            "/ledger?team=a-team",
            "/vouchers?team=a-team",
            "/budgets",
            "/budgets?team=a-team",
            "/holds",
            f"/holds/{hid}",
            "/webhooks",
            f"/webhooks/{hook.json()['id']}/deliveries",
            f"/instances/{rid}/links",
        ]
        try:
            yield w
        finally:
            for iid in (rid, sid, tid):
                a.delete(f"/instances/{iid}")
            a.post(f"/jobs/{jid}/cancel")
            a.post(f"/jobs/{tjid}/cancel")
            # The run must be gone before the server is: a run outlives a stopped server by design.
            wait_for(lambda: a.get(f"/jobs/{jid}").json()["status"] == "cancelled")
            wait_for(lambda: a.get(f"/jobs/{tjid}").json()["status"] == "cancelled")
            m.close()
            a.close()
            b.close()
    p.db.engine.dispose()


def db_state(live: LiveServer) -> dict[str, Any]:
    """The rows an intruder could change, without the loop's own bookkeeping (last seen alive)."""
    with live.platform.db.read() as s:
        return {
            "instances": [
                (i.id, i.user_id, i.status, i.status_reason, i.run_handle, i.current_allocation_id, i.exit_code)
                for i in s.scalars(select(Instance).order_by(Instance.id))
            ],
            "allocations": [
                (x.id, x.instance_id, x.started_at_ms, x.ended_at_ms, x.billed_until_ms, x.billed_minor, x.settled)
                for x in s.scalars(select(AllocationRow).order_by(AllocationRow.id))
            ],
            "jobs": [
                (j.id, j.status, j.status_reason, j.cancel_requested, j.current_instance_id, j.attempts)
                for j in s.scalars(select(Job).order_by(Job.id))
            ],
            "gpus": [(g.id, g.allocation_id) for g in s.scalars(select(Gpu).order_by(Gpu.id))],
            "users": [
                (u.id, u.name, u.token_hash, u.suspended_reason, u.gpu_quota, u.default_team_id)
                for u in s.scalars(select(User).order_by(User.id))
            ],
            "accounts": [(x.id, x.balance_minor) for x in s.scalars(select(Account).order_by(Account.id))],
            "team_members": [
                (t.team_id, t.user_id, t.role, t.gpu_quota)
                for t in s.scalars(select(TeamMember).order_by(TeamMember.id))
            ],
            "voucher_grants": [
                (g.id, g.billing_account_id) for g in s.scalars(select(VoucherGrant).order_by(VoucherGrant.id))
            ],
            "budgets": [
                (b.id, b.billing_account_id, b.scope, b.period, b.soft_minor, b.hard_minor)
                for b in s.scalars(select(Budget).order_by(Budget.id))
            ],
            "webhooks": [
                (h.id, h.user_id, h.url, h.kinds, h.deleted_at_ms)
                for h in s.scalars(select(Webhook).order_by(Webhook.id))
            ],
            "api_tokens": [
                (t.id, t.user_id, t.revoked_at_ms) for t in s.scalars(select(ApiToken).order_by(ApiToken.id))
            ],
            "port_links": [
                (x.id, x.instance_id, x.port, x.revoked_at_ms)
                for x in s.scalars(select(PortLink).order_by(PortLink.id))
            ],
            "transactions": len(s.scalars(select(LedgerTransaction.id)).all()),
            "entries": len(s.scalars(select(LedgerEntry.id)).all()),
        }


def _by_id(body: Any) -> Any:
    """A listing keyed by id: rows created in the same millisecond have no defined order
    (``ORDER BY created_at_ms``), and the matrix checks content, not order."""
    if isinstance(body, list) and body and all(isinstance(x, dict) and "id" in x for x in body):
        return {x["id"]: x for x in body}
    return body


def snapshot(w: World) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for who, client in (("A", w.a), ("B", w.b)):
        views = (
            w.a_views
            if who == "A"
            else ["/instances?all=true", "/jobs", "/balance", "/ledger", "/me", "/teams", "/vouchers", "/webhooks"]
        )
        for path in views:
            r = client.get(path)
            seen[f"{who} GET {path}"] = (r.status_code, _by_id(r.json()))
    seen["database"] = db_state(w.live)
    return seen


def diff(before: dict[str, Any], after: dict[str, Any], where: str = "") -> list[str]:
    out = []
    for k in sorted(set(before) | set(after), key=str):
        old, new = before.get(k), after.get(k)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            out += diff(old, new, f"{where}{k} ")
        else:
            out.append(f"{where}{k}: {old!r} -> {new!r}")
    return out


def call(client: httpx.Client, route: RouteInfo, values: dict[str, str]) -> httpx.Response:
    path = route.path
    for name in route.path_params:
        path = re.sub(r"\{" + name + r"(:\w+)?\}", values[name], path)
    params = {q: SAMPLE_QUERY.get(q, "1") for q in route.query_required}
    body = minimal_body(route.body_model) if route.body_model is not None else None
    url = client.base_url.copy_with(path=path)  # /api/v1/… and the root's /metrics alike
    return client.request(route.method, url, json=body, params=params)


def _error(r: httpx.Response) -> dict[str, Any]:
    body = r.json()
    assert set(body) == {"error"} and {"code", "message"} <= set(body["error"]), f"not our error body: {r.text}"
    assert isinstance(body["error"]["code"], str) and body["error"]["message"], r.text
    return dict(body["error"])


def run_checked(
    w: World,
    calls: list[tuple[RouteInfo, dict[str, str]]],
    expect: Callable[[RouteInfo, dict[str, str], httpx.Response], str | None],
) -> None:
    """Make each call as B; ``expect`` returns a problem or None. After each call A's world must be unchanged."""
    problems: list[str] = []
    before = snapshot(w)
    for route, values in calls:
        r = call(w.b, route, values)
        problem = expect(route, values, r)
        if problem:
            problems.append(f"{route} with {values}: {problem}")
        after = snapshot(w)
        changed = diff(before, after)
        if changed:
            problems.append(f"{route} with {values} by tenant B changed tenant A's world: " + "; ".join(changed))
            before = after
    assert not problems, "\n".join(problems)


def test_another_tenants_object_answers_404_and_changes_nothing(world: World) -> None:
    routes = [r for r in route_table(world.app) if r.id_params and not r.admin_only]
    assert routes, "no id-bearing route found: the route table reader is broken"
    calls: list[tuple[RouteInfo, dict[str, str]]] = []
    for route in routes:
        missing = [p for p in route.id_params if p not in world.objects]
        assert not missing, (
            f"{route} has id parameter(s) {missing} with no fixture object: add tenant A's objects of "
            "that kind to World.objects in the `world` fixture of tests/api/test_tenant_matrix.py"
        )
        other = [p for p in route.path_params if p not in route.id_params and p not in NOT_IDS]
        assert not other, f"{route}: path parameter(s) {other} are not ids; give the matrix a value for them"
        for idx in range(max(len(world.objects[p]) for p in route.id_params)):
            values = {p: world.objects[p][idx % len(world.objects[p])] for p in route.id_params}
            values |= {p: NOT_IDS[p] for p in route.path_params if p in NOT_IDS}
            calls.append((route, values))

    def expect(route: RouteInfo, values: dict[str, str], r: httpx.Response) -> str | None:
        if r.status_code != 404:
            return f"answered {r.status_code} {r.text[:200]}, not 404"
        err = _error(r)
        if err["code"] == "not_found" and "no such endpoint" in err["message"]:
            return "the route itself was not found: the matrix built a wrong path"
        # The same answer as for an object that does not exist: nothing about A's object leaks.
        fake = {p: NOT_IDS.get(p) or FAKE_IDS.get(p, "i-0000000000") for p in values}
        r2 = call(world.b, route, fake)
        ghost = _error(r2) if r2.status_code == 404 else {"code": f"status {r2.status_code}", "message": ""}
        masked = err["message"]
        for p, v in values.items():
            if p not in NOT_IDS:
                masked = masked.replace(v, fake[p])
        if (r2.status_code, ghost["code"], ghost["message"]) != (404, err["code"], masked):
            return f"answers {err} on A's object but {r2.status_code} {ghost} on a missing one"
        return None

    run_checked(world, calls, expect)
    numbers = ("budget_id", "webhook_id", "token_id", "key_id", "link_id")  # small numbers: found in any text
    a_ids = {i for kind, ids in world.objects.items() if kind not in numbers for i in ids}
    for path in ("/instances?all=true", "/jobs", "/ledger?limit=1000", "/admin/sandboxes"):
        text = world.b.get(path).text
        assert not any(i in text for i in a_ids), f"tenant B's {path} shows tenant A's objects: {text[:300]}"
    covered = {str(route) for route, _ in calls}
    in_table = {
        f"{r.method} {r.path}"
        for r in route_table(world.app)
        if ID_PARAM.search(r.path) and not r.path.startswith("/api/v1/admin/") and not r.admin_only
    }
    assert covered == in_table, f"id-bearing routes not covered: {sorted(in_table - covered)}"


def test_operator_routes_answer_403_to_a_tenant_and_change_nothing(world: World) -> None:
    table = route_table(world.app)
    admin_routes = [r for r in table if r.admin_only]
    under_admin = {str(r) for r in table if r.path.startswith("/api/v1/admin/")}
    assert under_admin <= {str(r) for r in admin_routes}, (
        f"routes under /admin that a non-admin may call: {sorted(under_admin - {str(r) for r in admin_routes})}"
    )
    # Path values aimed at A (the most damaging target) or at real host objects.
    by_segment = {
        "users": world.a_name,
        "hosts": "local",
        "images": "host",
        "prices": "T4",
        "teams": world.team,
        "voucher-campaigns": "matrix-gift",
        "student": world.a_name,
        "tariffs": "1",
        "plans": "package-day",
    }
    calls: list[tuple[RouteInfo, dict[str, str]]] = []
    for route in admin_routes:
        values: dict[str, str] = {}
        for name in route.path_params:
            if name in world.objects:
                values[name] = world.objects[name][0]
                continue
            segment = route.path.split("{" + name)[0].rstrip("/").rsplit("/", 1)[-1]
            assert segment in by_segment, f"{route}: no value for path parameter {name!r}; add one to by_segment"
            values[name] = by_segment[segment]
        calls.append((route, values))

    def expect(route: RouteInfo, values: dict[str, str], r: httpx.Response) -> str | None:
        if r.status_code != 403:
            return f"answered {r.status_code} {r.text[:200]}, not 403"
        code = _error(r)["code"]
        return None if code == "admin_only" else f"error code {code!r}, not 'admin_only'"

    run_checked(world, calls, expect)
    assert {str(r) for r, _ in calls} == {str(r) for r in admin_routes}


def test_another_teams_routes_answer_404_and_change_nothing(world: World) -> None:
    """Every route naming a team (``/teams/{name}...``), called by B, outside A's team, on it:
    404 ``team_not_found``, as for a team that does not exist, and nothing changes."""
    routes = [r for r in route_table(world.app) if r.path.startswith("/api/v1/teams/{") and not r.admin_only]
    assert routes, "no team route found"
    calls = [
        (r, {"name": world.team, **({"user_name": world.a_name} if "user_name" in r.path_params else {})})
        for r in routes
    ]

    def expect(route: RouteInfo, values: dict[str, str], r: httpx.Response) -> str | None:
        if r.status_code != 404 or _error(r)["code"] != "team_not_found":
            return f"answered {r.status_code} {r.text[:200]}, not 404 team_not_found"
        ghost = call(world.b, route, {**values, "name": "no-such-team"})
        if (ghost.status_code, _error(ghost)["message"].replace("no-such-team", world.team)) != (
            404,
            _error(r)["message"],
        ):
            return f"answers differently for a team that does not exist: {ghost.text[:200]}"
        return None

    run_checked(world, calls, expect)
    for path in (f"/balance?team={world.team}", f"/ledger?team={world.team}", f"/vouchers?team={world.team}"):
        r = world.b.get(path)
        assert r.status_code == 404 and _error(r)["code"] == "team_not_found", (path, r.text)


# A form field every console form might want: the values are valid where they can be, so a
# refusal proves the object was refused, not the field.
CONSOLE_FORM = {
    "reason": "mine now", "amount": "1.00", "password": "intruder-password-1", "gpus": "1", "role": "member",
    "stop": "23:00", "start": "08:00", "days": "mon-fri", "key": "k-1", "quota": "1", "expected_refund": "0.00",
    "shown_at_ms": "0",
}  # fmt: skip


def test_another_tenants_console_pages_answer_404_and_change_nothing(world: World) -> None:
    """Every console route with an object in its path, signed in as tenant B with B's CSRF token:
    a page is 404, a form is refused (a 303 back with the error, or 404) and A's world is unchanged."""
    import re as _re

    from tests.console.helpers import csrf_of, set_password, sign_in

    set_password(world.live, "tenant-b", "tenant-b-password")
    b = sign_in(world.live, "tenant-b", "tenant-b-password")
    csrf = csrf_of(b)
    values = {
        "instance_id": world.objects["instance_id"],
        "job_id": world.objects["job_id"],
        "hold_id": world.objects["hold_id"],
        "webhook_id": world.objects["webhook_id"],
        "token_id": world.objects["token_id"],
        "link_id": world.objects["link_id"],
        "snapshot_id": world.objects["snapshot_id"],
        "port": [NOT_IDS["port"]],  # a valid port: the refusal must be about the object
        "name": [world.team, world.a_name],
        "user_name": [world.a_name, "team-member"],
    }
    routes = []
    for ctx in iter_route_contexts(world.app.routes):
        route = ctx.original_route
        if (
            isinstance(route, ConsoleRoute)
            and "{" in route.path
            and route.path not in ("/lang/{lang}", "/invoices/{period}")
        ):
            routes.append((route, sorted(ctx.methods or ())))
    assert len(routes) >= 20, [r.path for r, _ in routes]
    problems: list[str] = []
    before = snapshot(world)
    for route, methods in routes:
        names = _re.findall(r"\{(\w+)\}", route.path)
        missing = [n for n in names if n not in values]
        assert not missing, f"console route {route.path}: give the matrix tenant A's objects for {missing}"
        for idx in range(max(len(values[n]) for n in names)):
            path = route.path
            for n in names:
                path = path.replace("{" + n + "}", values[n][idx % len(values[n])])
            for method in methods:
                if method == "GET":
                    r = b.get(path)
                    ok = r.status_code == 404
                else:
                    r = b.post(
                        path, data={"csrf": csrf, **CONSOLE_FORM}, headers={"referer": f"{world.live.url}/account"}
                    )
                    ok = r.status_code == 404 or (r.status_code == 303 and r.headers["location"] == "/account")
                if not ok:
                    problems.append(f"{method} {path}: answered {r.status_code} {r.headers.get('location', '')}")
                after = snapshot(world)
                changed = diff(before, after)
                if changed:
                    problems.append(f"{method} {path} by tenant B changed tenant A's world: " + "; ".join(changed))
                    before = after
    assert not problems, "\n".join(problems)


def test_another_tenants_objects_refuse_every_websocket_route(world: World) -> None:
    """Sessions (exec, shell and what comes after them) are WebSocket routes, read from the app like
    the REST ones: tenant B, with each of A's objects, gets the not-found status frame and close 4404,
    and A's instance is untouched."""
    import json as _json

    from fastapi.routing import APIWebSocketRoute
    from websockets.sync.client import connect

    routes = [
        str(ctx.path)
        for ctx in iter_route_contexts(world.app.routes)
        if isinstance(ctx.original_route, APIWebSocketRoute)
    ]
    assert routes, "no WebSocket route found: the route reader is broken"
    token_b = world.b.headers["authorization"].split()[1]
    before = snapshot(world)
    for path in routes:
        names = ID_PARAM.findall(path)
        assert names, f"{path}: a WebSocket route without an object id; teach the matrix what it reaches"
        for value in world.objects[names[0]]:
            url = f"ws://127.0.0.1:{world.live.port}" + path.replace("{" + names[0] + "}", value)
            url = url.replace("{port}", "8888")  # a valid port: the refusal must be about the object
            with connect(url + "?command=true", additional_headers={"Authorization": f"Bearer {token_b}"}) as ws:
                codes = []
                try:
                    while True:
                        message = ws.recv(timeout=30)
                        assert isinstance(message, bytes)
                        codes.append(_json.loads(message[1:])["error"]["code"])  # a session's status frame
                except Exception:
                    pass
                assert ws.close_code == 4404, (path, value, ws.close_code, ws.close_reason)
                assert all(c.endswith("_not_found") for c in codes), (path, value, codes)
                assert (ws.close_reason or "").split(":")[0].endswith("_not_found"), (path, ws.close_reason)
    assert snapshot(world) == before
