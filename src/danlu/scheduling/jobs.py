"""Batch jobs on the live server: submit, list, show, cancel, and what happens when a run ends.

A job is queued until the scheduler (danlu.scheduling.live) starts it; each run is an instance
(``Instance.job_id``) metered like any other, with ``DANLU_CHECKPOINT_DIR`` pointing at a
directory that persists across runs, so a preempted or lost run resumes from its checkpoint.

Job lifecycle (every change through :func:`transition`, recorded with a reason):
queued → running → succeeded | failed | cancelled; running → stopping (preemption notice) →
queued (requeued, resumes); running → queued (node lost: retried up to ``job_max_attempts``).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session, aliased

from danlu.accounts import policies, teams
from danlu.accounts.payers import currency
from danlu.billing.metering import unbilled_minor
from danlu.catalog.gpu_models import resolve_model
from danlu.compute import images
from danlu.compute.allocations import host_totals
from danlu.compute.envvars import validate_env
from danlu.compute.instances import check_command_args, is_launching, request_stop, terminate_runs
from danlu.compute.instances import transition as transition_instance
from danlu.compute.lifecycle import HAS_PROCESS, RENTERS_LIMITS, StopCause
from danlu.compute.lifecycle import Status as InstanceStatus
from danlu.compute.limits import RunLimits
from danlu.compute.runs import check_may_run
from danlu.compute.sandbox import volume
from danlu.compute.views import get_owned
from danlu.context import Platform
from danlu.core.errors import Conflict, Forbidden, InvalidInput, NotFound, QuotaExceeded
from danlu.core.money import parse_amount
from danlu.db.models import AllocationRow, Instance, Job, JobEvent, Price, User

# the states and the rule for a run's end are the simulator's engine's too (lifecycle.py); re-exported
from danlu.scheduling.lifecycle import CANCELLED as CANCELLED
from danlu.scheduling.lifecycle import FAILED as FAILED
from danlu.scheduling.lifecycle import JOB_TRANSITIONS as JOB_TRANSITIONS
from danlu.scheduling.lifecycle import QUEUED as QUEUED
from danlu.scheduling.lifecycle import RUNNING as RUNNING
from danlu.scheduling.lifecycle import STOPPING as STOPPING
from danlu.scheduling.lifecycle import SUCCEEDED as SUCCEEDED
from danlu.scheduling.lifecycle import TERMINAL as TERMINAL
from danlu.scheduling.lifecycle import How, RunEnd, after_run
from danlu.scheduling.model import PRIORITIES
from danlu.scheduling.placement import even_split


@dataclass
class JobView:
    id: str
    status: str
    status_reason: str
    command: list[str]
    gpus: int
    gpu_types: list[str]
    gpu_model: str | None  # of the current or last run
    interruptible: bool
    priority: str
    attempts: int
    preemptions: int
    exit_code: int | None
    cost_minor: int
    currency: str
    submit_ms: int
    first_start_ms: int | None
    end_ms: int | None
    deadline_ms: int | None
    after: str | None = None  # runs once this job has succeeded (``--after``)
    waiting_for: str | None = None  # ``after`` while it has not succeeded yet
    workspace_of: str | None = None  # runs in this rental's workspace (``--workspace``)
    workspace_busy: bool = False  # queued while that rental runs or another job is in its workspace
    gpus_max: int | None = None  # an elastic job's largest count (``gpus`` is its smallest)
    gpus_now: int | None = None  # GPUs of its current or last run


def transition(s: Session, job: Job, to: str, reason: str, now_ms: int) -> None:
    if to not in JOB_TRANSITIONS[job.status]:
        raise Conflict("invalid_job_state", f"job {job.id} is {job.status}; it cannot become {to}")
    s.add(JobEvent(job_id=job.id, from_status=job.status, to_status=to, reason=reason, at_ms=now_ms))
    job.status, job.status_reason = to, reason
    if to in TERMINAL:
        job.end_ms = now_ms


def job_dir(p: Platform, job_id: str) -> Path:
    return p.sandbox_root / "jobs" / job_id


def _check_some_model_fits(s: Session, types: list[str], gpus: int, interruptible: bool, spans_hosts: bool) -> None:
    """A job must be placeable somewhere: a priced model among ``types`` (any, if none) with ``gpus`` GPUs on
    one host (offered as interruptible, for an interruptible job) or, where the backend runs a gang across
    hosts (Slurm), the same count on each of several hosts; else 422, so it never sits in the queue."""
    priced = {pr.gpu_model: pr for pr in s.scalars(select(Price))}
    candidates = types or sorted(priced)
    if interruptible:
        candidates = [m for m in candidates if m in priced and priced[m].interruptible_price_per_hour_minor]

    def fits(model: str) -> bool:
        totals = host_totals(s, model)
        if max(totals.values(), default=0) >= gpus:
            return True
        return spans_hosts and even_split({str(h): n for h, n in totals.items()}, gpus) is not None

    if not [m for m in candidates if m in priced and fits(m)]:
        where = (
            "on one host, nor the same count on each of several hosts"
            if spans_hosts
            else "on one host (this platform's backend runs a job on one host: gangs across hosts need the Slurm "
            "backend)"
        )
        raise InvalidInput(
            "no_matching_gpus",
            f"no priced GPU model{' offered as interruptible' if interruptible else ''} among "
            f"{', '.join(candidates) or 'any'} has {gpus} GPUs {where}; ask for fewer, see `danlu offers`",
        )


def _check_after(s: Session, user: User, after: str) -> None:
    """``--after``: a job the caller may see (else 404) that can still succeed (else 409: this one never would)."""
    dep = _owned(s, user, after) if len(after) <= 32 else None
    if dep is None:
        raise NotFound("job_not_found", f"no job {after!r}; list yours with `danlu jobs`")
    if dep.status in (FAILED, CANCELLED):
        raise Conflict(
            "dependency_failed",
            f"job {after} {dep.status}: a job after it would never run; submit it without --after, or after a job "
            "that can still succeed",
        )


def _check_workspace(s: Session, user: User, instance_id: str) -> None:
    """``--workspace``: the caller's own rental (a teammate's workspace is theirs: 404), not released. It may
    run now, or another job be in it: the job waits until neither is (``waiting_for_workspace``)."""
    inst = get_owned(s, user, instance_id)
    if inst.user_id != user.id:
        raise NotFound("instance_not_found", f"no instance {instance_id!r}; list yours with `danlu ps`")
    if inst.workspace_released_at_ms is not None:
        raise Conflict(
            "workspace_released",
            f"{instance_id}'s workspace was released; a job needs a rental whose workspace is kept",
        )


def _check_request(
    command: list[str],
    gpus: int,
    env: dict[str, str] | None,
    priority: str,
    est_duration_s: int | None,
    gpus_max: int | None = None,
) -> dict[str, str]:
    """What a job asks for, on its own (no database): a command, a whole GPU count (or a range), valid variables
    (returned), a known priority, a positive duration estimate."""
    if not command or not all(isinstance(c, str) and c for c in command[:1]):
        raise InvalidInput("invalid_command", "give the command after `--`, e.g. danlu run --gpus 1 -- python train.py")
    check_command_args(command)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 < gpus <= 1024:
        raise InvalidInput("invalid_gpu_count", "--gpus must be a whole number of GPUs, from 1 to 1024")
    if gpus_max is not None and (
        isinstance(gpus_max, bool) or not isinstance(gpus_max, int) or not gpus < gpus_max <= 1024
    ):
        raise InvalidInput(
            "invalid_gpu_count",
            f"an elastic job's GPU range is MIN-MAX with {gpus} < MAX <= 1024, e.g. --gpus 2-8; for one count, "
            "give just the number",
        )
    env = validate_env(env)
    if priority not in PRIORITIES:
        raise InvalidInput("invalid_priority", f"--priority is one of {', '.join(PRIORITIES)}")
    if est_duration_s is not None and est_duration_s <= 0:
        raise InvalidInput("invalid_duration", "--est-duration must be a positive number of seconds")
    return env


def submit(
    p: Platform,
    user: User,
    command: list[str],
    gpus: int = 1,
    gpu_types: list[str] | None = None,
    max_price: str | None = None,
    deadline_ms: int | None = None,
    est_duration_s: int | None = None,
    interruptible: bool = False,
    priority: str = "normal",
    image: str = images.HOST_IMAGE,
    env: dict[str, str] | None = None,
    team: str | None = None,
    limits: RunLimits | None = None,
    after: str | None = None,
    workspace_of: str | None = None,
    gpus_max: int | None = None,
) -> JobView:
    """Queue a job. Validates everything up front so a bad job never sits in the queue. ``after``: a job that
    must succeed first (:func:`_check_after`); ``workspace_of``: a rental of the caller's whose workspace its
    runs use in place (:func:`_check_workspace`); ``gpus_max``: an elastic job, run at ``gpus`` to ``gpus_max``
    GPUs as the scheduler sees fit (danlu.scheduling.elastic), never below ``gpus``."""
    check_may_run(p, user)
    env = _check_request(command, gpus, env, priority, est_duration_s, gpus_max)
    limits = limits or RunLimits(None, p.settings.idle_threshold_default_pm, None)
    types = [resolve_model(t).name for t in (gpu_types or [])]
    now = p.clock.now_ms()
    if deadline_ms is not None and deadline_ms <= now:
        raise InvalidInput("invalid_deadline", "--deadline is in the past; give a future time")
    job_id = "j-" + secrets.token_hex(5)
    with p.db.write() as s:
        images.resolve(s, image)
        cur = currency(s)
        max_minor = parse_amount(max_price, cur, field="max price") if max_price is not None else None
        quota = s.execute(select(User.gpu_quota).where(User.id == user.id)).scalar_one()
        if quota is not None and gpus > quota:
            raise QuotaExceeded(
                "gpu_quota_exceeded", f"this job needs {gpus} GPUs and your GPU quota is {quota}; ask for fewer"
            )
        _check_some_model_fits(s, types, gpus, interruptible, p.backend.spans_hosts)
        if after is not None:
            _check_after(s, user, after)
        if workspace_of is not None:
            _check_workspace(s, user, workspace_of)
        seq = (s.execute(select(func.max(Job.seq))).scalar_one() or 0) + 1
        job = Job(
            id=job_id,
            seq=seq,
            user_id=user.id,
            billing_account_id=teams.resolve_payer(s, user, team, spend=True),
            status=QUEUED,
            status_reason="submitted",
            command_json=json.dumps(command),
            gpus=gpus,
            gpu_types=",".join(types),
            max_price_minor=max_minor,
            deadline_ms=deadline_ms,
            est_duration_s=est_duration_s,
            interruptible=interruptible,
            priority=PRIORITIES[priority],
            submit_ms=now,
            attempts=0,
            preemptions=0,
            cancel_requested=False,
            image=image,
            env_json=json.dumps(env),
            idle_stop_s=limits.idle_stop_s,
            idle_threshold_pm=limits.idle_threshold_pm,
            max_duration_s=limits.max_duration_s,
            after_job_id=after,
            workspace_instance_id=workspace_of,
            gpus_max=gpus_max,
        )
        s.add(job)
        s.add(JobEvent(job_id=job_id, from_status="", to_status=QUEUED, reason="submitted", at_ms=now))
    job_dir(p, job_id).mkdir(parents=True, exist_ok=True)
    os.chmod(job_dir(p, job_id), 0o711)  # its workspace and checkpoints (0700, the renter's) are bound from here
    return show(p, user, job_id)


def _owned(s: Session, user: User, job_id: str, *, for_update: bool = False) -> Job:
    job = s.get(Job, job_id, with_for_update=for_update, populate_existing=for_update)
    if job is None or not policies.may_see(s, user, job.user_id, job.billing_account_id):
        raise NotFound("job_not_found", f"no job {job_id!r}; list yours with `danlu jobs`")
    if for_update and not policies.may_manage(s, user, job.user_id, job.billing_account_id):
        raise Forbidden("team_role_required", "only the submitter or the team's owners and admins can change this job")
    return job


def _view(
    job: Job,
    allocs: list[AllocationRow],
    runs: list[Instance],
    cur: str,
    now_ms: int,
    succeeded: set[str],
    busy: AbstractSet[str] = frozenset(),
) -> JobView:
    names = {v: k for k, v in PRIORITIES.items()}
    waiting = job.after_job_id if job.after_job_id is not None and job.after_job_id not in succeeded else None
    return JobView(
        id=job.id,
        status=job.status,
        status_reason=job.status_reason,
        command=json.loads(job.command_json),
        gpus=job.gpus,
        gpu_types=[t for t in job.gpu_types.split(",") if t],
        gpu_model=runs[-1].gpu_model if runs else None,
        interruptible=job.interruptible,
        priority=names.get(job.priority, str(job.priority)),
        attempts=job.attempts,
        preemptions=job.preemptions,
        exit_code=job.exit_code,
        cost_minor=sum(a.billed_minor + (0 if a.settled else unbilled_minor(a, now_ms)) for a in allocs),
        currency=cur,
        submit_ms=job.submit_ms,
        first_start_ms=job.first_start_ms,
        end_ms=job.end_ms,
        deadline_ms=job.deadline_ms,
        after=job.after_job_id,
        waiting_for=waiting if job.status == QUEUED else None,
        workspace_of=job.workspace_instance_id,
        workspace_busy=job.id in busy,
        gpus_max=job.gpus_max,
        gpus_now=runs[-1].gpu_count if runs else None,
    )


def _views(p: Platform, s: Session, jobs: list[Job]) -> list[JobView]:
    ids = [j.id for j in jobs]
    runs: dict[str, list[Instance]] = {}
    allocs: dict[str, list[AllocationRow]] = {}
    if ids:
        by_start = select(Instance).where(Instance.job_id.in_(ids)).order_by(Instance.created_at_ms, Instance.id)
        for inst in s.scalars(by_start):
            runs.setdefault(inst.job_id or "", []).append(inst)
        owner = {i.id: i.job_id or "" for rs in runs.values() for i in rs}
        if owner:
            for a in s.scalars(select(AllocationRow).where(AllocationRow.instance_id.in_(list(owner)))):
                allocs.setdefault(owner[a.instance_id], []).append(a)
    afters = {j.after_job_id for j in jobs if j.after_job_id is not None}
    succeeded = set(s.scalars(select(Job.id).where(Job.id.in_(afters), Job.status == SUCCEEDED))) if afters else set()
    cur, now = currency(s), p.clock.now_ms()
    busy = waiting_for_workspace(s) if any(j.workspace_instance_id and j.status == QUEUED for j in jobs) else set()
    return [_view(j, allocs.get(j.id, []), runs.get(j.id, []), cur, now, succeeded, busy) for j in jobs]


def waiting_for_workspace(s: Session) -> set[str]:
    """Queued ``--workspace`` jobs whose rental runs now, or whose workspace another job's run is in: one writer
    at a time (the rental cannot start while a job runs there: ``views.job_in_workspace``). The live round
    leaves them out; their views say so (``workspace_busy``)."""
    live = [st.value for st in HAS_PROCESS]
    rental, other, run = aliased(Instance), aliased(Job), aliased(Instance)
    running = select(rental.id).where(rental.id == Job.workspace_instance_id, rental.status.in_(live)).exists()
    in_use = (
        select(other.id)
        .join(run, run.id == other.current_instance_id)
        .where(other.workspace_instance_id == Job.workspace_instance_id, other.id != Job.id, run.status.in_(live))
        .exists()
    )
    return set(
        s.scalars(
            select(Job.id).where(Job.status == QUEUED, Job.workspace_instance_id.is_not(None), or_(running, in_use))
        )
    )


def show(p: Platform, user: User, job_id: str) -> JobView:
    with p.db.read() as s:
        return _views(p, s, [_owned(s, user, job_id)])[0]


def list_jobs(p: Platform, user: User) -> list[JobView]:
    with p.db.read() as s:
        return _views(p, s, list(s.scalars(select(Job).where(Job.user_id == user.id).order_by(Job.seq))))


def events(p: Platform, user: User, job_id: str) -> list[JobEvent]:
    with p.db.read() as s:
        _owned(s, user, job_id)
        return list(s.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id)))


def read_log(p: Platform, user: User, job_id: str, offset: int) -> tuple[str, int]:
    """Output of every run of the job (runs append to one log in the job's run directory)."""
    with p.db.read() as s:
        _owned(s, user, job_id)
    return p.backend.read_output(job_id, offset)


def cancel(p: Platform, user: User, job_id: str) -> JobView:
    """Cancel: a queued job ends at once; a running one is stopped (SIGTERM, then SIGKILL after
    the stop grace period) and ends as cancelled when its process is gone."""
    handle: str | None = None
    queued = False
    now = p.clock.now_ms()
    with p.db.write() as s:
        job = _owned(s, user, job_id, for_update=True)
        if job.status in TERMINAL:
            raise Conflict("job_finished", f"job {job_id} already {job.status}; nothing to cancel")
        job.cancel_requested = True
        if job.status == QUEUED:
            transition(s, job, CANCELLED, "cancelled by user", now)
            queued = True
        elif job.current_instance_id is not None:
            inst = s.get(Instance, job.current_instance_id, with_for_update=True, populate_existing=True)
            if inst is not None and inst.status == InstanceStatus.RUNNING:
                handle = request_stop(
                    p, s, inst, StopCause.JOB_CANCELLED, "job cancelled by user", p.settings.stop_grace_s
                )
            elif inst is not None and inst.status == InstanceStatus.PENDING and is_launching(p, inst.id):
                # Its launch (in this process) sees the instance stopped and kills the prepared run.
                transition_instance(s, inst, InstanceStatus.STOPPED, "job cancelled by user", now, "stop")
            # Any other run still starting is stopped once it runs (settle_runs).
    terminate_runs(p, [handle])
    if queued:  # a job preempted and requeued had its folder mounted
        volume.detach(job_dir(p, job_id))
    return show(p, user, job_id)


def settle_runs(p: Platform) -> int:
    """Jobs observe their runs (instances never call up into this layer): a job whose run has
    ended moves on (:func:`on_run_finished`), and a cancel that arrived while its run was being
    launched stops the run once it is running. Each job in a transaction of its own, re-checked
    under its lock; returns how many jobs changed."""
    with p.db.read() as s:
        rows = s.execute(
            select(Job.id, Instance.id, Instance.status, Job.cancel_requested)
            .join(Instance, Instance.id == Job.current_instance_id)
            .where(Job.current_instance_id.is_not(None))
        ).all()
    changed = 0
    for job_id, inst_id, inst_status, cancel in rows:
        ended = InstanceStatus(inst_status) not in HAS_PROCESS
        if not ended and not (cancel and inst_status == InstanceStatus.RUNNING):
            continue
        handle: str | None = None
        finished = False
        with p.db.write() as s:
            job = s.get(Job, job_id, with_for_update=True, populate_existing=True)
            inst = s.get(Instance, inst_id, with_for_update=True, populate_existing=True)
            if job is None or inst is None or job.current_instance_id != inst.id:
                continue
            now = p.clock.now_ms()
            if InstanceStatus(inst.status) not in HAS_PROCESS:
                on_run_finished(p, s, job, inst, now)
                finished = job.status in TERMINAL
                changed += 1
            elif job.cancel_requested and inst.status == InstanceStatus.RUNNING:
                handle = request_stop(
                    p, s, inst, StopCause.JOB_CANCELLED, "job cancelled by user", p.settings.stop_grace_s
                )
                changed += 1
        terminate_runs(p, [handle])
        if finished:
            volume.detach(job_dir(p, job_id))  # its files stay in its image; no run will need it mounted
    return changed


def settle_dependencies(p: Platform) -> int:
    """Queued jobs whose ``--after`` job failed or was cancelled will never run: each is cancelled, unrun and
    unbilled, saying why (in turn the jobs after it, on the next round). Returns how many."""
    with p.db.read() as s:
        dep = aliased(Job)
        rows = s.execute(
            select(Job.id, dep.id, dep.status)
            .join(dep, dep.id == Job.after_job_id)
            .where(Job.status == QUEUED, dep.status.in_((FAILED, CANCELLED)))
        ).all()
    for job_id, dep_id, dep_status in rows:
        with p.db.write() as s:
            job = s.get(Job, job_id, with_for_update=True, populate_existing=True)
            if job is None or job.status != QUEUED:
                continue
            reason = f"not run: the job it runs after ({dep_id}) {dep_status}"
            transition(s, job, CANCELLED, reason, p.clock.now_ms())
    return len(rows)


def on_run_finished(p: Platform, s: Session, job: Job, inst: Instance, now_ms: int) -> None:
    """In the caller's transaction, with both rows locked: the job's run ``inst`` has ended."""
    if job.status in TERMINAL:  # e.g. cancelled while this run was starting: just let go of the run
        job.current_instance_id = None
        return
    job.current_instance_id = None
    job.notice_deadline_ms = None
    job.exit_code = inst.exit_code
    status = InstanceStatus(inst.status)
    how: How
    failures = 0
    if status == InstanceStatus.EXITED:
        how = "exited"
    elif status == InstanceStatus.FAILED:
        how, failures = "never_started", _losses(s, job, InstanceStatus.FAILED)
    elif status == InstanceStatus.LOST:
        how, failures = "lost", _losses(s, job)
    elif inst.stop_cause in RENTERS_LIMITS:
        how = "limit"
    else:
        how = "stopped"
    end = RunEnd(
        how,
        exit_code=inst.exit_code,
        noticed=job.status == STOPPING,
        cancel_requested=job.cancel_requested,
        failures=failures,
        max_attempts=p.settings.job_max_attempts,
        detail=inst.stop_reason if how == "limit" else inst.status_reason,
    )
    to, reason = after_run(end)
    transition(s, job, to, reason, now_ms)


def _losses(s: Session, job: Job, status: InstanceStatus = InstanceStatus.LOST) -> int:
    """Runs of this job lost with their node, or (``failed``) that never started; preempted or
    stopped runs do not count."""
    return int(
        s.execute(
            select(func.count(Instance.id)).where(Instance.job_id == job.id, Instance.status == status)
        ).scalar_one()
    )


def queue_positions(p: Platform) -> tuple[dict[str, int], int]:
    """Each queued job's place in arrival order among every queued job (1 = next in line at equal
    priority and fit), and how many are queued. The policy may start a later job first when it fits
    free GPUs the earlier one cannot use; the console says so beside the number."""
    with p.db.read() as s:
        ids = s.scalars(select(Job.id).where(Job.status == QUEUED).order_by(Job.seq)).all()
    return {job_id: i + 1 for i, job_id in enumerate(ids)}, len(ids)
