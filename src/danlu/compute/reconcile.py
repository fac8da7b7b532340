"""Process reconciliation: what the control loop does every tick, and after a server restart.

For every instance that should have a process: if it is alive, note when it was last seen alive
(and SIGKILL it if a stop's grace period has passed); if it is gone, finish it:

* stop requested → ``stopped`` (billing had already ended at the request);
* an exit status was recorded → ``exited``, billing ends when the command ended;
* no exit status → ``lost``, billed up to the last moment it was seen alive and not beyond.

The same code adopts processes that kept running while the server was down: they are alive, so
nothing changes and the meter bills on.
"""

from __future__ import annotations

import logging
import signal
from dataclasses import dataclass, field

from sqlalchemy import select, update

from danlu.billing.metering import exhaustion_ms, meter_user, open_allocations_by_user
from danlu.compute.executor import ProcessRef
from danlu.compute.instances import end_allocation, request_stop, run_dir, transition
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


def reconcile(p: Platform) -> TickReport:
    report = TickReport()
    now = p.clock.now_ms()
    with p.db.read() as s:
        rows = s.execute(
            select(Instance.id, Instance.status, Instance.pid, Instance.proc_start_ticks, Instance.kill_after_ms).where(
                Instance.status.in_([st.value for st in HAS_PROCESS])
            )
        ).all()
    alive_ids: list[str] = []
    dead: list[str] = []
    for inst_id, status, pid, ticks, kill_after in rows:
        if pid is None:
            continue  # pending: being launched right now
        ref = ProcessRef(pid, ticks or 0)
        if p.executor.alive(ref):
            alive_ids.append(inst_id)
            if status == Status.STOPPING and kill_after is not None and kill_after <= now:
                p.executor.signal_group(ref, signal.SIGKILL)
                report.killed += 1
        else:
            dead.append(inst_id)
    report.alive = len(alive_ids)
    if alive_ids:
        with p.db.write() as s:
            s.execute(
                update(Instance)
                .where(Instance.id.in_(alive_ids))
                .values(last_seen_alive_ms=now)
                .execution_options(synchronize_session=False)
            )
    for inst_id in dead:
        try:
            finished = _finish(p, inst_id, now)
        except Exception:  # one bad row must not stop the loop (metering, scheduling, other exits)
            log.exception("could not finish instance %s; retrying next tick", inst_id)
            continue
        if finished:
            report.finished[inst_id] = finished
    return report


def _finish(p: Platform, inst_id: str, now: int) -> str | None:
    with p.db.write() as s:
        inst = s.get(Instance, inst_id, with_for_update=True, populate_existing=True)
        if inst is None or Status(inst.status) not in HAS_PROCESS or inst.pid is None:
            return None
        info = p.executor.exit_info(run_dir(p, inst))
        ref = ProcessRef(inst.pid or 0, inst.proc_start_ticks or 0)
        if info is not None:
            inst.exit_code = info.code
        if inst.status == Status.STOPPING:
            # A user's stop ended billing at the request already; a preemption notice bills until
            # the process really ended (its exit time, else the last time it was seen alive).
            seen = inst.last_seen_alive_ms or now
            end_allocation(s, inst, min(info.ended_ms if info is not None else seen, now))
            transition(s, inst, Status.STOPPED, "process ended after stop", now, "finish")
        elif info is not None:
            end_allocation(s, inst, min(info.ended_ms, now))
            transition(s, inst, Status.EXITED, f"command exited with code {info.code}", now, "finish")
        else:
            seen = inst.last_seen_alive_ms or inst.updated_at_ms
            end_allocation(s, inst, min(seen, now))
            transition(
                s,
                inst,
                Status.LOST,
                f"process vanished without an exit status; last seen alive {iso(seen)}",
                now,
                "finish",
            )
        if inst.job_id is not None:
            from danlu.scheduling.jobs import on_run_finished  # jobs build on instances, not the reverse

            on_run_finished(p, s, inst, now)
        new_status = inst.status
    if ref.pid:  # leftovers of the command's process group must not keep using the GPU
        p.executor.signal_group(ref, signal.SIGKILL)
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
    refs: list[ProcessRef] = []
    with p.db.write() as s:
        insts = s.scalars(
            select(Instance)
            .where(Instance.user_id == user_id, Instance.status.in_([Status.RUNNING.value]))
            .order_by(Instance.id)
            .with_for_update()
        ).all()
        for inst in insts:
            refs.append(
                request_stop(p, s, inst, "balance exhausted: top up to start again", p.settings.exhausted_grace_s)
            )
    for ref in refs:
        if ref.pid:
            p.executor.signal_group(ref, signal.SIGTERM)
