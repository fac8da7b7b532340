"""The live scheduling round: the same round as ``danlu simulate`` (:func:`danlu.scheduling.rounds.run_round`
with :class:`LiveShell`), on the real clock, with the database as its state and the instance service as
its hands.

Each round settles the jobs whose runs ended (:func:`danlu.scheduling.lifecycle.after_run`), reads
the queue, the hosts' free GPUs (interactive rentals simply occupy theirs), the running job runs and
the prices; asks :func:`danlu.scheduling.core.schedule`; and applies the
decisions: Start → a job run (an instance on exactly the decided host, model and GPUs, metered
like any rental at the plan's price); Preempt → a guaranteed notice (SIGTERM + the deadline file,
then SIGKILL at the deadline; billed at the interruptible price meanwhile); Defer → the reason is
shown on the job.

Durations: a job's ``--est-duration`` is taken to be measured on its first listed GPU type and
scaled to the others by FP32 TFLOPS (danlu.scheduling.speed); without one, the operator's
``job_default_duration_s`` is assumed. The operator's off-peak tariff rules in force now
(danlu.billing.tariffs) are in the price book, so deferral weighs the same windows the meter rates by.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session, aliased

from danlu.accounts.payers import currency
from danlu.billing.pricing import Plan, PriceBook
from danlu.billing.tariffs import current_tariffs
from danlu.compute import allocations
from danlu.compute.instances import begin_launch, begin_notice, launch, terminate_runs
from danlu.compute.lifecycle import HAS_PROCESS, KEEPS_WORKSPACE, Status
from danlu.compute.opening import open_allocation
from danlu.compute.quotas import gpus_held
from danlu.compute.runs import build_spec, ensure_sandbox_uid
from danlu.context import Platform
from danlu.core.clock import iso
from danlu.core.errors import DanluError
from danlu.db.models import AllocationRow, Gpu, Instance, InstanceEvent, Job, Price, User
from danlu.scheduling import jobs as jobsvc
from danlu.scheduling.fairshare import DEFAULT_HALF_LIFE_MS
from danlu.scheduling.lifecycle import notice_deadline
from danlu.scheduling.model import PRIORITY_NORMAL, Allocation, ClusterView, Defer, Host, JobRequest, Preempt, Start
from danlu.scheduling.placement import even_split
from danlu.scheduling.policies import Policy, get_policy
from danlu.scheduling.rounds import RoundReport as RoundReport
from danlu.scheduling.rounds import run_round
from danlu.scheduling.speed import durations_from_reference

log = logging.getLogger(__name__)


def _hosts(p: Platform) -> tuple[tuple[Host, ...], dict[str, tuple[int, str]]]:
    with p.db.read() as s:
        rows = s.execute(
            select(Gpu.host_id, Gpu.model, func.count(), allocations.BUSY)
            .where(Gpu.present.is_(True))
            .group_by(Gpu.host_id, Gpu.model)
        ).all()
    hosts, ids = [], {}
    for host_id, model, total, busy in rows:
        key = f"{host_id}/{model}"
        hosts.append(Host(key, model, int(total), int(total) - int(busy or 0)))
        ids[key] = (int(host_id), str(model))
    return tuple(hosts), ids


def _queue(
    s: Session,
    models_here: set[str],
    prices: dict[tuple[str, Plan], int],
    default_ms: int,
    runs: dict[str, list[Run]],
    now: int,
    spans_hosts: bool,
    largest_free: dict[str, int],
) -> list[JobRequest]:
    """The queued jobs the core may place, in submission order: each with its time left on every model it
    can run on here (from its progress so far, as simulated); a suspended renter's wait untouched.
    ``largest_free``: each model's most free GPUs on one host (whether a resized job's count fits)."""
    queue = []
    suspended = set(s.scalars(select(User.id).where(User.suspended_reason.is_not(None))))
    waiting = set(_waiting_for_their_after_job(s)) | jobsvc.waiting_for_workspace(s)
    for job in s.scalars(select(Job).where(Job.status == jobsvc.QUEUED).order_by(Job.seq)):
        if job.user_id in suspended:  # waits, untouched, until the operator resumes the account
            continue
        if job.id in waiting:  # ``--after`` a job that has not succeeded yet
            continue
        durations = _durations(job, models_here, prices, default_ms)
        if not durations:
            continue
        attained = _attained(runs.get(job.id, ()), durations, now)
        counts = _elastic_counts(job, durations, attained)
        pinned = job.resize_to
        if pinned is not None and pinned in counts and any(largest_free.get(m, 0) >= pinned for m in counts[pinned]):
            counts = {pinned: counts[pinned]}  # resized: its next run takes the decided count while it fits
        base = min(counts, default=job.gpus)
        queue.append(
            JobRequest(
                id=job.id,
                user=str(job.user_id),
                gpus=base,
                submit_ms=job.submit_ms,
                durations_ms=counts.get(base) or _left(durations, attained, job.gpus),
                priority=job.priority,
                interruptible=job.interruptible,
                max_price_minor=job.max_price_minor,
                deadline_ms=job.deadline_ms,
                seq=job.seq,
                attained_ms=attained,
                # a gang over several Slurm nodes (the core spreads only a gang of 2 GPUs or more)
                spread_ok=spans_hosts and (job.gpus > 1 or bool(counts)),
                counts_ms=counts,
            )
        )
    return queue


def _elastic_counts(job: Job, durations: dict[str, int], attained: int) -> dict[int, dict[str, int]]:
    """An elastic job's run time left at each count it may run at (its range's ends and the powers of two
    between), from its ``--est-duration`` at its smallest count scaled linearly in GPUs (the same GPU-time
    at every count: optimistic, and the only figure a live job gives), from its progress so far. Empty
    for a job of one count."""
    if job.gpus_max is None:
        return {}
    counts = {job.gpus, job.gpus_max} | {1 << k for k in range(11) if job.gpus < 1 << k < job.gpus_max}
    return {
        n: _left({m: max(1000, d * job.gpus // n) for m, d in durations.items()}, attained, n) for n in sorted(counts)
    }


def _waiting_for_their_after_job(s: Session) -> list[str]:
    dep = aliased(Job)
    return list(
        s.scalars(
            select(Job.id)
            .join(dep, dep.id == Job.after_job_id)
            .where(Job.status == jobsvc.QUEUED, dep.status != jobsvc.SUCCEEDED)
        )
    )


def _view(p: Platform, demote: bool = False) -> tuple[ClusterView, dict[str, tuple[int, str]], frozenset[str]]:
    """The core's view, the host keys' (host id, model), and which running items are rentals.
    ``demote``: the policy demotes by attained service, so whether running jobs checkpoint matters."""
    hosts, ids = _hosts(p)
    now = p.clock.now_ms()
    default_ms = p.settings.job_default_duration_s * 1000
    with p.db.read() as s:
        cur = currency(s)
        price_rows = list(s.scalars(select(Price)))
        prices: dict[tuple[str, Plan], int] = {}
        for pr in price_rows:
            prices[(pr.gpu_model, Plan.ON_DEMAND)] = pr.price_per_hour_minor
            if pr.interruptible_price_per_hour_minor is not None:
                prices[(pr.gpu_model, Plan.INTERRUPTIBLE)] = pr.interruptible_price_per_hour_minor
        book_tariffs = current_tariffs(s, now)
        models_here = {h.gpu_model for h in hosts}
        runs = _runs(s)
        largest_free: dict[str, int] = {}
        for h in hosts:
            largest_free[h.gpu_model] = max(largest_free.get(h.gpu_model, 0), h.free_gpus)
        queue = _queue(s, models_here, prices, default_ms, runs, now, p.backend.spans_hosts, largest_free)
        gangs = _gang_parts(s)
        running = []
        for job, inst, alloc in s.execute(
            select(Job, Instance, AllocationRow)
            .join(Instance, Instance.id == Job.current_instance_id)
            .join(AllocationRow, AllocationRow.id == Instance.current_allocation_id)
            .where(Job.status.in_([jobsvc.RUNNING, jobsvc.STOPPING]))
        ).all():
            durations = _durations(job, models_here, prices, default_ms) or {inst.gpu_model: default_ms}
            attained = _attained(runs.get(job.id, ()), durations, now)
            counts = _elastic_counts(job, durations, attained)
            left = counts.get(inst.gpu_count) or _left(durations, attained, job.gpus)
            here = left.get(inst.gpu_model, default_ms)
            est_end = now + max(1000, here)
            # an elastic job's counts as Allocation.counts_ms reads them: whole run times over its span so far
            span = (est_end - alloc.started_at_ms) / max(1, est_end - now)
            running.append(
                Allocation(
                    job_id=job.id,
                    user=str(job.user_id),
                    host_id=f"{inst.host_id}/{inst.gpu_model}",
                    gpu_model=inst.gpu_model,
                    gpus=inst.gpu_count,
                    start_ms=alloc.started_at_ms,
                    est_end_ms=est_end,
                    priority=job.priority,
                    interruptible=job.interruptible,
                    stopping_at_ms=job.notice_deadline_ms,
                    attained_ms=attained,
                    checkpoints=demote and _has_checkpoint(p, job.id),  # read only when it can matter
                    parts=gangs.get(alloc.id, ()),
                    counts_ms={n: {m: round(d * span) for m, d in c.items()} for n, c in counts.items()},
                )
            )
        rentals = _interruptible_rentals(s, now, default_ms)
        running.extend(rentals)
        quotas, usage = _quotas(s), _usage(s, now)
    view = ClusterView(
        now_ms=now,
        hosts=hosts,
        queue=tuple(queue),
        running=tuple(running),
        prices=PriceBook(cur, prices, book_tariffs),
        notice_ms=p.settings.preempt_notice_s * 1000,
        resize_cooldown_ms=p.settings.resize_cooldown_s * 1000,
        quotas_gpus=quotas,
        usage=usage,
    )
    return view, ids, frozenset(r.job_id for r in rentals)


def _gang_parts(s: Session) -> dict[int, tuple[tuple[str, int], ...]]:
    """Running allocations over several hosts -> their parts as the view's host keys, the allocation's own
    host first (one query)."""
    by_alloc: dict[int, list[tuple[bool, int, str, int]]] = {}
    for alloc_id, host_id, model, n, first in s.execute(
        select(Gpu.allocation_id, Gpu.host_id, Gpu.model, func.count(), AllocationRow.host_id)
        .join(AllocationRow, AllocationRow.id == Gpu.allocation_id)
        .group_by(Gpu.allocation_id, Gpu.host_id, Gpu.model, AllocationRow.host_id)
    ).all():
        by_alloc.setdefault(int(alloc_id or 0), []).append((host_id != first, int(host_id), str(model), int(n)))
    return {a: tuple((f"{h}/{m}", n) for _, h, m, n in sorted(rows)) for a, rows in by_alloc.items() if len(rows) > 1}


def _durations(job: Job, models_here: set[str], prices: dict[tuple[str, Plan], int], default_ms: int) -> dict[str, int]:
    """The job's whole run time on each GPU model it may use here (its ``--est-duration`` taken as
    measured on its first listed type, scaled by specs); empty when none is here and priced."""
    allowed = [t for t in job.gpu_types.split(",") if t] or sorted(models_here)
    allowed = [m for m in allowed if m in models_here and (m, Plan.ON_DEMAND) in prices]
    if not allowed:
        return {}
    return durations_from_reference((job.est_duration_s or 0) * 1000 or default_ms, allowed[0], allowed)


def _left(durations: dict[str, int], attained_ms: int, gpus: int) -> dict[str, int]:
    """Run time left on each model after ``attained_ms`` of service (GPU-ms at the fastest model's
    speed), as the simulator scales a resumed job's durations by its remaining work."""
    fastest = min(durations.values())
    done = min(1.0, attained_ms / (fastest * gpus)) if fastest > 0 and gpus > 0 else 0.0
    return {m: max(1000, round(d * (1.0 - done))) for m, d in durations.items()}


