"""The operator's storage policy (``/admin/storage``): stopped workspaces' price per GB-month, warning and
release; snapshots' price per GB-month and quota per account."""

from __future__ import annotations

from fastapi import APIRouter

from danlu.api.deps import AdminUser, PlatformDep
from danlu.api.schemas.common import errors
from danlu.api.schemas.money_controls import StorageIn, StorageOut
from danlu.billing import storage as svc
from danlu.billing.vouchers import format_duration, parse_duration
from danlu.core.money import format_minor

admin_router = APIRouter(prefix="/admin/storage", tags=["admin"], responses=errors(401, 403))


def _out(pol: svc.StoragePolicy) -> StorageOut:
    return StorageOut(
        price_gb_month=format_minor(pol.price_gb_month_minor, pol.currency),
        warn_after=format_duration(pol.warn_after_s * 1000) or "",
        release_after=format_duration(pol.release_after_s * 1000) or "",
        currency=pol.currency,
        snapshot_price_gb_month=format_minor(pol.snapshot_price_gb_month_minor, pol.currency),
        snapshot_quota_gb=pol.snapshot_quota_gb,
        snapshot_retention=f"{pol.snapshot_retention_s // svc.DAY_S}d" if pol.snapshot_retention_s else "0",
        snapshot_before_release=pol.snapshot_before_release,
    )


def _seconds(text: str | None) -> int | None:
    return None if text is None else parse_duration(text) // 1000  # the schema's pattern held it to 30m, 7d ...


@admin_router.get("", response_model=StorageOut)
def show(p: PlatformDep, _admin: AdminUser) -> StorageOut:
    return _out(svc.show_policy(p))


@admin_router.put("", response_model=StorageOut, responses=errors(400))
def configure(body: StorageIn, p: PlatformDep, _admin: AdminUser) -> StorageOut:
    """Change what is given; a new price applies to storage allocations opened from now on."""
    policy = svc.configure(
        p,
        price_gb_month=body.price_gb_month,
        warn_after_s=_seconds(body.warn_after),
        release_after_s=_seconds(body.release_after),
        snapshot_price_gb_month=body.snapshot_price_gb_month,
        snapshot_quota_gb=body.snapshot_quota_gb,
        snapshot_retention_s=None
        if body.snapshot_retention is None
        else int(body.snapshot_retention.rstrip("d")) * svc.DAY_S,
        snapshot_before_release=body.snapshot_before_release,
    )
    return _out(policy)
