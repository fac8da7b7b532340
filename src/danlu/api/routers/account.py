from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from danlu.api.deps import CurrentUser, PlatformDep
from danlu.api.schemas import BalanceOut, TeamQuery, UserOut, errors
from danlu.billing import service as billing

router = APIRouter(tags=["account"], responses=errors(401))


@router.get("/me", response_model=UserOut)
async def me(user: CurrentUser) -> UserOut:
    return UserOut(name=user.name, is_admin=user.is_admin)


@router.get("/balance", response_model=BalanceOut, responses=errors(404))
async def balance(p: PlatformDep, user: CurrentUser, team: TeamQuery = None) -> BalanceOut:
    return BalanceOut(**billing.balance(p, user, team).as_dict())


@router.get("/ledger", responses=errors(404))
def ledger(
    p: PlatformDep,
    user: CurrentUser,
    limit: Annotated[int, Query(ge=1, le=1000, description="Newest entries")] = 100,
    team: TeamQuery = None,
) -> list[dict[str, Any]]:
    return billing.statement(p, user, limit, team)
