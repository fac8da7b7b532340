from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response

from danlu.api.deps import CurrentUser, PlatformDep
from danlu.api.schemas.accounts import BalanceOut, LedgerLineOut, UserOut
from danlu.api.schemas.common import errors
from danlu.api.schemas.teams import TeamQuery
from danlu.billing import service as billing

router = APIRouter(tags=["account"], responses=errors(401))


@router.get("/me", response_model=UserOut)
async def me(user: CurrentUser) -> UserOut:
    return UserOut(name=user.name, is_admin=user.is_admin)


@router.get("/balance", response_model=BalanceOut, responses=errors(404))
def balance(p: PlatformDep, user: CurrentUser, team: TeamQuery = None) -> BalanceOut:
    return BalanceOut(**billing.balance(p, user, team).as_dict())


@router.get("/ledger", response_model=list[LedgerLineOut], responses=errors(404))
def ledger(
    response: Response,
    p: PlatformDep,
    user: CurrentUser,
    limit: Annotated[int, Query(ge=1, le=1000, description="Newest entries")] = 100,
    team: TeamQuery = None,
    before: Annotated[
        int | None, Query(ge=1, le=2**31 - 1, description="Only older transactions: the last line's transaction_id")
    ] = None,
) -> list[LedgerLineOut]:
    """The cash ledger, newest first, a page at a time: a full page sets ``X-Next-Before``, the cursor
    of the next (``?before=``)."""
    rows = [LedgerLineOut(**r) for r in billing.statement(p, user, limit, team, before)]  # type: ignore[arg-type]
    if len(rows) == limit:
        response.headers["X-Next-Before"] = str(rows[-1].transaction_id)
    return rows
