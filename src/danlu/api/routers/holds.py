"""Packages and reserved commitments: the plans on sale, buying, listing and cancelling holds, and
the operator's terms (docs/billing.md "Packages and reservations")."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from danlu.api.deps import AdminUser, CurrentUser, PlatformDep
from danlu.api.paging import ListRoute, paged
from danlu.api.schemas.common import errors
from danlu.api.schemas.holds import (
    CancelIn,
    CancelQuoteOut,
    HoldIdPath,
    HoldIn,
    HoldOut,
    HoldQuoteIn,
    PlanOut,
    PlanTermIn,
    PlanTermOut,
    PurchaseQuoteOut,
    TermPath,
)
from danlu.api.schemas.idempotency import IdempotencyKeyHeader
from danlu.api.schemas.teams import TeamQuery
from danlu.billing import idempotency, terms
from danlu.compute import holds as svc
from danlu.core.money import format_minor

router = APIRouter(route_class=ListRoute, tags=["holds"], responses=errors(401))
admin_router = APIRouter(route_class=ListRoute, prefix="/admin/plans", tags=["admin"], responses=errors(401, 403))


@router.get("/plans", response_model=list[PlanOut], **paged("term"))
def plans(p: PlatformDep, user: CurrentUser) -> list[PlanOut]:
    """Packages and reserved commitments on sale, with what one GPU of each model costs for the term."""
    cur, rows = svc.list_plans(p)
    return [
        PlanOut(
            **PlanTermOut.of(v).model_dump(),
            prices={m: format_minor(minor, cur) for m, minor in prices.items()},
            currency=cur,
        )
        for v, prices in rows
    ]


@router.post("/plans/quote", response_model=PurchaseQuoteOut, responses=errors(400, 403, 404, 409))
def quote(body: HoldQuoteIn, p: PlatformDep, user: CurrentUser) -> PurchaseQuoteOut:
    """What buying would cost now, and the rule for cancelling it early; changes nothing."""
    return PurchaseQuoteOut.of(svc.quote(p, user, body.term, body.gpu_model, body.gpu_count, body.team))


@router.post("/holds", response_model=HoldOut, status_code=201, responses=errors(400, 402, 403, 404, 409, 429))
def buy(body: HoldIn, p: PlatformDep, user: CurrentUser, idempotency_key: IdempotencyKeyHeader = None) -> JSONResponse:
    """Buy a package or reserved commitment: paid at once from the balance, its GPUs kept for the
    account until it ends. Rentals of that model by the account then run on them at no further cost."""

    def run() -> tuple[int, Any]:
        view = svc.buy(
            p, user, body.term, body.gpu_model, body.gpu_count, body.on_expiry, body.team, body.expected_price
        )
        return 201, HoldOut.of(view).model_dump(mode="json")

    scope = idempotency.scope_of(user.id, "POST /holds")
    status, out = idempotency.run_once(p, scope, idempotency_key, body.model_dump(mode="json"), run)
    return JSONResponse(out, status_code=status)


@router.get("/holds", response_model=list[HoldOut], **paged("id"), responses=errors(404))
def list_holds(p: PlatformDep, user: CurrentUser, team: TeamQuery = None) -> list[HoldOut]:
    return [HoldOut.of(v) for v in svc.list_holds(p, user, team)]


@router.get("/holds/{hold_id}", response_model=HoldOut, responses=errors(404))
def show_hold(hold_id: HoldIdPath, p: PlatformDep, user: CurrentUser) -> HoldOut:
    return HoldOut.of(svc.show_hold(p, user, hold_id))


@router.post("/holds/{hold_id}/cancel-quote", response_model=CancelQuoteOut, responses=errors(403, 404, 409))
def cancel_quote(hold_id: HoldIdPath, p: PlatformDep, user: CurrentUser) -> CancelQuoteOut:
    """What cancelling now gives back (and what happens to instances on it); valid 10 minutes."""
    return CancelQuoteOut.of(svc.cancel_quote(p, user, hold_id))


@router.post("/holds/{hold_id}/cancel", response_model=HoldOut, responses=errors(400, 403, 404, 409))
def cancel(
    hold_id: HoldIdPath,
    body: CancelIn,
    p: PlatformDep,
    user: CurrentUser,
    idempotency_key: IdempotencyKeyHeader = None,
) -> JSONResponse:
    """Cancel early, confirming a quote: refunded as worked out now (never more than quoted)."""

    def run() -> tuple[int, Any]:
        return 200, HoldOut.of(svc.cancel(p, user, hold_id, body.quote_id)).model_dump(mode="json")

    scope = idempotency.scope_of(user.id, f"POST /holds/{hold_id}/cancel")
    status, out = idempotency.run_once(p, scope, idempotency_key, body.model_dump(mode="json"), run)
    return JSONResponse(out, status_code=status)


@admin_router.get("", response_model=list[PlanTermOut], **paged("term"))
def admin_terms(p: PlatformDep, admin: AdminUser) -> list[PlanTermOut]:
    return [PlanTermOut.of(v) for v in terms.list_terms(p)]


@admin_router.put("/{term}", response_model=PlanTermOut, responses=errors(400, 404))
def set_term(term: TermPath, body: PlanTermIn, p: PlatformDep, admin: AdminUser) -> PlanTermOut:
    """Offer ``term`` at ``discount`` off the on-demand price (holds already bought keep theirs)."""
    return PlanTermOut.of(terms.set_term(p, term, body.discount, body.cancel_fee))


@admin_router.delete("/{term}", status_code=204, responses=errors(404))
def remove_term(term: TermPath, p: PlatformDep, admin: AdminUser) -> None:
    """Stop selling ``term`` (holds already bought run their course)."""
    terms.remove_term(p, term)
