"""Off-peak tariffs: the rules in force (``/tariffs``) and the operator's rules (``/admin/tariffs``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from danlu.api.deps import AdminUser, CurrentUser, PlatformDep
from danlu.api.paging import ListRoute, paged
from danlu.api.schemas.common import errors
from danlu.api.schemas.money_controls import TariffIdPath, TariffIn, TariffOut
from danlu.billing import tariffs as svc
from danlu.core.clock import iso

router = APIRouter(route_class=ListRoute, prefix="/tariffs", tags=["tariffs"], responses=errors(401))
admin_router = APIRouter(route_class=ListRoute, prefix="/admin/tariffs", tags=["admin"], responses=errors(401, 403))


def _out(r: svc.RuleView) -> TariffOut:
    return TariffOut.model_validate(
        {
            "id": r.id,
            "name": r.name,
            "days": r.days,
            "from": r.start,
            "to": r.end,
            "multiplier": r.multiplier,
            "plans": r.plans,
            "created_at": iso(r.created_at_ms),
            "retired_at": iso(r.retired_at_ms),
        }
    )


@router.get("", response_model=list[TariffOut], **paged("id"))
def in_force(p: PlatformDep, _user: CurrentUser) -> list[TariffOut]:
    """The off-peak windows in force (deployment time zone): overlapping ones never stack, the cheapest applies."""
    return [_out(r) for r in svc.list_rules(p)]


@admin_router.post("", response_model=TariffOut, status_code=201, responses=errors(400))
def add(body: TariffIn, p: PlatformDep, _admin: AdminUser) -> TariffOut:
    """Add a rule; it applies to allocations starting from now (running ones keep theirs). A window
    whose from equals its to answers 422 ``invalid_tariff`` (to before from wraps past midnight)."""
    return _out(svc.add_rule(p, body.name, body.days, body.from_, body.to, body.multiplier, body.plans))


@admin_router.get("", response_model=list[TariffOut], **paged("id"))
def list_rules(
    p: PlatformDep,
    _admin: AdminUser,
    all_: Annotated[bool, Query(alias="all", description="Retired rules too")] = False,
) -> list[TariffOut]:
    return [_out(r) for r in svc.list_rules(p, include_retired=all_)]


@admin_router.delete("/{tariff_id}", response_model=TariffOut, responses=errors(404))
def retire(tariff_id: TariffIdPath, p: PlatformDep, _admin: AdminUser) -> TariffOut:
    """Retire a rule: not offered from now on; allocations already running keep it."""
    return _out(svc.retire_rule(p, tariff_id))
