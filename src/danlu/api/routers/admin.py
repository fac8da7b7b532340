from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from danlu.accounts import service as accounts
from danlu.api.deps import AdminUser, PlatformDep
from danlu.api.paging import ListRoute, paged
from danlu.api.schemas.accounts import BalanceOut, UserCreate, UserOut
from danlu.api.schemas.common import GpuModelPath, UserNamePath, errors
from danlu.api.schemas.idempotency import IdempotencyKeyHeader
from danlu.api.schemas.operator import AmountIn, GpuOut, PriceIn, PriceOut, QuotaIn, QuotaOut, TopupIn, TopupOut
from danlu.billing import idempotency, signup
from danlu.billing import service as billing
from danlu.compute import inventory
from danlu.core.money import format_minor

router = APIRouter(route_class=ListRoute, prefix="/admin", tags=["admin"], responses=errors(401, 403))


@router.post("/users", response_model=UserOut, status_code=201, responses=errors(400, 409))
def create(body: UserCreate, p: PlatformDep, _admin: AdminUser) -> UserOut:
    user, token = signup.register_user(p, body.name)
    return UserOut(name=user.name, token=token, is_admin=False)


@router.get("/users", response_model=list[UserOut], **paged("name"))
def list_users(p: PlatformDep, _admin: AdminUser) -> list[UserOut]:
    return [
        UserOut(name=u.name, is_admin=u.is_admin, suspended_reason=u.suspended_reason, sandbox_uid=u.sandbox_uid)
        for u in accounts.list_users(p)
    ]


@router.post("/users/{name}/topup", response_model=TopupOut, responses=errors(400, 404, 409))
def topup(
    name: UserNamePath,
    body: TopupIn,
    p: PlatformDep,
    admin: AdminUser,
    idempotency_key: IdempotencyKeyHeader = None,
) -> JSONResponse:
    def run() -> tuple[int, Any]:
        view, created = billing.admin_topup(p, name, body.amount, idempotency_key)
        return 200, TopupOut(**view.as_dict(), created=created).model_dump(mode="json")

    scope = idempotency.scope_of(admin.id, f"POST /admin/users/{name}/topup")
    status, out = idempotency.run_once(p, scope, idempotency_key, body.model_dump(mode="json"), run)
    return JSONResponse(out, status_code=status)


@router.put("/users/{name}/credit-limit", response_model=BalanceOut, responses=errors(400, 404))
def credit_limit(name: UserNamePath, body: AmountIn, p: PlatformDep, _admin: AdminUser) -> BalanceOut:
    return BalanceOut(**billing.set_credit_limit(p, name, body.amount).as_dict())


@router.put("/users/{name}/gpu-quota", response_model=QuotaOut, responses=errors(400, 404))
def gpu_quota(name: UserNamePath, body: QuotaIn, p: PlatformDep, _admin: AdminUser) -> QuotaOut:
    user = accounts.change_gpu_quota(p, name, body.gpus)
    return QuotaOut(name=user.name, gpus=user.gpu_quota)


@router.get("/gpus", response_model=list[GpuOut], **paged("host", "index"))
def list_gpus(p: PlatformDep, _admin: AdminUser) -> list[GpuOut]:
    """Every GPU of every host, marked simulated or real, with the instance holding it."""
    return [GpuOut(**asdict(g)) for g in inventory.list_gpus(p)]


@router.put("/prices/{gpu_model}", response_model=PriceOut, responses=errors(400))
def set_price(gpu_model: GpuModelPath, body: PriceIn, p: PlatformDep, _admin: AdminUser) -> PriceOut:
    price = billing.set_price(p, gpu_model, body.price_per_hour, body.interruptible_price_per_hour)
    spot = price.interruptible_price_per_hour_minor
    return PriceOut(
        gpu_model=price.gpu_model,
        price_per_hour=format_minor(price.price_per_hour_minor, price.currency),
        interruptible_price_per_hour=None if spot is None else format_minor(spot, price.currency),
        currency=price.currency,
    )
