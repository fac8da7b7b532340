"""Stopped storage: what a stopped instance's kept workspace costs, and when it is released.

* The operator sets a price per GB-month (may be 0), a warning period and a release period.
  A month is 30 days; usage is rated per MiB (1 GB = 1024 MiB) and per whole second by the one
  rater, exactly like GPU time (danlu.billing.rating with ``seconds_per_unit``).
* When an instance stops with its workspace kept, its size is measured and a storage allocation
  (plan ``storage``, model ``workspace``, "GPU count" = MiB) opens at the current storage price
  plan; it ends when the instance starts again, is removed, or its workspace is released.
* After ``warn_after`` stopped the renter gets an event saying when the workspace will be
  released; only ``release_after`` after that warning is it deleted. Nothing is deleted without
  a prior warning, and starting the instance in between cancels both.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from danlu.accounts.payers import currency
from danlu.billing.price_plans import current_plan, record_price
from danlu.billing.rating import Rate, cumulative_cost
from danlu.context import Platform
from danlu.core.errors import InvalidInput
from danlu.core.money import format_minor, parse_amount
from danlu.db.models import Setting

MODEL = "workspace"
SNAPSHOT_MODEL = "snapshot"  # a kept snapshot: the same plan, its own price (danlu.compute.snapshots)
PLAN = "storage"
MIB = 1 << 20
MIB_PER_GB = 1024
MONTH_S = 30 * 86_400
SECONDS_PER_UNIT = MONTH_S * MIB_PER_GB  # the price is per GB-month; one unit is a MiB
DAY_S = 86_400
WARN_KEY, RELEASE_KEY = "storage_warn_after_s", "storage_release_after_s"
SNAPSHOT_QUOTA_KEY = "snapshot_quota_gb"  # per billing account; 0: no quota
SNAPSHOT_RETENTION_KEY = "snapshot_retention_s"  # a snapshot is removed this long after it was taken; 0: kept
SNAPSHOT_BEFORE_RELEASE_KEY = "snapshot_before_release"  # 1: a workspace due for release is snapshotted first
MAX_SNAPSHOT_QUOTA_GB = 1_000_000
DEFAULT_WARN_S, DEFAULT_RELEASE_S = 7 * DAY_S, 7 * DAY_S


@dataclass(frozen=True)
class StoragePolicy:
    price_gb_month_minor: int
    warn_after_s: int
    release_after_s: int
    currency: str
    snapshot_price_gb_month_minor: int = 0
    snapshot_quota_gb: int = 0  # each billing account's snapshots together, as restored; 0: none
    snapshot_retention_s: int = 0  # a snapshot goes this long after it was taken (warned first); 0: kept
    snapshot_before_release: bool = False  # a workspace due for release is snapshotted first

    def per_day_minor(self, size_bytes: int) -> int:
        return per_day_minor(self.price_gb_month_minor, mib(size_bytes))


def per_day_minor(price_gb_month_minor: int, size_mib: int) -> int:
    """What ``size_mib`` MiB stored cost a day at a price per GB-month."""
    return cumulative_cost(storage_rate(price_gb_month_minor, size_mib, 0), DAY_S)


def mib(size_bytes: int) -> int:
    return -(-max(0, size_bytes) // MIB)


def storage_rate(price_gb_month_minor: int, size_mib: int, started_ms: int) -> Rate:
    return Rate(price_gb_month_minor, size_mib, started_ms, seconds_per_unit=SECONDS_PER_UNIT)


def _int_setting(s: Session, key: str, default: int) -> int:
    row = s.get(Setting, key)
    return int(row.value) if row is not None else default


def policy(s: Session) -> StoragePolicy:
    plan = current_plan(s, MODEL, PLAN)
    snapshots = current_plan(s, SNAPSHOT_MODEL, PLAN)
    return StoragePolicy(
        plan.price_per_hour_minor if plan is not None else 0,
        _int_setting(s, WARN_KEY, DEFAULT_WARN_S),
        _int_setting(s, RELEASE_KEY, DEFAULT_RELEASE_S),
        currency(s),
        snapshots.price_per_hour_minor if snapshots is not None else 0,
        _int_setting(s, SNAPSHOT_QUOTA_KEY, 0),
        _int_setting(s, SNAPSHOT_RETENTION_KEY, 0),
        bool(_int_setting(s, SNAPSHOT_BEFORE_RELEASE_KEY, 0)),
    )


def _set(s: Session, key: str, value: int) -> None:
    row = s.get(Setting, key)
    if row is None:
        s.add(Setting(key=key, value=str(value)))
    else:
        row.value = str(value)


def configure(
    p: Platform,
    *,
    price_gb_month: str | None = None,
    warn_after_s: int | None = None,
    release_after_s: int | None = None,
    snapshot_price_gb_month: str | None = None,
    snapshot_quota_gb: int | None = None,
    snapshot_retention_s: int | None = None,
    snapshot_before_release: bool | None = None,
) -> StoragePolicy:
    """The operator's storage prices (stopped workspaces, snapshots), retention periods (each at least an
    hour, at most a year) and snapshot quota per account. A new price applies to what is stored from now."""
    for name, value in (("--warn-after", warn_after_s), ("--release-after", release_after_s)):
        if value is not None and not 3600 <= value <= 366 * DAY_S:
            raise InvalidInput("invalid_storage_policy", f"{name} is from 1 hour to 366 days")
    if snapshot_retention_s and not DAY_S <= snapshot_retention_s <= 3660 * DAY_S:
        raise InvalidInput("invalid_storage_policy", "--snapshot-retention is 0 (kept) or from 1 day to 3660 days")
    if snapshot_quota_gb is not None and not 0 <= snapshot_quota_gb <= MAX_SNAPSHOT_QUOTA_GB:
        raise InvalidInput(
            "invalid_storage_policy", f"--snapshot-quota-gb is from 0 (no quota) to {MAX_SNAPSHOT_QUOTA_GB:,} GB"
        )
    with p.db.write() as s:
        for model, price, what in (
            (MODEL, price_gb_month, "storage price per GB-month"),
            (SNAPSHOT_MODEL, snapshot_price_gb_month, "snapshot price per GB-month"),
        ):
            if price is not None:
                cur = currency(s)
                record_price(s, model, PLAN, parse_amount(price, cur, field=what), cur, p.clock.now_ms())
        if snapshot_quota_gb is not None:
            _set(s, SNAPSHOT_QUOTA_KEY, snapshot_quota_gb)
        if snapshot_retention_s is not None:
            _set(s, SNAPSHOT_RETENTION_KEY, snapshot_retention_s)
        if snapshot_before_release is not None:
            _set(s, SNAPSHOT_BEFORE_RELEASE_KEY, int(snapshot_before_release))
        if warn_after_s is not None:
            _set(s, WARN_KEY, warn_after_s)
        if release_after_s is not None:
            _set(s, RELEASE_KEY, release_after_s)
        s.flush()
        return policy(s)


def show_policy(p: Platform) -> StoragePolicy:
    with p.db.read() as s:
        return policy(s)


def describe_per_day(pol: StoragePolicy, size_bytes: int) -> str:
    return f"{format_minor(pol.per_day_minor(size_bytes), pol.currency)} {pol.currency}/day"
