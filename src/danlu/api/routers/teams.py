"""Teams: members and roles (``/teams``), the default payer (``/me/default-team``), and the
operator's team money (``/admin/teams``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from danlu.accounts import teams as svc
from danlu.api.deps import AdminUser, CurrentUser, PlatformDep
from danlu.api.paging import ListRoute, paged
from danlu.api.schemas.accounts import BalanceOut
from danlu.api.schemas.common import UserNamePath, errors
from danlu.api.schemas.idempotency import IdempotencyKeyHeader
from danlu.api.schemas.operator import AmountIn, TopupIn, TopupOut
from danlu.api.schemas.teams import (
    AdminTeamOut,
    DefaultTeamIn,
    DefaultTeamOut,
    MemberIn,
    MemberOut,
    MemberPatch,
    MemberRemovedOut,
    TeamIn,
    TeamNamePath,
    TeamOut,
)
from danlu.billing import idempotency
from danlu.billing import service as billing
from danlu.core.money import format_minor

router = APIRouter(route_class=ListRoute, tags=["teams"], responses=errors(401))
admin_router = APIRouter(route_class=ListRoute, prefix="/admin/teams", tags=["admin"], responses=errors(401, 403))


def _out(v: svc.TeamView) -> TeamOut:
    return TeamOut(
        name=v.name,
        role=v.role,
        members=[MemberOut(user=m.user, role=m.role, gpu_quota=m.gpu_quota) for m in v.members],
    )


@router.post("/teams", response_model=TeamOut, status_code=201, responses=errors(400, 409))
def create(body: TeamIn, p: PlatformDep, user: CurrentUser) -> TeamOut:
    """Create a team with its own billing account; you become its owner."""
    return _out(svc.create_team(p, user, body.name))


@router.get("/teams", response_model=list[TeamOut], **paged("name"))
def list_teams(p: PlatformDep, user: CurrentUser) -> list[TeamOut]:
    return [_out(v) for v in svc.list_teams(p, user)]


@router.get("/teams/{name}", response_model=TeamOut, responses=errors(404))
def show(name: TeamNamePath, p: PlatformDep, user: CurrentUser) -> TeamOut:
    return _out(svc.show_team(p, user, name))


@router.post("/teams/{name}/members", response_model=TeamOut, status_code=201, responses=errors(400, 403, 404, 409))
def add_member(name: TeamNamePath, body: MemberIn, p: PlatformDep, user: CurrentUser) -> TeamOut:
    return _out(svc.add_member(p, user, name, body.user, body.role, body.gpu_quota))


@router.patch("/teams/{name}/members/{user_name}", response_model=TeamOut, responses=errors(400, 403, 404, 409))
def set_member(
    name: TeamNamePath, user_name: UserNamePath, body: MemberPatch, p: PlatformDep, user: CurrentUser
) -> TeamOut:
    clear = "gpu_quota" in body.model_fields_set and body.gpu_quota is None
    return _out(svc.set_member(p, user, name, user_name, role=body.role, gpu_quota=body.gpu_quota, clear_quota=clear))


@router.delete("/teams/{name}/members/{user_name}", response_model=MemberRemovedOut, responses=errors(403, 404, 409))
def remove_member(name: TeamNamePath, user_name: UserNamePath, p: PlatformDep, user: CurrentUser) -> MemberRemovedOut:
    """Nothing is stopped: the member's running instances on the team keep running (each gets an
    event) until an owner or admin stops them."""
    view, running = svc.remove_member(p, user, name, user_name)
    return MemberRemovedOut(team=_out(view), running_instances=running)


@router.put("/me/default-team", response_model=DefaultTeamOut, responses=errors(400, 403, 404))
def default_team(body: DefaultTeamIn, p: PlatformDep, user: CurrentUser) -> DefaultTeamOut:
    return DefaultTeamOut(team=svc.set_default_team(p, user, body.team))


@admin_router.get("", response_model=list[AdminTeamOut], **paged("name"))
def admin_list(p: PlatformDep, _admin: AdminUser) -> list[AdminTeamOut]:
    return [
        AdminTeamOut(
            name=t.name,
            members=t.members,
            balance=format_minor(t.balance_minor, t.currency),
            credit_limit=format_minor(t.credit_limit_minor, t.currency),
            currency=t.currency,
        )
        for t in svc.list_all_teams(p)
    ]


@admin_router.post("/{name}/topup", response_model=TopupOut, responses=errors(400, 404, 409))
def topup(
    name: TeamNamePath,
    body: TopupIn,
    p: PlatformDep,
    admin: AdminUser,
    idempotency_key: IdempotencyKeyHeader = None,
) -> JSONResponse:
    def run() -> tuple[int, Any]:
        view, created = billing.admin_topup(p, name, body.amount, idempotency_key, team=True)
        return 200, TopupOut(**view.as_dict(), created=created).model_dump(mode="json")

    scope = idempotency.scope_of(admin.id, f"POST /admin/teams/{name}/topup")
    status, out = idempotency.run_once(p, scope, idempotency_key, body.model_dump(mode="json"), run)
    return JSONResponse(out, status_code=status)


@admin_router.put("/{name}/credit-limit", response_model=BalanceOut, responses=errors(400, 404))
def credit_limit(name: TeamNamePath, body: AmountIn, p: PlatformDep, _admin: AdminUser) -> BalanceOut:
    return BalanceOut(**billing.set_credit_limit(p, name, body.amount, team=True).as_dict())
