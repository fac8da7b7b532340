from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header
from sqlalchemy import select

from danlu.accounts.service import create_user, set_gpu_quota
from danlu.api.deps import AdminUser, PlatformDep
from danlu.api.schemas import (
    AmountIn,
    BalanceOut,
    GpuOut,
    PriceIn,
    PriceOut,
    QuotaIn,
    QuotaOut,
    TopupOut,
    UserCreate,
    UserOut,
)
from danlu.billing import service as billing
from danlu.core.money import format_minor
from danlu.db.models import Allocation, Gpu, Host, User

router = APIRouter(prefix="/admin", tags=["admin"])


@router.post("/users", response_model=UserOut, status_code=201)
def create(body: UserCreate, p: PlatformDep, _admin: AdminUser) -> UserOut:
    with p.db.write() as s:
        user, token = create_user(s, body.name, p.clock.now_ms())
        return UserOut(name=user.name, token=token, is_admin=False)


@router.get("/users", response_model=list[UserOut])
def list_users(p: PlatformDep, _admin: AdminUser) -> list[UserOut]:
    with p.db.read() as s:
        return [
            UserOut(name=u.name, is_admin=u.is_admin, suspended_reason=u.suspended_reason, sandbox_uid=u.sandbox_uid)
            for u in s.scalars(select(User).order_by(User.id))
        ]


@router.post("/users/{name}/topup", response_model=TopupOut)
def topup(
    name: str,
    body: AmountIn,
    p: PlatformDep,
    _admin: AdminUser,
    idempotency_key: Annotated[str | None, Header()] = None,
) -> TopupOut:
    view, created = billing.admin_topup(p, name, body.amount, idempotency_key)
    return TopupOut(**view.as_dict(), created=created)


@router.put("/users/{name}/credit-limit", response_model=BalanceOut)
def credit_limit(name: str, body: AmountIn, p: PlatformDep, _admin: AdminUser) -> BalanceOut:
    return BalanceOut(**billing.set_credit_limit(p, name, body.amount).as_dict())


@router.put("/users/{name}/gpu-quota", response_model=QuotaOut)
def gpu_quota(name: str, body: QuotaIn, p: PlatformDep, _admin: AdminUser) -> QuotaOut:
    with p.db.write() as s:
        user = set_gpu_quota(s, name, body.gpus)
        return QuotaOut(name=user.name, gpus=user.gpu_quota)


@router.get("/gpus", response_model=list[GpuOut])
def list_gpus(p: PlatformDep, _admin: AdminUser) -> list[GpuOut]:
    """Every GPU of every host, marked simulated or real, with the instance holding it."""
    with p.db.read() as s:
        rows = s.execute(
            select(Gpu, Host.name, Allocation.instance_id)
            .join(Host, Host.id == Gpu.host_id)
            .outerjoin(Allocation, Allocation.id == Gpu.allocation_id)
            .order_by(Gpu.host_id, Gpu.idx)
        ).all()
        return [
            GpuOut(
                host=host,
                index=g.idx,
                uuid=g.uuid,
                model=g.model,
                nvml_name=g.nvml_name,
                vram_mb=g.vram_mb,
                simulated=g.simulated,
                present=g.present,
                instance_id=inst,
            )
            for g, host, inst in rows
        ]


@router.put("/prices/{gpu_model}", response_model=PriceOut)
def set_price(gpu_model: str, body: PriceIn, p: PlatformDep, _admin: AdminUser) -> PriceOut:
    price = billing.set_price(p, gpu_model, body.price_per_hour, body.interruptible_price_per_hour)
    spot = price.interruptible_price_per_hour_minor
    return PriceOut(
        gpu_model=price.gpu_model,
        price_per_hour=format_minor(price.price_per_hour_minor, price.currency),
        interruptible_price_per_hour=None if spot is None else format_minor(spot, price.currency),
        currency=price.currency,
    )
