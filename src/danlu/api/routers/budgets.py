"""Budgets and hard caps (``/budgets``): per account, per team member, per instance."""

from __future__ import annotations

from fastapi import APIRouter, Response

from danlu.api.deps import CurrentUser, PlatformDep
from danlu.api.paging import ListRoute, paged
from danlu.api.schemas.common import errors
from danlu.api.schemas.money_controls import BudgetIdPath, BudgetIn, BudgetOut, BudgetTeamQuery
from danlu.billing import budgets as svc
from danlu.core.money import format_minor

router = APIRouter(route_class=ListRoute, prefix="/budgets", tags=["budgets"], responses=errors(401))


def _out(v: svc.BudgetView) -> BudgetOut:
    def amount(minor: int | None) -> str | None:
        return None if minor is None else format_minor(minor, v.currency)

    return BudgetOut(
        id=v.id,
        scope=v.scope,
        period=v.period,
        soft=amount(v.soft_minor),
        hard=amount(v.hard_minor),
        spent=format_minor(v.spent_minor, v.currency),
        currency=v.currency,
    )


@router.get("", response_model=list[BudgetOut], **paged("id"), responses=errors(404))
def list_budgets(p: PlatformDep, user: CurrentUser, team: BudgetTeamQuery = None) -> list[BudgetOut]:
    """Your personal account's budgets (or a team's: any member may look), with what each has spent."""
    return [_out(v) for v in svc.list_budgets(p, user, team)]


@router.put("", response_model=BudgetOut, responses=errors(400, 403, 404))
def set_budget(body: BudgetIn, p: PlatformDep, user: CurrentUser, team: BudgetTeamQuery = None) -> BudgetOut:
    """Set (or replace) the budget of one scope. Account and member budgets of a team are set by its
    owners and admins; an instance's by its renter or the team's managers. Neither soft nor hard, or
    both member and instance, answers 422 (``invalid_budget``, ``invalid_budget_scope``)."""
    view = svc.set_budget(
        p,
        user,
        team=team,
        member=body.member,
        instance=body.instance,
        period=body.period,
        soft=body.soft,
        hard=body.hard,
    )
    return _out(view)


@router.delete("/{budget_id}", status_code=204, responses=errors(403, 404))
def remove_budget(budget_id: BudgetIdPath, p: PlatformDep, user: CurrentUser, team: BudgetTeamQuery = None) -> Response:
    svc.remove_budget(p, user, budget_id, team)
    return Response(status_code=204)
