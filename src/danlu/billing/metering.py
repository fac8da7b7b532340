"""The meter: moves allocations' billed-until marks forward and posts usage to the ledger.

One call meters a set of allocations of one user in the caller's transaction:

* each allocation is billed from ``billed_until_ms`` to its end (if it has ended) or ``now``;
* the charge is the difference of the cumulative rating (danlu.billing.rating), so ticks never
  accumulate rounding and a second is never billed twice;
* each allocation's mark moves with a guarded ``UPDATE ... WHERE billed_until_ms = :old`` and each
  metered interval is a ``usage_records`` row unique on (allocation, start) — also when it rated 0
  minor units, so the rows tile the allocation — and a crashed, retried or concurrent tick collides
  instead of double-charging;
* if the user's balance plus credit limit cannot cover the charge, usage is billed only up to the
  latest instant it covers, the user's allocations are ended there, and the caller is told the
  user is exhausted so it stops their instances. Nothing is ever charged beyond the balance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from sqlalchemy import Table, bindparam, insert, select, update
from sqlalchemy.orm import Session

from danlu.billing.accounts import idempotency_key, lock_user_account, post, system_account, user_account
from danlu.billing.ledger import Posting
from danlu.billing.rating import charge_between, latest_affordable_ms
from danlu.core.errors import Conflict
from danlu.db.models import Allocation, UsageRecord, User


@dataclass(frozen=True)
class MeterResult:
    charged_minor: int
    exhausted: bool
    cutoff_ms: int | None  # where billing stopped for an exhausted user


def _target(alloc: Allocation, now_ms: int) -> int:
    end = alloc.ended_at_ms if alloc.ended_at_ms is not None else now_ms
    return max(alloc.billed_until_ms, min(end, now_ms))


def meter_user(session: Session, user_id: int, allocations: list[Allocation], now_ms: int) -> MeterResult:
    """Bill ``allocations`` (all of one user, unsettled) up to ``now_ms``; see module docstring."""
    if not allocations:
        return MeterResult(0, False, None)
    balance = lock_user_account(session, user_id)
    # Re-read the allocations under the lock: a stop may have billed them since the caller loaded them.
    allocations = list(
        session.scalars(
            select(Allocation)
            .where(Allocation.id.in_([a.id for a in allocations]), Allocation.settled.is_(False))
            .order_by(Allocation.id)
            .execution_options(populate_existing=True)
        )
    )
    if not allocations:
        return MeterResult(0, False, None)
    targets = {a.id: _target(a, now_ms) for a in allocations}
    charges = {
        a.id: charge_between(a.price_per_hour_minor, a.gpu_count, a.started_at_ms, a.billed_until_ms, targets[a.id])
        for a in allocations
    }
    total = sum(charges.values())
    acct = user_account(session, user_id)
    user = session.get(User, user_id)
    assert user is not None
    floor = -user.credit_limit_minor
    exhausted = False
    cutoff: int | None = None
    if total > 0 and balance - total < floor:
        exhausted = True
        budget = max(0, balance - floor)
        spec = [
            (a.price_per_hour_minor, a.gpu_count, a.started_at_ms, a.billed_until_ms, targets[a.id])
            for a in allocations
        ]
        cutoff = latest_affordable_ms(spec, budget, min(a.billed_until_ms for a in allocations), now_ms)
        for a in allocations:
            targets[a.id] = max(a.billed_until_ms, min(targets[a.id], cutoff))
            charges[a.id] = charge_between(
                a.price_per_hour_minor, a.gpu_count, a.started_at_ms, a.billed_until_ms, targets[a.id]
            )
        total = sum(charges.values())

    tx_id: int | None = None
    if total > 0:
        key = idempotency_key("usage", user_id, *sorted(f"{a.id}@{a.billed_until_ms}" for a in allocations))
        revenue = system_account(session, "revenue")
        tx = post(
            session,
            key=key,
            kind="usage",
            memo=f"GPU usage of {len(allocations)} allocation(s)",
            postings=[Posting(acct.id, -total), Posting(revenue.id, total)],
            now_ms=now_ms,
            floors={acct.id: floor},
        )
        tx_id = tx.id
    rows = []
    moves = []
    for a in allocations:
        new_until = targets[a.id]
        # An exhausted user's allocations all end (for billing) where the balance ran out.
        settled = exhausted or (a.ended_at_ms is not None and new_until >= a.ended_at_ms)
        if new_until == a.billed_until_ms and not settled:
            continue
        moves.append(
            {
                "b_id": a.id,
                "b_old": a.billed_until_ms,
                "b_until": new_until,
                "b_charge": charges[a.id],
                "b_settled": settled,
                "b_ended": new_until if exhausted else a.ended_at_ms,
            }
        )
        if new_until > a.billed_until_ms:  # every second is recorded, charged or not
            rows.append(
                {
                    "allocation_id": a.id,
                    "start_ms": a.billed_until_ms,
                    "end_ms": new_until,
                    "amount_minor": charges[a.id],
                    "transaction_id": tx_id if charges[a.id] > 0 else None,
                }
            )
    if moves:
        # One executemany for all of the user's allocations; each row is still guarded by its old
        # mark, and the summed row count (both drivers report it for executemany) must match.
        table = cast(Table, Allocation.__table__)
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
        session.execute(insert(UsageRecord), rows)
    for a in allocations:
        session.expire(a)
    return MeterResult(total, exhausted, cutoff)


def open_allocations_by_user(session: Session, user_ids: list[int] | None = None) -> dict[int, list[Allocation]]:
    stmt = select(Allocation).where(Allocation.settled.is_(False)).order_by(Allocation.id)
    if user_ids is not None:
        stmt = stmt.where(Allocation.user_id.in_(user_ids))
    out: dict[int, list[Allocation]] = {}
    for alloc in session.scalars(stmt):
        out.setdefault(alloc.user_id, []).append(alloc)
    return out


def unbilled_minor(alloc: Allocation, now_ms: int) -> int:
    """Live cost not yet posted to the ledger (for ``ps``/``show``)."""
    return charge_between(
        alloc.price_per_hour_minor, alloc.gpu_count, alloc.started_at_ms, alloc.billed_until_ms, _target(alloc, now_ms)
    )


def exhaustion_ms(
    allocations: list[Allocation], balance_minor: int, credit_limit_minor: int, now_ms: int
) -> int | None:
    """When the user's balance (plus credit) will run out if these allocations keep running,
    or None if not within a day. The control loop meters that user then, not a tick later."""
    open_allocs = [a for a in allocations if a.ended_at_ms is None]
    if not open_allocs:
        return None
    horizon = now_ms + 86_400_000
    spec = [(a.price_per_hour_minor, a.gpu_count, a.started_at_ms, a.billed_until_ms, horizon) for a in open_allocs]
    budget = max(0, balance_minor + credit_limit_minor)
    last_ok = latest_affordable_ms(spec, budget, min(a.billed_until_ms for a in open_allocs), horizon)
    return None if last_ok >= horizon else last_ok + 1