Run = tuple[str, int, int, int | None]  # (GPU model, GPUs, allocation start, end or None while running)


def _runs(s: Session) -> dict[str, list[Run]]:
    """Every allocation of every queued or running job that has run before, by job: one query per
    round, not one per job."""
    out: dict[str, list[Run]] = {}
    for job_id, model, gpus, start, end in s.execute(
        select(
            Instance.job_id,
            Instance.gpu_model,
            AllocationRow.gpu_count,
            AllocationRow.started_at_ms,
            AllocationRow.ended_at_ms,
        )
        .join(AllocationRow, AllocationRow.instance_id == Instance.id)
        .join(Job, Job.id == Instance.job_id)
        .where(Job.status.in_([jobsvc.QUEUED, jobsvc.RUNNING, jobsvc.STOPPING]), Job.attempts > 0)
    ).all():
        out.setdefault(str(job_id), []).append((str(model), int(gpus), int(start), end))
    return out


def _attained(runs: Iterable[Run], durations: dict[str, int], now: int) -> int:
    """The job's service so far, as the simulator counts it: GPU-ms of its runs, each weighed by its
    GPU model's speed relative to the job's fastest (an hour on a slow type counts for less)."""
    fastest = min(durations.values(), default=0)
    total = 0.0
    for model, gpus, start, end in runs:
        there = durations.get(model) or fastest
        if there > 0:
            total += gpus * max(0, (end if end is not None else now) - start) * fastest / there
    return round(total)


