"""Vouchers: yours (``/vouchers``), redeeming a code, and the operator's campaigns."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from danlu.api.deps import AdminUser, CurrentUser, PlatformDep
from danlu.api.paging import ListRoute, paged
from danlu.api.schemas.common import errors
from danlu.api.schemas.idempotency import IdempotencyKeyHeader
from danlu.api.schemas.teams import TeamNamePath, TeamQuery
from danlu.api.schemas.vouchers import CampaignIn, CampaignOut, GrantIn, RedeemIn, VoucherOut
from danlu.billing import idempotency
from danlu.billing import vouchers as svc
from danlu.context import Platform
from danlu.core.clock import iso
from danlu.core.errors import InvalidInput
from danlu.core.money import format_minor
from danlu.core.parse import bp_text

router = APIRouter(route_class=ListRoute, prefix="/vouchers", tags=["vouchers"], responses=errors(401))
admin_router = APIRouter(
    route_class=ListRoute, prefix="/admin/voucher-campaigns", tags=["admin"], responses=errors(401, 403)
)


def _percent(bp: int | None) -> str | None:
    return None if bp is None else bp_text(bp)


def _voucher(v: svc.GrantView) -> VoucherOut:
    return VoucherOut(
        id=v.id,
        campaign=v.campaign,
        amount=format_minor(v.amount_minor, v.currency),
        remaining=format_minor(v.remaining_minor, v.currency),
        percent=_percent(v.percent_bp),
        gpu_model=v.scope_model,
        plan=v.scope_plan,
        granted_at=iso(v.granted_at_ms),
        expires_at=iso(v.expires_at_ms),
        status=v.status,
        currency=v.currency,
    )


def _campaign(v: svc.CampaignView) -> CampaignOut:
    c = v.campaign
    return CampaignOut(
        name=c.name,
        amount=format_minor(c.amount_minor, v.currency),
        percent=_percent(c.percent_bp),
        valid_for=svc.format_duration(c.valid_for_ms),
        until=iso(c.valid_until_ms),
        on=c.trigger,
        code=c.code,
        gpu_model=c.scope_model,
        plan=c.scope_plan,
        max_redemptions=c.max_redemptions,
        per_account=c.max_per_account,
        redemptions=c.redemptions,
        priority=c.priority,
        eligibility=c.eligibility,
        active=c.active,
        currency=v.currency,
        created_at=iso(c.created_at_ms),
    )


@router.get("", response_model=list[VoucherOut], **paged("id"), responses=errors(404))
def list_vouchers(p: PlatformDep, user: CurrentUser, team: TeamQuery = None) -> list[VoucherOut]:
    """Your vouchers (or a team's), with what each has left and when it expires."""
    return [_voucher(v) for v in svc.vouchers_of(p, user, team)]


@router.post("/redeem", response_model=VoucherOut, status_code=201, responses=errors(400, 403, 404, 409))
def redeem(
    body: RedeemIn, p: PlatformDep, user: CurrentUser, idempotency_key: IdempotencyKeyHeader = None
) -> JSONResponse:
    def run() -> tuple[int, Any]:
        return 201, _voucher(svc.redeem(p, user, body.code, body.team)).model_dump(mode="json")

    scope = idempotency.scope_of(user.id, "POST /vouchers/redeem")
    status, out = idempotency.run_once(p, scope, idempotency_key, body.model_dump(mode="json"), run)
    return JSONResponse(out, status_code=status)


def _until_ms(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput("invalid_voucher_validity", "until must be ISO-8601, e.g. 2027-01-01T00:00:00Z") from None
    if when.tzinfo is None:
        raise InvalidInput("invalid_voucher_validity", "give until's timezone, e.g. +08:00 or Z")
    return int(when.timestamp() * 1000)


@admin_router.post("", response_model=CampaignOut, status_code=201, responses=errors(400, 404, 409))
def create_campaign(
    body: CampaignIn, p: PlatformDep, admin: AdminUser, idempotency_key: IdempotencyKeyHeader = None
) -> JSONResponse:
    """A campaign that opens now. Besides the schema's limits: ``until`` must be a real date after
    now (which depends on the clock and the calendar, so it is checked here: 422)."""

    def run() -> tuple[int, Any]:
        return 201, _campaign(_create(body, p)).model_dump(mode="json")

    scope = idempotency.scope_of(admin.id, "POST /admin/voucher-campaigns")
    status, out = idempotency.run_once(p, scope, idempotency_key, body.model_dump(mode="json"), run)
    return JSONResponse(out, status_code=status)


def _create(body: CampaignIn, p: Platform) -> svc.CampaignView:
    return svc.create_campaign_from_text(
        p,
        name=body.name,
        amount=body.amount,
        trigger=body.on,
        valid_for=body.valid_for,
        until_ms=_until_ms(body.until),
        percent=body.percent,
        code=body.code,
        gpu_model=body.gpu_model,
        plan=body.plan,
        max_redemptions=body.max_redemptions,
        per_account=body.per_account,
        priority=body.priority,
        eligibility=body.eligibility,
    )


@admin_router.get("", response_model=list[CampaignOut], **paged("name"))
def list_campaigns(p: PlatformDep, _admin: AdminUser) -> list[CampaignOut]:
    return [_campaign(v) for v in svc.campaign_views(p)]


@admin_router.post("/{name}/grant", response_model=VoucherOut, status_code=201, responses=errors(400, 404, 409))
def grant(
    name: TeamNamePath, body: GrantIn, p: PlatformDep, admin: AdminUser, idempotency_key: IdempotencyKeyHeader = None
) -> JSONResponse:
    """Give one voucher of campaign NAME to exactly one of a user's personal account and a team."""

    def run() -> tuple[int, Any]:
        return 201, _voucher(svc.grant_to(p, name, user=body.user, team=body.team)).model_dump(mode="json")

    scope = idempotency.scope_of(admin.id, f"POST /admin/voucher-campaigns/{name}/grant")
    status, out = idempotency.run_once(p, scope, idempotency_key, body.model_dump(mode="json"), run)
    return JSONResponse(out, status_code=status)
