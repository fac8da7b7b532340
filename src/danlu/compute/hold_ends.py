"""Ending a hold (docs/billing.md "Packages and reservations"): at its term's end (the meter pass's
first step, ``expire_due``) or on an early cancellation (danlu.compute.holds.cancel). Every instance
still on it stops, or runs on at the on-demand price from exactly the end, as the buyer chose; its GPUs
go back to the pool."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from danlu.billing.accounts import lock_billing_account
from danlu.compute import allocations, instances
from danlu.compute.instances import continue_on_demand, request_stop, terminate_runs, transition
from danlu.compute.lifecycle import HOLD, HoldState, Status, StopCause
from danlu.context import Platform
from danlu.core.clock import iso
from danlu.core.errors import Conflict
from danlu.db.models import (
    AllocationRow,
    Event,
    Hold,
    Instance,
)

log = logging.getLogger(__name__)


def lock_instances_on(s: Session, hold_id: str) -> list[str]:
    ids = sorted(
        set(
            s.scalars(
                select(AllocationRow.instance_id).where(
                    AllocationRow.hold_id == hold_id, AllocationRow.ended_at_ms.is_(None)
                )
            )
        )
    )
    for instance_id in ids:
        s.get(Instance, instance_id, with_for_update=True, populate_existing=True)
    return ids


@dataclass
class Ended:
    handles: list[str | None] = field(default_factory=list)  # runs to terminate after commit
    orphans: list[str] = field(default_factory=list)  # prepared runs no launch of this process owns


def end_hold(p: Platform, s: Session, h: Hold, at_ms: int, state: HoldState, reason: str, locked: list[str]) -> Ended:
    """End ``h`` at ``at_ms`` (its expiry, or a cancellation now): every instance still running on
    it stops, or runs on at the on-demand price from exactly ``at_ms``, as the buyer chose; the
    GPUs are no longer kept. ``locked``: the instances on it the caller locked before the payer's
    cash row; one that started on it since makes this a 409 to retry (the lock order holds)."""
    out = Ended()
    now = p.clock.now_ms()
    for alloc in s.scalars(
        select(AllocationRow)
        .where(AllocationRow.hold_id == h.id, AllocationRow.ended_at_ms.is_(None))
        .execution_options(populate_existing=True)
    ).all():
        if alloc.instance_id not in locked:
            raise Conflict("hold_busy", f"an instance started on hold {h.id} just now; try again")
        inst = s.get(Instance, alloc.instance_id, with_for_update=True, populate_existing=True)
        if inst is None or inst.current_allocation_id != alloc.id:
            continue
        if h.on_expiry == "on-demand":
            continue_on_demand(s, inst, at_ms, reason)
        elif inst.status == Status.RUNNING:
            out.handles.append(
                request_stop(p, s, inst, StopCause.HOLD_ENDED, reason, p.settings.stop_grace_s, billing_end_ms=at_ms)
            )
        elif inst.status == Status.PENDING:  # a launch in this process sees this and kills its prepared run
            if inst.run_handle is None and not instances.is_launching(p, inst.id):
                out.orphans.append(inst.id)  # left by a server that died while launching it
            transition(s, inst, Status.STOPPED, reason, now, "stop", billing_end_ms=at_ms)
        s.add(
            Event(
                user_id=inst.user_id,
                billing_account_id=inst.billing_account_id,
                instance_id=inst.id,
                kind=f"hold_{state}",
                message=f"{inst.id}: {reason}",
                at_ms=now,
            )
        )
    h.state, h.ended_at_ms = HOLD.move(h.state, state, "end"), at_ms
    allocations.unhold(s, h.id)
    s.add(
        Event(
            user_id=h.user_id,
            billing_account_id=h.billing_account_id,
            instance_id=h.instance_id,
            kind=f"hold_{state}",
            message=f"hold {h.id} ({h.term}, {h.gpu_count}x {h.gpu_model}) {state} at {iso(at_ms)}",
            at_ms=now,
        )
    )
    s.flush()
    return out


def after_commit(p: Platform, ended: Ended) -> None:
    terminate_runs(p, ended.handles)
    for run_id in ended.orphans:
        p.backend.discard(run_id)


def next_end_ms(s: Session) -> int | None:
    """When the next active hold ends (the loop meters then, so its instances stop or go on
    demand on time)."""
    return s.execute(select(func.min(Hold.ends_at_ms)).where(Hold.state == HoldState.ACTIVE)).scalar_one_or_none()


def expire_due(p: Platform, now_ms: int | None = None) -> int:
    """End every active hold whose term is over by ``now_ms`` (the meter pass's clock reading), at
    exactly its end; returns how many. One hold's failure is logged and retried next pass."""
    now = p.clock.now_ms() if now_ms is None else now_ms
    with p.db.read() as s:
        due = list(s.scalars(select(Hold.id).where(Hold.state == HoldState.ACTIVE, Hold.ends_at_ms <= now)))
    done = 0
    for hold_id in due:
        try:
            ended = _expire_one(p, hold_id)
        except Exception:  # the other holds and the meter pass go on
            log.exception("could not end hold %s; retrying next pass", hold_id)
            continue
        if ended is not None:
            done += 1
            after_commit(p, ended)
    return done


def _expire_one(p: Platform, hold_id: str) -> Ended | None:
    with p.db.write() as s:
        locked = lock_instances_on(s, hold_id)
        h = s.get(Hold, hold_id)
        if h is None:
            return None
        lock_billing_account(s, h.billing_account_id)
        h = s.get(Hold, hold_id, with_for_update=True, populate_existing=True)
        if h is None or h.state != HoldState.ACTIVE:
            return None
        then = "runs on at the on-demand price" if h.on_expiry == "on-demand" else "stopped"
        return end_hold(p, s, h, h.ends_at_ms, HoldState.EXPIRED, f"{h.term} hold {h.id} expired: {then}", locked)