def _has_checkpoint(p: Platform, job_id: str) -> bool:
    """Whether the job has written anything to its checkpoint directory: only then may it be demoted
    for a job with less service (a job that never checkpoints would lose its work)."""
    try:
        return any((jobsvc.job_dir(p, job_id) / "checkpoints").iterdir())
    except OSError:  # no such directory yet, or not ours to read: assume it does not checkpoint
        return False


def _interruptible_rentals(s: Session, now: int, default_ms: int) -> list[Allocation]:
    """Interruptible interactive rentals, as the core sees them: preemptible (with notice) by any
    non-interruptible job of normal or high priority. Their id is the instance id."""
    out = []
    for inst, alloc in s.execute(
        select(Instance, AllocationRow)
        .join(AllocationRow, AllocationRow.id == Instance.current_allocation_id)
        .where(
            Instance.interruptible.is_(True),
            Instance.job_id.is_(None),
            Instance.status.in_([Status.RUNNING.value, Status.STOPPING.value]),
        )
    ).all():
        out.append(
            Allocation(
                job_id=inst.id,
                user=str(inst.user_id),
                host_id=f"{inst.host_id}/{inst.gpu_model}",
                gpu_model=inst.gpu_model,
                gpus=inst.gpu_count,
                start_ms=alloc.started_at_ms,
                est_end_ms=now + default_ms,
                priority=PRIORITY_NORMAL,
                interruptible=True,
                stopping_at_ms=inst.kill_after_ms if inst.status == Status.STOPPING.value else None,
            )
        )
    return out


