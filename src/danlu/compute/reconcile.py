"""Run reconciliation: what the control loop does every tick, and after a server restart.

The backend is asked how every run with a recorded handle stands (one :meth:`Backend.poll`). A
running one is noted as last seen alive (and killed if a stop's grace period has passed); an ended
one is finished:

* stop requested → ``stopped`` (billing had already ended at the request);
* ``exited`` → ``exited``, billing ends when the command ended (the reason says if a limit ended it);
* ``lost`` → ``lost``, billed up to the last moment it was seen alive and not beyond;
* ``never_started`` → ``failed``: the command never ran, nothing more is billed.

A verdict is applied only to the run it was reached for: the row is re-read under its lock and
must still carry the same handle (a ``start`` in between gives it a new one), as dstack guards its
pipeline results with a lock token. A ``pending`` instance with no handle, that this process is not
launching, was left by a server that died mid-launch: whatever it left is discarded and it is
``failed``, not billed. Ending billing and freeing GPUs are side effects of the transitions
(danlu.compute.instances.transition); jobs see their runs end by looking (danlu.scheduling.jobs
.settle_runs), so nothing here calls up into the job layer.

The same code adopts runs that kept going while the server was down: they are alive, so nothing
changes and the meter bills on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select, update

from danlu.backend import RunState
from danlu.billing import storage, vouchers
from danlu.billing.caps import hard_caps, in_scope
from danlu.billing.metering import exhaustion_ms, meter_account, open_allocations_by_account
from danlu.compute import hold_ends, views
from danlu.compute.instances import is_launching, policy_stop, request_stop, terminate_runs, transition
from danlu.compute.lifecycle import HAS_PROCESS, KEEPS_WORKSPACE, Status, StopCause
from danlu.compute.storage import release_workspace
from danlu.context import Platform
from danlu.core.clock import iso
from danlu.core.errors import Conflict
from danlu.db.models import AllocationRow, Event, Gpu, HostRow, Instance

log = logging.getLogger(__name__)


@dataclass
class TickReport:
    alive: int = 0
    finished: dict[str, str] = field(default_factory=dict)  # instance id → new status
    killed: int = 0
    stopping: int = 0  # stops still waiting for their process to end


def reconcile(p: Platform) -> TickReport:
    report = TickReport()
    now = p.clock.now_ms()
    with p.db.read() as s:
        rows = s.execute(
            select(Instance.id, Instance.status, Instance.run_handle, Instance.kill_after_ms).where(
                Instance.status.in_([st.value for st in HAS_PROCESS])
            )
        ).all()
    handles = {inst_id: handle for inst_id, _, handle, _ in rows if handle is not None}
    states = p.backend.poll(list(handles.values())) if handles or p.backend.starts_before_record else {}
    held = p.backend.held_elsewhere()
    if held is not None:
        sync_held_elsewhere(p, held)
    alive_ids: list[str] = []
    ended: list[tuple[str, str | None, RunState]] = []
    for inst_id, status, handle, kill_after in rows:
        if handle is None:
            if status == Status.PENDING and not is_launching(p, inst_id):
                ended.append((inst_id, None, RunState("never_started", reason="the server stopped while starting it")))
            continue
        state = states[handle]
        if state.kind == "unknown":  # the backend cannot tell now: decide nothing, not even "alive"
            continue
        if state.kind == "running":
            alive_ids.append(inst_id)
            report.stopping += status == Status.STOPPING
            if status == Status.STOPPING and kill_after is not None and kill_after <= now:
                p.backend.kill(handle)
                report.killed += 1
        else:
            ended.append((inst_id, handle, state))
    report.alive = len(alive_ids)
    if alive_ids:
        with p.db.write() as s:
            s.execute(
                update(Instance)
                .where(Instance.id.in_(alive_ids))
                .values(last_seen_alive_ms=now)
                .execution_options(synchronize_session=False, **views.UNSEEN)  # no cached read shows it
            )
    for inst_id, handle, state in ended:
        try:
            finished = _finish(p, inst_id, handle, state, now)
        except Exception:  # one bad row must not stop the loop (metering, scheduling, other exits)
            log.exception("could not finish instance %s; retrying next tick", inst_id)
            continue
        if finished:
            report.finished[inst_id] = finished
    return report


def sync_held_elsewhere(p: Platform, held: dict[tuple[str, str], int]) -> int:
    """Mark as many free GPUs of each (host, model) ``held_by_cluster`` as the cluster's own jobs
    hold there, and unmark the rest, so offers and claims never count them (Slurm: other users'
    jobs). Guarded UPDATEs: a GPU a rental claimed meanwhile is left alone. Returns GPUs changed."""
    with p.db.read() as s:
        rows = s.execute(
            select(Gpu.id, HostRow.name, Gpu.model, Gpu.held_by_cluster, Gpu.allocation_id, Gpu.hold_id, Gpu.idx)
            .join(HostRow, HostRow.id == Gpu.host_id)
            .where(Gpu.present.is_(True))
        ).all()
    groups: dict[tuple[str, str], list[Any]] = {}
    for row in rows:
        groups.setdefault((row[1], row[2]), []).append(row)
    mark: list[int] = []
    unmark: list[int] = []
    for key, gpus in groups.items():
        now_held = [g for g in gpus if g[3]]
        want = held.get(key, 0)
        if len(now_held) > want:
            unmark += [g[0] for g in sorted(now_held, key=lambda g: g[6])[: len(now_held) - want]]
        elif len(now_held) < want:
            free = sorted((g for g in gpus if not g[3] and g[4] is None and g[5] is None), key=lambda g: -g[6])
            mark += [g[0] for g in free[: want - len(now_held)]]
    if not mark and not unmark:
        return 0
    with p.db.write() as s:
        changed = 0
        if mark:
            changed += s.execute(
                update(Gpu)
                .where(Gpu.id.in_(mark), Gpu.allocation_id.is_(None), Gpu.hold_id.is_(None))
                .values(held_by_cluster=True)
                .execution_options(synchronize_session=False)
            ).rowcount  # type: ignore[attr-defined]
        if unmark:
            changed += s.execute(
                update(Gpu)
                .where(Gpu.id.in_(unmark))
                .values(held_by_cluster=False)
                .execution_options(synchronize_session=False)
            ).rowcount  # type: ignore[attr-defined]
    log.info(
        "GPUs the cluster holds (its own jobs, nodes no run can start on): %s",
        {f"{h}/{m}": n for (h, m), n in held.items()} or "none",
    )
    return changed


def _finish(p: Platform, inst_id: str, handle: str | None, state: RunState, now: int) -> str | None:
    with p.db.write() as s:
        # SKIP LOCKED (PostgreSQL): a row another server or a user's request holds is judged again
        # next tick rather than waited for; the verdict below is re-checked against the row anyway.
        inst = s.scalars(
            select(Instance)
            .where(Instance.id == inst_id)
            .with_for_update(skip_locked=True)
            .execution_options(populate_existing=True)
        ).first()
        if inst is None or Status(inst.status) not in HAS_PROCESS or inst.run_handle != handle:
            return None  # changed since it was judged (e.g. started again): the verdict is stale
        if handle is None and (inst.status != Status.PENDING or is_launching(p, inst_id)):
            return None
        if state.kind == "exited":
            inst.exit_code = state.code
        ended = state.ended_ms if state.kind == "exited" and state.ended_ms is not None else None
        seen = inst.last_seen_alive_ms or inst.updated_at_ms
        if ended is None and (beat := _heartbeat(p, handle)) is not None:
            # Not past the run's last heartbeat either: Slurm says a dead node's job runs until SlurmdTimeout
            # (300 s in production), the node's runner beats every few seconds (issue 28, finding 8).
            seen = min(seen, beat)
        if state.kind == "never_started" or handle is None:
            # The command never ran: the launch is failed and nothing past what was posted is billed.
            why = state.reason or "the server stopped while starting it"
            to, billed_to, reason = Status.FAILED, 0, f"{why}; it never ran and is not billed"
        elif inst.status == Status.STOPPING:
            # A user's stop ended billing at the request already; a preemption notice bills until
            # the process really ended (its exit time, else the last time it was seen alive).
            # Keep saying why it was stopped (the user, the operator's reason, a preemption …).
            why = inst.status_reason or "stop requested"
            billed_to = ended if ended is not None else seen
            to, reason = Status.STOPPED, f"{why}; the process has ended"
        elif ended is not None:
            to, billed_to, reason = Status.EXITED, ended, state.reason or f"command exited with code {state.code}"
        else:
            if state.ended_ms is not None:  # the backend's own end (Slurm's NODE_FAIL time): never past it
                seen = min(seen, state.ended_ms)
            why = state.reason or "process vanished without an exit status"
            to, billed_to, reason = Status.LOST, seen, f"{why}; last seen alive {iso(seen)}"
        transition(s, inst, to, reason, now, "finish", billing_end_ms=min(billed_to, now))
        new_status = inst.status
    if handle is None:
        p.backend.discard(inst_id)
    else:  # leftovers of the run must not keep using the GPU; then free what the backend holds
        p.backend.kill(handle)
        p.backend.release(handle)
    return new_status


def _heartbeat(p: Platform, handle: str | None) -> int | None:
    return p.backend.alive_until([handle]).get(handle) if handle is not None else None


@dataclass
class MeterReport:
    accounts: int = 0
    charged_minor: int = 0
    exhausted_accounts: list[int] = field(default_factory=list)
    next_exhaustion_ms: int | None = None
    vouchers_expired: int = 0
    capped_instances: list[str] = field(default_factory=list)
    storage_warned: int = 0
    storage_released: int = 0
    holds_expired: int = 0


def meter_all(p: Platform, until_ms: int | None = None) -> MeterReport:
    """Expire what vouchers are due (after billing their payers up to the expiry), post all
    unbilled usage, and stop every running instance of a payer whose money ran out.

    ``until_ms`` (default: now) is how far running allocations are billed. The control loop passes
    the start of its tick, read before it polled the processes: a run seen alive then ended after
    it, so a run that ends while the loop schedules or samples is never billed past its end (the
    exit, noticed next tick, could not take that time back; the kill drill saw 614 ms).

    Each billing account is metered in a transaction of its own, so the shared revenue account's
    row lock is held only for one payer's posting: a concurrent stop (payer account, then revenue)
    can never wait on a meter pass that holds revenue while waiting for that payer (a PostgreSQL
    deadlock otherwise).
    """
    report = MeterReport()
    now = p.clock.now_ms() if until_ms is None else min(until_ms, p.clock.now_ms())
    # Holds first, by the same clock reading the meter bills to: an instance on one that ended runs
    # on at the on-demand price from exactly its end (never billed at 0 past it).
    report.holds_expired = hold_ends.expire_due(p, now)
    report.vouchers_expired = vouchers.expire_due(p, now)
    with p.db.read() as s:
        by_account = open_allocations_by_account(s)
        launching: set[int | None] = set()
        if p.backend.starts_before_record:
            # A backend that times runs itself (Slurm) moves a launch's start to its own record when
            # the launch is recorded, so a launch in progress is metered once it runs, from then.
            pending = select(Instance.current_allocation_id).where(Instance.status == Status.PENDING.value)
            launching = set(s.scalars(pending))
        running = (
            s.execute(
                select(Instance.current_allocation_id, Instance.run_handle).where(
                    Instance.status == Status.RUNNING.value, Instance.run_handle.is_not(None)
                )
            ).all()
            if by_account
            else []
        )
    # A run is billed no further than its last heartbeat where the backend's records lag a death (a dead
    # Slurm node's jobs stay RUNNING until SlurmdTimeout; issue 28, finding 8). A late heartbeat catches up.
    beats = p.backend.alive_until([str(h) for _, h in running]) if running else {}
    horizons = {int(a): beats[str(h)] for a, h in running if a is not None and str(h) in beats}
    by_account = {
        acct: kept for acct, allocs in by_account.items() if (kept := [a for a in allocs if a.id not in launching])
    }
    report.accounts = len(by_account)
    for account_id, allocs in by_account.items():
        try:
            with p.db.write() as s:
                result = meter_account(s, account_id, [s.merge(a, load=False) for a in allocs], now, horizons)
        except Conflict as exc:  # a concurrent stop metered these first; the next pass retries
            log.warning("meter skipped billing account %s: %s", account_id, exc.message)
            continue
        except Exception:  # one payer's failure must not stop metering the others
            log.exception("could not meter billing account %s; retrying next pass", account_id)
            continue
        report.charged_minor += result.charged_minor
        if result.exhausted:
            report.exhausted_accounts.append(account_id)
        report.capped_instances.extend(result.capped_instances)
    report.next_exhaustion_ms = _next_exhaustion(p, now)
    for account_id in report.exhausted_accounts:
        stop_all_for_exhausted(p, account_id)
    stop_capped(p, report.capped_instances)
    report.storage_warned, report.storage_released = storage_retention(p)
    return report


def _next_exhaustion(p: Platform, now: int) -> int | None:
    """When the first payer's money (vouchers, balance, credit) will run out at current burn, so the
    loop meters that payer then, not at the next interval (the next voucher expiry counts too)."""
    with p.db.read() as s:
        remaining = open_allocations_by_account(s)
        times = [vouchers.next_expiry_ms(s), hold_ends.next_end_ms(s)]
        if remaining:
            budgets = vouchers.spendable_minor(s, list(remaining), now)
            times += [exhaustion_ms(a, budgets.get(b, 0), now) for b, a in remaining.items()]
            # Hard caps too (a capped instance ran on, unpaid, until the next interval: issue 11's last stop).
            for payer, allocs in remaining.items():
                for budget, left in hard_caps(s, payer, now):
                    scoped = [a for a in allocs if in_scope(budget, a) and a.hold_id is None]
                    times.append(exhaustion_ms(scoped, left, now) if scoped else None)
    return min((t for t in times if t is not None), default=None)


def storage_retention(p: Platform) -> tuple[int, int]:
    """Warn renters whose instances stayed stopped past the warning period, and release the
    workspaces of those warned a release period ago (never one without a warning). Returns
    (warned, released)."""
    now = p.clock.now_ms()
    with p.db.read() as s:
        pol = storage.policy(s)
        due = list(
            s.execute(
                select(Instance.id, Instance.stopped_at_ms, Instance.storage_warned_at_ms).where(
                    Instance.stopped_at_ms.is_not(None),
                    Instance.workspace_released_at_ms.is_(None),
                    Instance.status.in_([st.value for st in KEEPS_WORKSPACE]),
                    Instance.job_id.is_(None),
                )
            ).all()
        )
    warned = released = 0
    for inst_id, stopped_at_or_none, warned_at in due:
        stopped_at = int(stopped_at_or_none or 0)
        if warned_at is None and now - stopped_at >= pol.warn_after_s * 1000:
            with p.db.write() as s:
                inst = s.get(Instance, inst_id, with_for_update=True, populate_existing=True)
                if inst is None or inst.stopped_at_ms is None or inst.storage_warned_at_ms is not None:
                    continue
                inst.storage_warned_at_ms = now
                when = iso(now + pol.release_after_s * 1000)
                s.add(
                    Event(
                        user_id=inst.user_id,
                        billing_account_id=inst.billing_account_id,
                        instance_id=inst.id,
                        kind="storage_retention_warning",
                        message=f"{inst.id} has been stopped since {iso(stopped_at)}; its workspace will be "
                        f"released at {when} unless you start it (`danlu start {inst.id}`) or copy your data out",
                        at_ms=now,
                    )
                )
                warned += 1
        elif warned_at is not None and now - int(warned_at) >= pol.release_after_s * 1000:
            if pol.snapshot_before_release:  # the snapshots phase releases it, once its snapshot is taken
                continue
            released += release_workspace(p, inst_id, now)
    return warned, released


def stop_capped(p: Platform, instance_ids: list[str]) -> None:
    """Stop instances whose hard budget cap was reached, with the preemption notice (billing already
    ended at the cap), and say so in the feed and to webhooks (``budget_stop``)."""
    handles: list[str | None] = []
    reason = "hard budget cap reached: raise the budget to start again"
    with p.db.write() as s:
        for inst in s.scalars(
            select(Instance)
            .where(Instance.id.in_(instance_ids), Instance.status == Status.RUNNING.value)
            .order_by(Instance.id)
            .with_for_update()
        ).all():
            handles.append(policy_stop(p, s, inst, StopCause.BUDGET_CAP, reason))
            s.add(Event.about_instance(inst, "budget_stop", reason, p.clock.now_ms()))
    terminate_runs(p, handles)


def stop_all_for_exhausted(p: Platform, billing_account_id: int) -> None:
    handles: list[str | None] = []
    with p.db.write() as s:
        # Instances on a prepaid package or reservation go on: their GPU time was paid for.
        on_hold = select(AllocationRow.id).where(AllocationRow.hold_id.is_not(None))
        insts = s.scalars(
            select(Instance)
            .where(
                Instance.billing_account_id == billing_account_id,
                Instance.status.in_([Status.RUNNING.value]),
                (Instance.current_allocation_id.is_(None)) | (Instance.current_allocation_id.not_in(on_hold)),
            )
            .order_by(Instance.id)
            .with_for_update()
        ).all()
        for inst in insts:
            handles.append(
                request_stop(
                    p,
                    s,
                    inst,
                    StopCause.BALANCE,
                    "balance exhausted: top up to start again",
                    p.settings.exhausted_grace_s,
                )
            )
            s.add(Event.about_instance(inst, "balance_stop", inst.stop_reason or "", p.clock.now_ms()))
    terminate_runs(p, handles)
