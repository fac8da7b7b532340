"""The meter: moves allocations' billed-until marks forward and posts usage to the ledger.

One call meters a set of allocations of one billing account (the payer) in the caller's
transaction:

* each allocation is billed from ``billed_until_ms`` to its end (if it has ended) or ``now``;
* the charge is the difference of the cumulative rating (danlu.billing.rating, the only rater),
  so ticks never accumulate rounding and a second is never billed twice; the allocation's
  discount is part of its rate, and its list price is recorded beside it;
* the charge is paid in the documented order (danlu.billing.posting): vouchers of the payer in
  scope, by (priority, soonest expiry, oldest grant), then cash — one balanced transaction;
* each allocation's mark moves with a guarded ``UPDATE ... WHERE billed_until_ms = :old`` and each
  metered interval is a ``usage_records`` row unique on (allocation, start) — also when it rated 0
  minor units, so the rows tile the allocation — and a crashed, retried or concurrent tick collides
  instead of double-charging;
* if vouchers plus the balance plus the credit limit cannot cover the charge, usage is billed
  only up to the latest instant they cover, the account's paid allocations are ended there (not
  those on a prepaid package or reservation), and the caller is told the payer is exhausted so it
  stops those instances. Nothing is ever charged beyond the balance.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import cast

from sqlalchemy import Table, bindparam, insert, select, update
from sqlalchemy.orm import Session

from danlu.billing import posting
from danlu.billing.accounts import cash_account, idempotency_key, lock_billing_account, post, system_account
from danlu.billing.caps import announce, cap_targets, hard_caps
from danlu.billing.ledger import Posting
from danlu.billing.pricing import Plan
from danlu.billing.rating import Rate, charge_between, latest_affordable_ms
from danlu.billing.storage import MODEL as STORAGE_MODEL
from danlu.billing.storage import PLAN as STORAGE_PLAN
from danlu.billing.storage import SNAPSHOT_MODEL, storage_rate
from danlu.billing.tariffs import parse_snapshot
from danlu.core.errors import Conflict
from danlu.db.models import Account, AllocationRow, BillingAccount, UsageRecordRow, VoucherCampaign, VoucherGrant


@dataclass(frozen=True)
class MeterResult:
    charged_minor: int
    exhausted: bool
    cutoff_ms: int | None  # where billing stopped for an exhausted payer
    capped_instances: tuple[str, ...] = ()  # instances whose hard budget cap was reached: stop them


@dataclass(frozen=True)
class UsagePart:
    """What one allocation used in one posting, for the ledger line."""

    instance_id: str
    gpu_count: int
    gpu_model: str
    start_ms: int
    end_ms: int


def _utc(ms: int, fmt: str) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime(fmt)


def _period_text(start_ms: int, end_ms: int) -> str:
    """``2026-03-01 18:08:36–18:08:50 UTC``, or with both dates when it crosses midnight."""
    start = _utc(start_ms, "%Y-%m-%d %H:%M:%S")
    end = _utc(end_ms, "%H:%M:%S" if _utc(start_ms, "%Y-%m-%d") == _utc(end_ms, "%Y-%m-%d") else "%Y-%m-%d %H:%M:%S")
    return f"{start}–{end} UTC"


def _seconds_text(ms: int) -> str:
    """Exact, to the millisecond: 100,999 ms read "101.0 s" (rounded) before."""
    return f"{ms // 1000} s" if ms % 1000 == 0 else f"{ms // 1000}.{ms % 1000:03d}".rstrip("0") + " s"


def usage_memo(parts: list[UsagePart], most: int = 3) -> str:
    """The ledger line of a usage posting: each instance, its GPUs, the seconds and the period
    billed, up to ``most`` of them, then how many more. Pure: the same parts give the same text."""
    stored = {STORAGE_MODEL: "stored workspace", SNAPSHOT_MODEL: "snapshot"}
    shown = [
        f"{u.instance_id} ("
        + (f"{u.gpu_count} MiB {stored[u.gpu_model]}" if u.gpu_model in stored else f"{u.gpu_count}× {u.gpu_model}")
        + f", {_seconds_text(u.end_ms - u.start_ms)}, {_period_text(u.start_ms, u.end_ms)})"
        for u in parts[:most]
    ]
    more = f" and {len(parts) - most} more" if len(parts) > most else ""
    return "GPU usage of " + (", ".join(shown) or "no instance") + more


def _target(alloc: AllocationRow, now_ms: int) -> int:
    end = alloc.ended_at_ms if alloc.ended_at_ms is not None else now_ms
    return max(alloc.billed_until_ms, min(end, now_ms))


def allocation_rate(alloc: AllocationRow, *, discounted: bool = True) -> Rate:
    """How ``alloc`` is rated: its plan's price, its GPUs, from its start, the tariff rules in
    force when it started, with its discount. A stored workspace is priced per MiB per month, not per
    unit-hour (``storage.storage_rate``; rated per hour until issue 11's last stop, ~737,000x the price)."""
    if alloc.plan == STORAGE_PLAN:
        return storage_rate(alloc.price_per_hour_minor, alloc.gpu_count, alloc.started_at_ms)
    plan = Plan(alloc.plan) if alloc.plan in Plan._value2member_map_ else Plan.ON_DEMAND
    return Rate(
        alloc.price_per_hour_minor,
        alloc.gpu_count,
        alloc.started_at_ms,
        plan=plan,
        tariffs=parse_snapshot(alloc.tariffs_json),
        discount_bp=alloc.discount_bp if discounted else 0,
    )


def _charge(alloc: AllocationRow, until_ms: int, *, discounted: bool = True) -> int:
    return charge_between(allocation_rate(alloc, discounted=discounted), alloc.billed_until_ms, until_ms)


def usable_vouchers(
    session: Session, billing_account_id: int, until_ms: int
) -> list[tuple[VoucherGrant, Account, VoucherCampaign]]:
    """The payer's vouchers that may pay for usage up to ``until_ms``, in the order they are spent,
    their ledger rows locked (after the cash row: the one lock order)."""
    rows = session.execute(
        select(VoucherGrant, Account, VoucherCampaign)
        .join(Account, Account.id == VoucherGrant.account_id)
        .join(VoucherCampaign, VoucherCampaign.id == VoucherGrant.campaign_id)
        .where(
            VoucherGrant.billing_account_id == billing_account_id,
            VoucherGrant.expired.is_(False),
            (VoucherGrant.expires_at_ms.is_(None)) | (VoucherGrant.expires_at_ms >= until_ms),
            Account.balance_minor > 0,
        )
        .with_for_update(of=Account)
    ).all()
    out = [(g, a, c) for g, a, c in rows]
    out.sort(
        key=lambda r: (r[2].priority, r[0].expires_at_ms is None, r[0].expires_at_ms or 0, r[0].granted_at_ms, r[0].id)
    )
    return out


def voucher_slots(vouchers: list[tuple[VoucherGrant, Account, VoucherCampaign]]) -> list[posting.VoucherSlot]:
    return [
        posting.VoucherSlot(g.id, a.balance_minor, c.scope_model, c.scope_plan, c.percent_bp) for g, a, c in vouchers
    ]


def meter_account(
    session: Session,
    billing_account_id: int,
    allocations: list[AllocationRow],
    now_ms: int,
    horizons: Mapping[int, int] | None = None,
) -> MeterResult:
    """Bill ``allocations`` (all paid by one billing account, unsettled) up to ``now_ms`` — an allocation
    in ``horizons`` no further than its time there (its run's last heartbeat: Backend.alive_until); see the
    module docstring. Usage is billed in steps that end at every voucher expiry inside the
    interval, so a voucher pays for the usage before its expiry even when the meter (or a stop)
    runs after it."""
    if not allocations:
        return MeterResult(0, False, None)
    lock_billing_account(session, billing_account_id)
    lo = min(a.billed_until_ms for a in allocations)
    expiries: list[int] = sorted(
        {
            int(e)
            for e in session.scalars(
                select(VoucherGrant.expires_at_ms).where(
                    VoucherGrant.billing_account_id == billing_account_id,
                    VoucherGrant.expired.is_(False),
                    VoucherGrant.expires_at_ms > lo,
                    VoucherGrant.expires_at_ms < now_ms,
                )
            )
            if e is not None
        }
    )
    charged, capped = 0, set[str]()
    for edge in [*expiries, now_ms]:
        step = _meter_once(session, billing_account_id, allocations, edge, horizons or {})
        charged += step.charged_minor
        capped.update(step.capped_instances)
        if step.exhausted:
            return MeterResult(charged, True, step.cutoff_ms, tuple(sorted(capped)))
    return MeterResult(charged, False, None, tuple(sorted(capped)))


def _meter_once(
    session: Session,
    billing_account_id: int,
    allocations: list[AllocationRow],
    now_ms: int,
    horizons: Mapping[int, int],
) -> MeterResult:
    balance = lock_billing_account(session, billing_account_id)
    # Re-read the allocations under the lock: a stop may have billed them since the caller loaded them.
    allocations = list(
        session.scalars(
            select(AllocationRow)
            .where(AllocationRow.id.in_([a.id for a in allocations]), AllocationRow.settled.is_(False))
            .order_by(AllocationRow.id)
            .execution_options(populate_existing=True)
        )
    )
    if not allocations:
        return MeterResult(0, False, None)
    targets = {a.id: _target(a, min(now_ms, horizons.get(a.id, now_ms))) for a in allocations}
    # Hard budget caps first: a scope over its cap is billed exactly up to it and ends there.
    caps = hard_caps(session, billing_account_id, now_ms)
    capped = cap_targets(allocations, targets, caps, _charge) if caps else {}
    targets.update(capped)
    vouchers = usable_vouchers(session, billing_account_id, now_ms)
    slots = voucher_slots(vouchers)
    ba = session.get(BillingAccount, billing_account_id)
    assert ba is not None
    floor = -ba.credit_limit_minor

    def split_at(t: dict[int, int]) -> tuple[dict[int, int], posting.Split]:
        charges = {a.id: _charge(a, t[a.id]) for a in allocations}
        return charges, posting.split(
            [posting.Charge(a.id, a.gpu_model, a.plan, charges[a.id]) for a in allocations], slots
        )

    charges, paid = split_at(targets)
    exhausted = False
    cutoff: int | None = None
    if paid.cash_minor > 0 and balance - paid.cash_minor < floor:
        exhausted = True
        budget = max(0, balance - floor)

        def upto(t: int) -> dict[int, int]:
            # Usage on a prepaid hold costs nothing and is never cut: only paid usage stops here.
            return {
                a.id: targets[a.id] if a.hold_id is not None else max(a.billed_until_ms, min(targets[a.id], t))
                for a in allocations
            }

        # Cash needed is monotone in the cut-off (vouchers pay first, each up to what it has), so a
        # binary search over milliseconds finds the latest instant the payer can afford exactly.
        lo, hi = min(a.billed_until_ms for a in allocations), now_ms
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if split_at(upto(mid))[1].cash_minor <= budget:
                lo = mid
            else:
                hi = mid
        cutoff = lo
        targets = upto(cutoff)
        charges, paid = split_at(targets)
    total = sum(charges.values())

    tx_id = _post_usage(session, billing_account_id, allocations, targets, charges, paid, vouchers, floor, now_ms)
    _record(session, allocations, targets, charges, paid, tx_id, exhausted, set(capped))
    capped_instances = tuple(sorted({a.instance_id for a in allocations if a.id in capped}))
    for a in allocations:
        session.expire(a)
    if total > 0:
        announce(session, billing_account_id, now_ms)
    return MeterResult(total, exhausted, cutoff, capped_instances)


def _post_usage(
    session: Session,
    billing_account_id: int,
    allocations: list[AllocationRow],
    targets: dict[int, int],
    charges: dict[int, int],
    paid: posting.Split,
    vouchers: list[tuple[VoucherGrant, Account, VoucherCampaign]],
    floor: int,
    now_ms: int,
) -> int | None:
    """One balanced ledger transaction for the usage up to ``targets`` (revenue in; cash and vouchers out,
    each above its floor), idempotent on the allocations' billed marks; its id, or None when nothing is owed."""
    total = sum(charges.values())
    if total <= 0:
        return None
    key = idempotency_key("usage", billing_account_id, *sorted(f"{a.id}@{a.billed_until_ms}" for a in allocations))
    revenue = system_account(session, "revenue")
    postings = [Posting(revenue.id, total)]
    if paid.cash_minor:
        postings.append(Posting(cash_account(session, billing_account_id).id, -paid.cash_minor))
    accounts_by_grant = {g.id: a.id for g, a, _c in vouchers}
    for grant_id, taken in paid.taken_by_voucher.items():
        postings.append(Posting(accounts_by_grant[grant_id], -taken))
    floors = {p.account_id: 0 for p in postings if p.account_id != revenue.id}
    floors[cash_account(session, billing_account_id).id] = floor
    tx = post(
        session,
        key=key,
        kind="usage",
        memo=usage_memo(
            [
                UsagePart(a.instance_id, a.gpu_count, a.gpu_model, a.billed_until_ms, targets[a.id])
                for a in allocations
                if charges[a.id] > 0
            ]
        ),
        postings=postings,
        now_ms=now_ms,
        floors=floors,
    )
    return tx.id


def _record(
    session: Session,
    allocations: list[AllocationRow],
    targets: dict[int, int],
    charges: dict[int, int],
    paid: posting.Split,
    tx_id: int | None,
    exhausted: bool,
    capped: set[int],
) -> None:
    """Move each allocation's billed mark to its target (guarded by its old mark: a concurrent meter fails
    with ``meter_race``), settling those that ended or stopped here, and record every interval billed."""
    rows = []
    moves = []
    for a in allocations:
        new_until = targets[a.id]
        # An exhausted payer's allocations all end (for billing) where the money ran out; a capped
        # one where its budget did.
        stopped_here = (exhausted and a.hold_id is None) or a.id in capped
        settled = stopped_here or (a.ended_at_ms is not None and new_until >= a.ended_at_ms)
        if new_until == a.billed_until_ms and not settled:
            continue
        moves.append(
            {
                "b_id": a.id,
                "b_old": a.billed_until_ms,
                "b_until": new_until,
                "b_charge": charges[a.id],
                "b_settled": settled,
                "b_ended": new_until if stopped_here else a.ended_at_ms,
            }
        )
        if new_until > a.billed_until_ms:  # every second is recorded, charged or not
            gross = _charge(a, new_until, discounted=False)
            rows.append(
                {
                    "allocation_id": a.id,
                    "start_ms": a.billed_until_ms,
                    "end_ms": new_until,
                    "amount_minor": charges[a.id],
                    "gross_minor": gross,
                    "discount_minor": gross - charges[a.id],
                    "voucher_minor": paid.voucher_by_charge.get(a.id, 0),
                    "transaction_id": tx_id if charges[a.id] > 0 else None,
                }
            )
    if moves:
        # One executemany for all of the payer's allocations; each row is still guarded by its old
        # mark, and the summed row count (both drivers report it for executemany) must match.
        table = cast(Table, AllocationRow.__table__)
        result = session.connection().execute(
            update(table)
            .where(table.c.id == bindparam("b_id"), table.c.billed_until_ms == bindparam("b_old"))
            .values(
                billed_until_ms=bindparam("b_until"),
                billed_minor=table.c.billed_minor + bindparam("b_charge"),
                settled=bindparam("b_settled"),
                ended_at_ms=bindparam("b_ended"),
            ),
            moves,
        )
        if result.rowcount != len(moves):
            raise Conflict("meter_race", "these allocations were metered concurrently; retry the tick")
    if rows:
        session.execute(insert(UsageRecordRow), rows)


def open_allocations_by_account(
    session: Session, account_ids: list[int] | None = None
) -> dict[int, list[AllocationRow]]:
    stmt = select(AllocationRow).where(AllocationRow.settled.is_(False)).order_by(AllocationRow.id)
    if account_ids is not None:
        stmt = stmt.where(AllocationRow.billing_account_id.in_(account_ids))
    out: dict[int, list[AllocationRow]] = {}
    for alloc in session.scalars(stmt):
        out.setdefault(alloc.billing_account_id, []).append(alloc)
    return out


def unbilled_minor(alloc: AllocationRow, now_ms: int) -> int:
    """Live cost not yet posted to the ledger (for ``ps``/``show``)."""
    return _charge(alloc, _target(alloc, now_ms))


def exhaustion_ms(allocations: list[AllocationRow], budget_minor: int, now_ms: int) -> int | None:
    """When the payer's money (vouchers, balance and credit: ``budget_minor``) will run out if
    these allocations keep running, or None if not within a day. The control loop meters that
    payer then, not a tick later; the meter itself finds the exact cut-off."""
    open_allocs = [a for a in allocations if a.ended_at_ms is None]
    if not open_allocs:
        return None
    horizon = now_ms + 86_400_000
    spec = [(allocation_rate(a), a.billed_until_ms, horizon) for a in open_allocs]
    last_ok = latest_affordable_ms(spec, max(0, budget_minor), min(a.billed_until_ms for a in open_allocs), horizon)
    return None if last_ok >= horizon else last_ok + 1