def _quotas(s: Session) -> dict[str, int]:
    """What is left of each user's GPU quota for job runs once their rentals are counted."""
    out = {}
    for user_id, quota in s.execute(select(User.id, User.gpu_quota).where(User.gpu_quota.is_not(None))).all():
        out[str(user_id)] = max(0, (quota or 0) - gpus_held(s, user_id, jobs=False, interruptible=False))
    return out


def _usage(s: Session, now: int) -> dict[str, float]:
    """Fair-share usage: GPU-hours of every allocation (rentals and jobs) in the last two half-lives,
    each weighted by 0.5 ** (age of its midpoint / half-life), like Slurm's decayed usage."""
    since = now - 2 * DEFAULT_HALF_LIFE_MS
    rows = s.execute(
        select(
            AllocationRow.user_id, AllocationRow.gpu_count, AllocationRow.started_at_ms, AllocationRow.ended_at_ms
        ).where((AllocationRow.ended_at_ms.is_(None)) | (AllocationRow.ended_at_ms > since))
    ).all()
    usage: dict[str, float] = {}
    for user_id, gpus, start, end in rows:
        begin, finish = max(start, since), min(end if end is not None else now, now)
        if finish <= begin:
            continue
        age = now - (begin + finish) / 2
        hours = gpus * (finish - begin) / 3_600_000 * 0.5 ** (age / DEFAULT_HALF_LIFE_MS)
        usage[str(user_id)] = usage.get(str(user_id), 0.0) + hours
    return usage


def schedule_round(p: Platform) -> RoundReport:
    """One round (rounds.run_round, the simulator's too): first the jobs whose runs ended move on
    (jobs observe instances), then the queue is scheduled; cheap when the queue is empty (one
    indexed query)."""
    policy = live_policy(p)
    return run_round(LiveShell(p, policy), policy, p.clock.now_ms())


def live_policy(p: Platform) -> Policy:
    """The server's policy with the operator's demotion line and slice (``--demote-after``, ``--demote-slice``);
    a policy that never demotes (fifo, backfill) is returned as it is."""
    policy = get_policy(p.settings.scheduler_policy)
    if policy.demote_after_ms is None:
        return policy
    after = p.settings.demote_after_s
    return replace(
        policy,
        demote_after_ms=None if after is None else after * 1000,
        min_slice_ms=p.settings.demote_slice_s * 1000,
    )


