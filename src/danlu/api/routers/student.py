"""The student discount: a renter's verification request (``/student/verification``) and the
operator's decisions and discount (``/admin/student``)."""

from __future__ import annotations

from fastapi import APIRouter

from danlu.api.deps import AdminUser, CurrentUser, PlatformDep
from danlu.api.paging import ListRoute, paged
from danlu.api.schemas.accounts import ReasonIn
from danlu.api.schemas.common import UserNamePath, errors
from danlu.api.schemas.money_controls import (
    DiscountIn,
    DiscountOut,
    VerificationIn,
    VerificationOut,
    VerificationRequestOut,
)
from danlu.billing import student as svc
from danlu.core.clock import iso
from danlu.core.parse import bp_text

router = APIRouter(route_class=ListRoute, prefix="/student", tags=["student"], responses=errors(401))
admin_router = APIRouter(route_class=ListRoute, prefix="/admin/student", tags=["admin"], responses=errors(401, 403))


def _out(v: svc.VerificationView) -> VerificationOut:
    return VerificationOut(
        user=v.user,
        status=v.status,
        institution=v.institution,
        reason=v.reason,
        requested_at=iso(v.requested_at_ms),
        decided_at=iso(v.decided_at_ms),
        discount=bp_text(v.discount_bp),
    )


@router.post("/verification", response_model=VerificationOut, status_code=201, responses=errors(400, 409))
def request(body: VerificationIn, p: PlatformDep, user: CurrentUser) -> VerificationOut:
    """Ask for the student discount; the operator approves or refuses with a reason."""
    return _out(svc.request(p, user, body.institution, body.evidence))


@router.get("/verification", response_model=VerificationOut)
def status(p: PlatformDep, user: CurrentUser) -> VerificationOut:
    return _out(svc.status(p, user))


@admin_router.get("/requests", response_model=list[VerificationRequestOut], **paged("user"))
def pending(p: PlatformDep, _admin: AdminUser) -> list[VerificationRequestOut]:
    """Requests awaiting a decision, oldest first, with their evidence."""
    return [VerificationRequestOut(**_out(v).model_dump(), evidence=e) for v, e in svc.pending(p)]


@admin_router.post("/{name}/approve", response_model=VerificationOut, responses=errors(404))
def approve(name: UserNamePath, p: PlatformDep, _admin: AdminUser) -> VerificationOut:
    """Approve NAME's pending request: their allocations starting from now get the discount."""
    return _out(svc.decide(p, name, approve=True, reason=""))


@admin_router.post("/{name}/refuse", response_model=VerificationOut, responses=errors(400, 404))
def refuse(name: UserNamePath, body: ReasonIn, p: PlatformDep, _admin: AdminUser) -> VerificationOut:
    """Refuse NAME's pending request with a reason they are shown (they may ask again)."""
    return _out(svc.decide(p, name, approve=False, reason=body.reason))


@admin_router.put("/discount", response_model=DiscountOut, responses=errors(400))
def set_discount(body: DiscountIn, p: PlatformDep, _admin: AdminUser) -> DiscountOut:
    """The discount approved students get on GPU time, fixed on each allocation when it starts."""
    return DiscountOut(percent=bp_text(svc.set_discount(p, body.percent)))
