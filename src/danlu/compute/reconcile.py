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

from sqlalchemy import select, update

from danlu.billing.metering import exhaustion_ms, meter_user, open_allocations_by_user
from danlu.compute.backends.base import RunState
from danlu.compute.instances import is_launching, request_stop, terminate_runs, transition
from danlu.compute.lifecycle import HAS_PROCESS, Status
from danlu.context import Platform
from danlu.core.clock import iso
from danlu.core.errors import Conflict
from danlu.db.models import Account, Instance, User

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
    states = p.backend.poll(list(handles.values())) if handles else {}
    alive_ids: list[str] = []
    ended: list[tuple[str, str | None, RunState]] = []
    for inst_id, status, handle, kill_after in rows:
        if handle is None:
            if status == Status.PENDING and not is_launching(p, inst_id):
                ended.append((inst_id, None, RunState("never_started", reason="the server stopped while starting it")))
            continue
        state = states[handle]
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
                .execution_options(synchronize_session=False)
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


@dataclass
class MeterReport:
    users: int = 0
    charged_minor: int = 0
    exhausted_users: list[int] = field(default_factory=list)
    next_exhaustion_ms: int | None = None


def meter_all(p: Platform) -> MeterReport:
    """Post all unbilled usage; stop every running instance of a user whose balance ran out.

    Each user is metered in a transaction of its own, so the shared revenue account's row lock is
    held only for one user's posting: a concurrent stop (user account, then revenue) can never wait
    on a meter pass that holds revenue while waiting for that user (a PostgreSQL deadlock otherwise).
    """
    report = MeterReport()
    now = p.clock.now_ms()
    with p.db.read() as s:
        by_user = open_allocations_by_user(s)
    report.users = len(by_user)
    for user_id, allocs in by_user.items():
        try:
            with p.db.write() as s:
                result = meter_user(s, user_id, [s.merge(a, load=False) for a in allocs], now)
        except Conflict as exc:  # a concurrent stop metered these first; the next pass retries
            log.warning("meter skipped user %s: %s", user_id, exc.message)
            continue
        except Exception:  # one user's failure must not stop metering the others
            log.exception("could not meter user %s; retrying next pass", user_id)
            continue
        report.charged_minor += result.charged_minor
        if result.exhausted:
            report.exhausted_users.append(user_id)
    report.next_exhaustion_ms = _next_exhaustion(p, now)
    for user_id in report.exhausted_users:
        stop_all_for_exhausted(p, user_id)
    return report


def _next_exhaustion(p: Platform, now: int) -> int | None:
    """When the first user's balance (plus credit) will run out at current burn, so the loop meters
    that user then, not at the next interval."""
    with p.db.read() as s:
        remaining = open_allocations_by_user(s)
        if not remaining:
            return None
        ids = list(remaining)
        balances = dict(
            s.execute(
                select(Account.user_id, Account.balance_minor).where(Account.kind == "user", Account.user_id.in_(ids))
            ).all()
        )
        credit = dict(s.execute(select(User.id, User.credit_limit_minor).where(User.id.in_(ids))).all())
    times = [exhaustion_ms(a, balances.get(u, 0), credit.get(u, 0), now) for u, a in remaining.items()]
    return min((t for t in times if t is not None), default=None)


def stop_all_for_exhausted(p: Platform, user_id: int) -> None:
    handles: list[str | None] = []
    with p.db.write() as s:
        insts = s.scalars(
            select(Instance)
            .where(Instance.user_id == user_id, Instance.status.in_([Status.RUNNING.value]))
            .order_by(Instance.id)
            .with_for_update()
        ).all()
        for inst in insts:
            handles.append(
                request_stop(p, s, inst, "balance exhausted: top up to start again", p.settings.exhausted_grace_s)
            )
    terminate_runs(p, handles)