class LiveShell:
    """The live server's :class:`~danlu.scheduling.rounds.Shell`: state in the database, decisions
    carried out by the instance service (sandboxes or Slurm jobs, metered like any rental)."""

    def __init__(self, p: Platform, policy: Policy) -> None:
        self.p = p
        self.demotes = policy.demote_after_ms is not None  # the view reads checkpoints only then
        self.ids: dict[str, tuple[int, str]] = {}  # the view's host keys -> (host id, GPU model)
        self.rentals: frozenset[str] = frozenset()  # running items of the view that are rentals
        self.free: dict[str, int] = {}  # the view's hosts' free GPUs, less this round's starts

    def settle(self, now_ms: int) -> int:
        return jobsvc.settle_runs(self.p) + jobsvc.settle_dependencies(self.p)

    def view(self, now_ms: int) -> ClusterView | None:
        """None (no round) unless a job is queued or an elastic one runs (it may grow into idle GPUs)."""
        with self.p.db.read() as s:
            elastic = and_(Job.status == jobsvc.RUNNING, Job.gpus_max.is_not(None))
            if s.execute(select(Job.id).where(or_(Job.status == jobsvc.QUEUED, elastic)).limit(1)).first() is None:
                return None
        view, self.ids, self.rentals = _view(self.p, self.demotes)
        self.free = {h.id: h.free_gpus for h in view.hosts}
        return view if view.queue or any(a.counts_ms for a in view.running) else None

    def start(self, d: Start, now_ms: int) -> bool:
        parts = d.parts
        if parts and len({n for _, n in parts}) > 1:  # one Slurm allocation holds the same count on each node
            parts = even_split({h: self.free[h] for h, (_, m) in self.ids.items() if m == d.gpu_model}, d.gpus) or ()
            if not parts:
                _note(self.p, d.job_id, "waiting: a gang over several hosts needs the same free GPU count on each")
                return False
        try:
            host_id, model = self.ids[parts[0][0] if parts else d.host_id]
            hosts = [(self.ids[h][0], n) for h, n in parts]
            start_run(self.p, d.job_id, host_id, model, d.gpus, d.plan.value, d.reason, parts=hosts)
            for h, n in parts or ((d.host_id, d.gpus),):
                self.free[h] = self.free.get(h, 0) - n
        except DanluError as exc:  # e.g. the user's balance no longer covers a minute: wait in the queue
            _note(self.p, d.job_id, f"waiting: {exc.message}")
            return False
        return True

    def notice(self, d: Preempt, now_ms: int) -> bool:
        try:
            if d.job_id in self.rentals:
                preempt_rental(self.p, d.job_id, d.notice_deadline_ms, d.reason)
            else:
                preempt_run(self.p, d.job_id, d.notice_deadline_ms, d.reason, resize_to=d.resize_to)
        except DanluError as exc:
            _note(self.p, d.job_id, f"waiting: {exc.message}")
            return False
        return True

    def defer(self, d: Defer, now_ms: int) -> None:
        _note(self.p, d.job_id, d.reason)


def _note(p: Platform, job_id: str, reason: str) -> None:
    with p.db.write() as s:
        job = s.get(Job, job_id)
        if job is not None and job.status == jobsvc.QUEUED and job.status_reason != reason:
            job.status_reason = reason


