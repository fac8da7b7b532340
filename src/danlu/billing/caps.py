"""Budget enforcement inside the meter (no service imports: danlu.billing.metering uses it).
See danlu.billing.budgets for what budgets are and how they are set."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from zoneinfo import ZoneInfo

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from danlu.accounts.payers import currency
from danlu.core.money import format_minor
from danlu.db.models import AllocationRow, Budget, ChargeRow, Event, Hold, Setting, UsageRecordRow

THRESHOLDS = (50, 80, 100)


def zone(session: Session) -> ZoneInfo:
    row = session.get(Setting, "timezone")
    return ZoneInfo(row.value if row is not None else "UTC")


def period_start_ms(now_ms: int, tz: ZoneInfo) -> int:
    local = datetime.fromtimestamp(now_ms / 1000, tz)
    first = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(first.timestamp() * 1000)


def period_key(now_ms: int, tz: ZoneInfo) -> str:
    return datetime.fromtimestamp(now_ms / 1000, tz).strftime("%Y-%m")


def in_scope(budget: Budget, alloc: AllocationRow) -> bool:
    return covers(budget, alloc.user_id, alloc.instance_id)


def covers(budget: Budget, user_id: int, instance_id: str) -> bool:
    """Whether the budget's scope (the account, a member, an instance) takes in this renter's instance."""
    kind, _, ref = budget.scope.partition(":")
    if kind == "account":
        return True
    if kind == "member":
        return str(user_id) == ref
    return instance_id == ref


def _scope_filter(budget: Budget) -> list[object]:
    kind, _, ref = budget.scope.partition(":")
    out: list[object] = [AllocationRow.billing_account_id == budget.billing_account_id]
    if kind == "member":
        out.append(AllocationRow.user_id == int(ref))
    elif kind == "instance":
        out.append(AllocationRow.instance_id == ref)
    return out


def spent_minor(session: Session, budget: Budget, now_ms: int, tz: ZoneInfo) -> int:
    """What was charged in the budget's scope (this period for a monthly one): usage, and for the
    account and a member, packages and reservations bought less their refunds (``charges``)."""
    stmt = (
        select(func.coalesce(func.sum(UsageRecordRow.amount_minor), 0))
        .join(AllocationRow, AllocationRow.id == UsageRecordRow.allocation_id)
        .where(*_scope_filter(budget))  # type: ignore[arg-type]
    )
    if budget.period == "month":
        stmt = stmt.where(UsageRecordRow.end_ms > period_start_ms(now_ms, tz))
    spent = int(session.execute(stmt).scalar_one())
    kind, _, ref = budget.scope.partition(":")
    if kind == "instance":
        return spent
    # A refund counts in the month its purchase did (joined by hold), so a cancellation never
    # makes a later month's spending negative; both are the buyer's.
    charged = (
        select(func.coalesce(func.sum(ChargeRow.amount_minor), 0))
        .join(Hold, Hold.id == ChargeRow.hold_id)
        .where(ChargeRow.billing_account_id == budget.billing_account_id)
    )
    if kind == "member":
        charged = charged.where(Hold.user_id == int(ref))
    if budget.period == "month":
        charged = charged.where(Hold.created_at_ms >= period_start_ms(now_ms, tz))
    return spent + int(session.execute(charged).scalar_one())


def hard_caps(session: Session, billing_account_id: int, now_ms: int) -> list[tuple[Budget, int]]:
    """The payer's hard caps with what is left of each (never below 0), narrowest scope first."""
    tz = zone(session)
    rows = list(
        session.scalars(
            select(Budget).where(Budget.billing_account_id == billing_account_id, Budget.hard_minor.is_not(None))
        )
    )
    rows.sort(key=lambda b: {"instance": 0, "member": 1}.get(b.scope.partition(":")[0], 2))
    return [(b, max(0, int(b.hard_minor or 0) - spent_minor(session, b, now_ms, tz))) for b in rows]


def cap_targets(
    allocations: list[AllocationRow],
    targets: dict[int, int],
    caps: list[tuple[Budget, int]],
    charge: Callable[[AllocationRow, int], int],
) -> dict[int, int]:
    """Where each allocation's billing must stop so that no hard cap is exceeded: for each cap whose
    scope would go over, the latest common instant its allocations can be billed to (binary search;
    the charge is monotone in the instant). Returns the capped allocations' new targets."""
    capped: dict[int, int] = {}
    for budget, left in caps:
        # Usage on a prepaid hold costs nothing more: a cap never stops it (its purchase counted).
        scoped = [a for a in allocations if in_scope(budget, a) and a.hold_id is None]
        if not scoped:
            continue

        def at(t: int, scoped: list[AllocationRow] = scoped) -> dict[int, int]:
            return {a.id: max(a.billed_until_ms, min(capped.get(a.id, targets[a.id]), t)) for a in scoped}

        def cost(t: int, scoped: list[AllocationRow] = scoped) -> int:
            where = at(t)
            return sum(charge(a, where[a.id]) for a in scoped)

        hi = max(capped.get(a.id, targets[a.id]) for a in scoped)
        if cost(hi) <= left:
            continue
        lo = min(a.billed_until_ms for a in scoped)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if cost(mid) <= left:
                lo = mid
            else:
                hi = mid
        capped.update(at(lo))
    return capped


def announce(session: Session, billing_account_id: int, now_ms: int) -> int:
    """Soft-limit events for the payer's budgets that crossed a threshold; each once per period."""
    tz = zone(session)
    key = period_key(now_ms, tz)
    sent = 0
    for b in session.scalars(
        select(Budget).where(Budget.billing_account_id == billing_account_id, Budget.soft_minor.is_not(None))
    ):
        soft = int(b.soft_minor or 0)
        if soft <= 0:
            continue
        if b.period == "month" and b.notified_period != key:
            b.notified_pct, b.notified_period = 0, key
        pct = spent_minor(session, b, now_ms, tz) * 100 // soft
        crossed = [t for t in THRESHOLDS if b.notified_pct < t <= pct]  # each threshold its own event
        cur = currency(session)
        for reached in crossed:
            session.add(
                Event(
                    user_id=None,
                    billing_account_id=billing_account_id,
                    instance_id=b.scope.partition(":")[2] if b.scope.startswith("instance:") else None,
                    kind="budget_threshold",
                    message=f"budget {b.scope} ({b.period}) reached {reached}% of its soft limit "
                    f"{format_minor(soft, cur)} {cur}",
                    at_ms=now_ms,
                )
            )
            sent += 1
        if crossed:
            b.notified_pct = crossed[-1]
            b.notified_period = key if b.period == "month" else b.notified_period
    return sent
