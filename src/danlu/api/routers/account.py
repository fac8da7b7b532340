from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from danlu.api.deps import CurrentUser, PlatformDep
from danlu.api.schemas import BalanceOut, UserOut
from danlu.billing import service as billing

router = APIRouter(tags=["account"])


@router.get("/me", response_model=UserOut)
async def me(user: CurrentUser) -> UserOut:
    return UserOut(name=user.name, is_admin=user.is_admin)


@router.get("/balance", response_model=BalanceOut)
async def balance(p: PlatformDep, user: CurrentUser) -> BalanceOut:
    return BalanceOut(**billing.balance(p, user).as_dict())


@router.get("/ledger")
def ledger(p: PlatformDep, user: CurrentUser, limit: int = 100) -> list[dict[str, Any]]:
    return billing.statement(p, user, max(1, min(limit, 1000)))