def start_run(
    p: Platform,
    job_id: str,
    host_id: int,
    model: str,
    gpus: int,
    plan: str,
    reason: str,
    *,
    parts: Sequence[tuple[int, int]] = (),
) -> str:
    """Start one run of a queued job on exactly the decided host and GPU model; with ``parts`` (host id, GPUs),
    a gang over those hosts, ``host_id`` the first."""
    now = p.clock.now_ms()
    jdir = jobsvc.job_dir(p, job_id)
    with p.db.read() as s:
        queued = s.get(Job, job_id)
        renter_id = queued.user_id if queued is not None else None
    if renter_id is not None:
        ensure_sandbox_uid(p, renter_id)
    with p.db.write() as s:
        job = s.get(Job, job_id, with_for_update=True, populate_existing=True)
        if job is None or job.status != jobsvc.QUEUED:
            raise DanluError("job_not_queued", f"job {job_id} is no longer queued")
        inst = Instance(
            id="i-" + job_id[2:] + f"-{job.attempts + 1}",
            user_id=job.user_id,
            billing_account_id=job.billing_account_id,
            job_id=job.id,
            name=job.id,
            status=Status.PENDING.value,
            status_reason=f"run {job.attempts + 1} of job {job.id}",
            gpu_model=model,
            gpu_count=gpus,
            command_json=job.command_json,
            workspace=_workspace(s, job, jdir),
            image=job.image,
            env_json=job.env_json,
            idle_stop_s=job.idle_stop_s,
            idle_threshold_pm=job.idle_threshold_pm,
            max_duration_s=job.max_duration_s,
            created_at_ms=now,
            updated_at_ms=now,
        )
        s.add(inst)
        s.flush()
        alloc = open_allocation(p, s, inst, now, plan=plan, host_id=host_id, parts=parts)
        s.add(InstanceEvent(instance_id=inst.id, from_status="", to_status="pending", reason="job run", at_ms=now))
        job.attempts += 1
        job.current_instance_id = inst.id
        job.resize_to = None
        if job.first_start_ms is None:
            job.first_start_ms = now
        where = f" over {len(parts)} hosts" if parts else ""
        jobsvc.transition(s, job, jobsvc.RUNNING, f"{reason} ({gpus}× {model}{where}, {plan})", now)
        extra = {"DANLU_JOB_ID": job.id, "DANLU_ATTEMPT": str(job.attempts), "DANLU_GPUS": str(gpus)}
        spec = build_spec(p, s, inst, alloc, log_key=job.id, checkpoints=jdir / "checkpoints", extra_env=extra)
        instance_id = inst.id
        begin_launch(p, instance_id)
    launch(p, instance_id, spec)
    return instance_id


def _workspace(s: Session, job: Job, jdir: Path) -> str:
    """The job's own workspace folder, or (``--workspace``) its rental's, in place: still kept and idle (the
    queue waited for that; checked again under the job's lock, else the run is refused and the job waits)."""
    if job.workspace_instance_id is None:
        return str(jdir / "workspace")
    rental = s.get(Instance, job.workspace_instance_id)
    if rental is None or rental.workspace_released_at_ms is not None or Status(rental.status) not in KEEPS_WORKSPACE:
        raise DanluError("workspace_unavailable", f"{job.workspace_instance_id}'s workspace is in use or gone")
    return rental.workspace


def preempt_run(p: Platform, job_id: str, deadline_ms: int, reason: str, *, resize_to: int | None = None) -> None:
    """Give a running job its notice: it must checkpoint and exit by ``deadline_ms``. ``resize_to``: an
    elastic job stopped to resume at that GPU count (not counted as a preemption)."""
    resize = resize_to is not None
    now = p.clock.now_ms()
    with p.db.write() as s:
        job = s.get(Job, job_id, with_for_update=True, populate_existing=True)
        if job is None or job.status != jobsvc.RUNNING or job.current_instance_id is None:
            return
        inst = s.get(Instance, job.current_instance_id, with_for_update=True, populate_existing=True)
        if inst is None or Status(inst.status) not in HAS_PROCESS:
            return
        deadline = notice_deadline(deadline_ms, now, p.settings.preempt_notice_s * 1000)  # never less notice
        why = "resizing" if resize else "preempted"
        handle = begin_notice(p, s, inst, deadline, f"{why}: {reason}")
        job.preemptions += 0 if resize else 1
        job.notice_deadline_ms = deadline
        job.resize_to = resize_to
        jobsvc.transition(s, job, jobsvc.STOPPING, f"{why}: {reason}; notice until {iso(deadline)}", now)
    terminate_runs(p, [handle])
    log.info("preempted %s until %s", job_id, deadline_ms)


def preempt_rental(p: Platform, instance_id: str, deadline_ms: int, reason: str) -> None:
    """Give an interruptible rental its notice; it ends ``stopped`` (workspace kept, restartable)."""
    now = p.clock.now_ms()
    with p.db.write() as s:
        inst = s.get(Instance, instance_id, with_for_update=True, populate_existing=True)
        if inst is None or not inst.interruptible or inst.status != Status.RUNNING.value:
            return
        deadline = notice_deadline(deadline_ms, now, p.settings.preempt_notice_s * 1000)  # never less notice
        handle = begin_notice(p, s, inst, deadline, f"preempted: {reason}; notice until {iso(deadline)}")
    terminate_runs(p, [handle])
    log.info("preempted rental %s until %s", instance_id, iso(deadline))
