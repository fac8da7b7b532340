"""Instance service: rent, stop, start, destroy. Each public function opens its own transaction,
calls the pure rules (lifecycle, rating) and writes the result; process work happens outside the
transaction so a slow fork never holds a database lock.

Billing invariants kept here: GPU billing of an allocation ends the moment a stop is requested
(or the command ends, or the instance is destroyed); it is posted to the ledger by the meter in
the same transaction, so the user sees the final cost at once.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from danlu.accounts import policies, teams
from danlu.backend import LaunchError, RunSpec
from danlu.billing.accounts import lock_billing_account
from danlu.billing.metering import meter_account
from danlu.catalog.gpu_models import resolve_model
from danlu.compute import allocations, fstree, images, snapshots
from danlu.compute.envvars import validate_env
from danlu.compute.hosts import MIB, limits_for
from danlu.compute.lifecycle import BILLED, HAS_PROCESS, KEEPS_WORKSPACE, Status, StopCause, check_transition
from danlu.compute.limits import RunLimits
from danlu.compute.opening import new_allocation, open_allocation
from danlu.compute.runs import (
    build_spec,
    check_may_run,
    ensure_sandbox_uid,
    prepare_control_dir,
    refuse_while_unreachable,
    write_preempt_deadline,
)
from danlu.compute.storage import end_storage, new_workspace, remove_workspace, start_storage
from danlu.compute.views import InstanceView, get_owned, show
from danlu.compute.workspace_size import workspace_bytes
from danlu.compute.workspace_use import job_in_workspace, resting_workspace, workspace_in_use
from danlu.context import Platform
from danlu.core.clock import iso
from danlu.core.errors import Conflict, Forbidden, InvalidInput
from danlu.core.money import format_minor, parse_amount
from danlu.db.models import AllocationRow, Event, Gpu, Hold, HostRow, Instance, InstanceEvent, User

MAX_COMMAND_ARGS = 256
MAX_COMMAND_BYTES = 64 << 10  # all arguments together, as for the environment


def transition(
    session: Session,
    inst: Instance,
    to: Status,
    reason: str,
    now_ms: int,
    action: str,
    *,
    billing_end_ms: int | None = None,
) -> None:
    """The one place an instance changes state, with the side effects that belong to the change,
    so no path can forget one: reaching a state that is not billed at the rental's plan ends the
    current allocation's billing (at ``billing_end_ms``, default now) and posts it; reaching a state
    with no process also frees its GPUs. An event records the reason."""
    current = Status(inst.status)
    check_transition(current, to, action)
    if to not in BILLED:
        end_ms = now_ms if billing_end_ms is None else billing_end_ms
        end_allocation(session, inst, end_ms, release=to not in HAS_PROCESS)
    if current in KEEPS_WORKSPACE and to not in KEEPS_WORKSPACE:
        end_storage(session, inst, now_ms)
    if to in KEEPS_WORKSPACE and current not in KEEPS_WORKSPACE and inst.job_id is None:
        start_storage(session, inst, now_ms)
    session.add(
        InstanceEvent(instance_id=inst.id, from_status=current.value, to_status=to.value, reason=reason, at_ms=now_ms)
    )
    inst.status = to.value
    inst.status_reason = reason
    inst.updated_at_ms = now_ms


def check_command_args(command: list[str]) -> None:
    """What every command must be, a rental's or a job's: few arguments, all text, no NUL bytes, at most
    ``MAX_COMMAND_BYTES`` in all (a 120 MB argument was stored and kept after ``rm``; queued 30 MB jobs
    slowed every scheduling round: an attacker's pass in issue 11's last stop)."""
    if len(command) > MAX_COMMAND_ARGS or any(not isinstance(c, str) or "\x00" in c for c in command):
        raise InvalidInput("invalid_command", f"a command has at most {MAX_COMMAND_ARGS} arguments and no NUL bytes")
    if sum(len(c.encode("utf-8", "surrogatepass")) for c in command) > MAX_COMMAND_BYTES:
        raise InvalidInput(
            "invalid_command",
            f"a command is at most {MAX_COMMAND_BYTES >> 10} KiB; put a long script in a file in the workspace "
            "and run that file",
        )


def _validate_command(command: list[str]) -> list[str]:
    if not command or not all(isinstance(c, str) for c in command) or not command[0].strip():
        raise InvalidInput(
            "invalid_command", "give the command to run after `--`, e.g. danlu rent --gpu T4 -- python train.py"
        )
    check_command_args(command)
    return command


def rental_plan(inst: Instance) -> str:
    return "interruptible" if inst.interruptible else "on-demand"


def begin_launch(p: Platform, instance_id: str) -> None:
    """Inside the transaction that commits ``instance_id`` as pending: from now until its launch
    has recorded a handle (or given up), the control loop knows this process is launching it."""
    p.launches.add(instance_id)


def is_launching(p: Platform, instance_id: str) -> bool:
    return instance_id in p.launches or p.backend.launching(instance_id)


def launch(p: Platform, instance_id: str, spec: RunSpec) -> None:
    try:
        _launch(p, instance_id, spec)
    finally:
        p.launches.discard(instance_id)


def _launch(p: Platform, instance_id: str, spec: RunSpec) -> None:
    """The two-phase launch of danlu.compute.runs' docstring, outside any transaction but the
    recording one: prepare (command held back) → record the handle under the row lock, or decide
    to kill it → after commit, let the command go. A launch that fails is ``failed``, not billed."""
    prepare_control_dir(p, instance_id)
    started_ms: int | None = None
    try:
        handle: str | None = p.backend.launch(spec)
        error = ""
    except (LaunchError, OSError) as exc:
        handle, error = None, str(exc)
    if handle is not None and p.backend.starts_before_record:
        # A backend that times runs itself (Slurm) starts first and says when: billing starts then.
        try:
            started_ms = p.backend.start(handle)
        except (LaunchError, OSError) as exc:
            p.backend.kill(handle)
            p.backend.release(handle)
            handle, error = None, str(exc)
    kill = False
    with p.db.write() as s:
        inst = s.get(Instance, instance_id, with_for_update=True, populate_existing=True)
        assert inst is not None
        now = p.clock.now_ms()  # read under the lock: no interval starts before the last one ended
        if handle is None:
            if inst.status == Status.PENDING:
                transition(s, inst, Status.FAILED, f"could not start: {error}", now, "launch", billing_end_ms=0)
            return
        alloc = s.get(AllocationRow, inst.current_allocation_id) if inst.current_allocation_id is not None else None
        # Waits for a suspension being committed (it sweeps only running instances, not this one).
        suspended = s.execute(
            select(User.suspended_reason).where(User.id == inst.user_id).with_for_update()
        ).scalar_one()
        if inst.status != Status.PENDING:
            kill = True  # destroyed (or stopped) while the run was being prepared: it must not run
        elif suspended is not None:
            kill = True  # the operator suspended the renter while the run was being prepared
            transition(s, inst, Status.STOPPED, f"account suspended: {suspended}", now, "launch")
        elif alloc is None or alloc.settled:
            kill = True  # the balance ran out while the run was being prepared
            transition(s, inst, Status.STOPPED, "balance exhausted before the process started", now, "launch")
        else:
            inst.run_handle, inst.last_seen_alive_ms, inst.kill_after_ms = handle, now, None
            if started_ms is not None and alloc.billed_until_ms == alloc.started_at_ms:
                # Nothing was posted yet (the meter skips pending instances): bill from the backend's start.
                alloc.started_at_ms = alloc.billed_until_ms = started_ms
            transition(s, inst, Status.RUNNING, "process started", now, "launch")
    if kill:
        p.backend.kill(handle)
        p.backend.release(handle)
        return
    if not p.backend.starts_before_record:
        p.backend.start(handle)


def end_allocation(session: Session, inst: Instance, end_ms: int, *, release: bool = True) -> None:
    """End GPU billing of the instance's current allocation at ``end_ms`` and post it."""
    if inst.current_allocation_id is None:
        return
    # Same lock order as the meter: the payer's account first, then (re-read under it) the allocation.
    lock_billing_account(session, inst.billing_account_id)
    alloc = session.get(AllocationRow, inst.current_allocation_id, populate_existing=True)
    assert alloc is not None
    if alloc.ended_at_ms is None:
        alloc.ended_at_ms = max(alloc.billed_until_ms, end_ms)
        session.flush()
    if not alloc.settled:
        meter_account(session, alloc.billing_account_id, [alloc], max(end_ms, alloc.billed_until_ms))
    if release:
        allocations.release(session, alloc.id)
        inst.current_allocation_id = None


def _checked_rental(
    gpu_model: str,
    gpu_count: int,
    command: list[str],
    env: dict[str, str] | None,
    name: str,
    from_instance: str | None,
    from_snapshot: str | None,
) -> tuple[str, list[str], dict[str, str]]:
    """A rental's request checked before anything is made: its model's catalog name, its command and env."""
    model = resolve_model(gpu_model).name
    _check_count(gpu_count)
    command = _validate_command(command)
    checked_env = validate_env(env)
    if len(name) > 64 or "\x00" in name:
        raise InvalidInput("invalid_name", "instance names are at most 64 characters, without NUL bytes")
    if from_instance and from_snapshot:
        raise InvalidInput("invalid_source", "start from an instance or from a snapshot, not both")
    return model, command, checked_env


def rent(
    p: Platform,
    user: User,
    gpu_model: str,
    gpu_count: int,
    command: list[str],
    name: str = "",
    interruptible: bool = False,
    image: str = images.HOST_IMAGE,
    env: dict[str, str] | None = None,
    team: str | None = None,
    before_claim: Callable[[Session, Instance, int], Hold | None] | None = None,
    limits: RunLimits | None = None,
    from_instance: str | None = None,
    from_snapshot: str | None = None,
) -> InstanceView:
    """Claim ``gpu_count`` GPUs of ``gpu_model`` on one host and start ``command`` on exactly them,
    in a sandbox with ``image`` as its root and the renter's own ``env``, paid by ``team``'s
    account (or the renter's default team, or their personal account). ``before_claim(session,
    instance, now)`` runs in the same transaction first: it buys the hold the rental runs on.
    ``from_instance``: the new workspace starts as a copy of that (stopped) rental's, the renter's own;
    ``from_snapshot``: as that snapshot of one (issue 26). The copy is made before any GPU is claimed,
    so it is not billed."""
    check_may_run(p, user)
    model, command, env = _checked_rental(gpu_model, gpu_count, command, env, name, from_instance, from_snapshot)
    limits = limits or RunLimits(None, p.settings.idle_threshold_default_pm, None)
    instance_id = "i-" + secrets.token_hex(5)
    ensure_sandbox_uid(p, user.id)
    copied, origin = None, from_instance or from_snapshot
    if from_instance:
        copied = copy_workspace(p, user, from_instance, p.workspaces / instance_id)
    elif from_snapshot:
        copied = snapshots.restore(p, user, from_snapshot, p.workspaces / instance_id)
    try:
        with p.db.write() as s:
            now = p.clock.now_ms()
            inst = Instance(
                id=instance_id,
                user_id=user.id,
                billing_account_id=teams.resolve_payer(s, user, team, spend=True),
                name=name,
                interruptible=interruptible,
                status=Status.PENDING.value,
                status_reason="created",
                gpu_model=model,
                gpu_count=gpu_count,
                command_json=json.dumps(command),
                workspace=str(p.workspaces / instance_id),
                image=image,
                env_json=json.dumps(env),
                created_at_ms=now,
                updated_at_ms=now,
                idle_stop_s=limits.idle_stop_s,
                idle_threshold_pm=limits.idle_threshold_pm,
                max_duration_s=limits.max_duration_s,
            )
            images.resolve(s, image)  # a clear error before anything is claimed
            s.add(inst)
            s.flush()
            hold = before_claim(s, inst, now) if before_claim is not None else None
            alloc = open_allocation(p, s, inst, now, plan=rental_plan(inst), hold=hold)
            reason = "rented"
            if copied is not None:
                _check_workspace_fits(s, inst, alloc, copied)
                reason = f"rented with a copy of {origin}'s workspace"
            s.add(InstanceEvent(instance_id=inst.id, from_status="", to_status="pending", reason=reason, at_ms=now))
            spec = build_spec(p, s, inst, alloc, log_key=instance_id)
            begin_launch(p, instance_id)
    except BaseException:
        if copied is not None:  # refused (capacity, money, disk): the copy goes
            remove_workspace(p, p.workspaces / instance_id)
        raise
    launch(p, instance_id, spec)
    return show(p, user, instance_id)


def _check_count(gpu_count: object) -> None:
    if isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or not 0 < gpu_count <= 1024:
        raise InvalidInput("invalid_gpu_count", "--count must be a whole number of GPUs, from 1 to 1024")


def copy_workspace(p: Platform, user: User, source_id: str, dest: Path) -> int:
    """Copy the workspace of ``source_id`` — the renter's own rental, not running — to ``dest``;
    returns its size in bytes. ``cp -a`` as root keeps the renter's uid, modes and times, copies
    links as links (never follows one) and special files as such; nothing of the renter runs while
    a rental is stopped, so no folder can be swapped for a link during the copy."""
    with p.db.read() as s:
        src = resting_workspace(s, user, source_id, "copied")
        source = Path(src.workspace)
    try:
        started = source.is_dir()  # never started: an empty workspace
    except OSError as exc:  # its file system is gone (an encrypted one's gocryptfs killed): start it first
        raise Conflict("copy_failed", f"could not read {source_id}'s workspace ({exc}); start it once") from None
    new_workspace(p, dest)
    if not started:
        return 0
    proc = subprocess.run(
        ["cp", "-a", "--no-target-directory", "--", str(source), str(dest)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        remove_workspace(p, dest)
        raise Conflict("copy_failed", f"could not copy {source_id}'s workspace: {proc.stderr.strip()[-300:]}")
    return workspace_bytes(str(dest))


def start(
    p: Platform,
    user: User,
    instance_id: str,
    gpu_model: str | None = None,
    gpu_count: int | None = None,
    expected_price: str | None = None,
) -> InstanceView:
    """Run a stopped/exited/lost instance again, same workspace: on GPUs of the same model and count,
    or resized (issue 26) onto ``gpu_model`` / ``gpu_count`` — a new allocation at that shape's price,
    on any host with room (the workspace goes with it). ``expected_price``: the hourly price of the
    new shape the renter was shown (all its GPUs); any other is refused (409 ``price_changed``).
    Never runs on fewer GPUs than asked: if not enough are free it fails and nothing changes."""
    check_may_run(p, user)
    model = resolve_model(gpu_model).name if gpu_model is not None else None
    if gpu_count is not None:
        _check_count(gpu_count)
    with p.db.read() as s:
        renter_id = get_owned(s, user, instance_id).user_id
    ensure_sandbox_uid(p, renter_id)
    with p.db.write() as s:
        inst = get_owned(s, user, instance_id, for_update=True)
        if not policies.may_spend(s, user, inst.billing_account_id):
            raise Forbidden(
                "team_role_required",
                "starting this instance spends its team's money; that needs the role member or above",
            )
        now = p.clock.now_ms()  # under the row lock: the new interval starts after the last one ended
        check_transition(Status(inst.status), Status.PENDING, "start")
        if inst.workspace_released_at_ms is not None:
            raise Conflict(
                "workspace_released",
                f"{instance_id}'s workspace was released at {iso(inst.workspace_released_at_ms)} after it stayed "
                "stopped past the retention period (you were warned); rent a new instance",
            )
        if (job_id := job_in_workspace(s, instance_id)) is not None:
            raise workspace_in_use(job_id, instance_id, "started")
        was = (inst.gpu_model, inst.gpu_count)
        resized = (model or inst.gpu_model, gpu_count or inst.gpu_count) != was
        reason = "start requested"
        if resized:
            if inst.job_id is not None:
                raise Conflict("resize_job_run", "a job's run is sized by its job; resubmit the job with --gpus")
            inst.gpu_model, inst.gpu_count = model or inst.gpu_model, gpu_count or inst.gpu_count
            reason = f"start requested; resized from {was[1]}× {was[0]} to {inst.gpu_count}× {inst.gpu_model}"
        alloc = open_allocation(p, s, inst, now, plan=rental_plan(inst))
        _check_price(alloc, expected_price)
        if resized:
            _check_workspace_fits(s, inst, alloc)
        inst.exit_code = None
        inst.run_handle = None
        transition(s, inst, Status.PENDING, reason, now, "start")
        spec = build_spec(p, s, inst, alloc, log_key=instance_id)
        begin_launch(p, instance_id)
    p.end_transfers(instance_id)  # its workspace's transfer sandbox, if files moved while it was stopped
    launch(p, instance_id, spec)
    return show(p, user, instance_id)


def _check_price(alloc: AllocationRow, expected_price: str | None) -> None:
    """The hourly list price of the allocation (all its GPUs) must be the one the renter confirmed."""
    if expected_price is None or alloc.hold_id is not None:  # on a prepaid hold: nothing more to pay
        return
    cur = alloc.currency
    hourly = alloc.price_per_hour_minor * alloc.gpu_count
    if parse_amount(expected_price, cur, field="expected price") != hourly:
        raise Conflict(
            "price_changed",
            f"{alloc.gpu_count}× {alloc.gpu_model} costs {format_minor(hourly, cur)} {cur}/h now, not the "
            f"{expected_price} you confirmed; look again (`danlu offers`) and confirm the new price",
        )


def _check_workspace_fits(s: Session, inst: Instance, alloc: AllocationRow, used: int | None = None) -> None:
    """A workspace resized onto fewer GPUs (a smaller disk share), or copied from another rental, must
    fit its disk limit there, or the disk watcher would end the run as soon as it started: refused
    before anything runs."""
    host = s.get(HostRow, alloc.host_id)
    if host is None:
        return
    limit = limits_for(host, inst.gpu_count).disk_bytes
    used = workspace_bytes(inst.workspace) if used is None else used
    if used > limit:
        raise Conflict(
            "disk_limit",
            f"the workspace holds {used // MIB} MiB, more than the {limit // MIB} MiB disk limit of "
            f"{inst.gpu_count}× {inst.gpu_model} on this platform; remove files first "
            f"(`danlu exec {inst.id} …` after starting it as it was) or ask for more GPUs",
        )


def stop(p: Platform, user: User, instance_id: str) -> InstanceView:
    """GPU billing ends now; the process gets SIGTERM, then SIGKILL after the grace period. While the backend
    cannot reach the run (Slurm's controller down) the stop is refused and nothing changes: billing ending now
    while the job ran on until the controller came back billed less than the cluster ran (issue 28, finding 8).
    That check (Slurm: ``scontrol ping``, a subprocess) runs before the write transaction, never under its lock."""
    with p.db.read() as s:
        inst = get_owned(s, user, instance_id)
        reaches_run = inst.status == Status.RUNNING and inst.run_handle is not None
    if reaches_run:
        refuse_while_unreachable(
            p, "the rental runs on, billed by the cluster's clock, until a stop reaches it: try again shortly"
        )
    with p.db.write() as s:
        inst = get_owned(s, user, instance_id, for_update=True)
        ended_ms = None
        if inst.status == Status.RUNNING and inst.run_handle is not None:
            # A backend with its own records (Slurm) ends the run itself; billing ends when it says.
            ended_ms = p.backend.cancel(inst.run_handle)
        handle = request_stop(
            p, s, inst, StopCause.USER, "stop requested by user", p.settings.stop_grace_s, billing_end_ms=ended_ms
        )
    if ended_ms is None:
        terminate_runs(p, [handle])
    else:
        p.wake_loop()
    return show(p, user, instance_id)


def terminate_runs(p: Platform, handles: Iterable[str | None]) -> None:
    """After the stopping transaction committed: SIGTERM each run, and wake the control loop,
    which watches stopping runs closely and frees their GPUs the moment the process is gone."""
    sent = False
    for handle in handles:
        if handle is not None:
            p.backend.terminate(handle)
            sent = True
    if sent:
        p.wake_loop()


def request_stop(
    p: Platform,
    s: Session,
    inst: Instance,
    cause: StopCause,
    reason: str,
    grace_s: int,
    *,
    billing_end_ms: int | None = None,
) -> str | None:
    """running → stopping inside the caller's transaction; returns the run handle the caller
    terminates after commit; the control loop kills it once ``kill_after_ms`` has passed. Billing
    ends now, or at ``billing_end_ms`` (a hold's end, when the loop comes to it a little later)."""
    now = p.clock.now_ms()
    # billing ends; GPUs wait for the process
    transition(s, inst, Status.STOPPING, reason, now, "stop", billing_end_ms=billing_end_ms)
    inst.stop_cause, inst.stop_reason = cause, reason
    inst.kill_after_ms = now + grace_s * 1000
    return inst.run_handle


def policy_stop(p: Platform, s: Session, inst: Instance, cause: StopCause, reason: str) -> str | None:
    """A stop the platform decides (idle, maximum duration, schedule), inside the caller's
    transaction: the preemption notice (the deadline file, SIGTERM after commit, the kill at the
    deadline) with billing ending now; returns the run handle to terminate after commit."""
    grace = p.settings.preempt_notice_s
    write_preempt_deadline(p, inst.id, p.clock.now_ms() + grace * 1000)
    return request_stop(p, s, inst, cause, reason, grace)


def begin_notice(p: Platform, s: Session, inst: Instance, deadline_ms: int, reason: str) -> str | None:
    """Preemption notice, inside the caller's transaction: running → stopping; the run's billing at
    its plan ends now and the notice period is billed at the interruptible price (same GPUs, a new
    allocation) until the process is gone; the deadline is written to ``DANLU_PREEMPT_DEADLINE``
    (``$DANLU_PREEMPT_FILE``, read-only to the run). The caller terminates the returned run handle
    after commit; the loop kills it at the deadline."""
    now = p.clock.now_ms()
    old_id = inst.current_allocation_id
    transition(s, inst, Status.STOPPING, reason, now, "preempt")
    inst.stop_cause, inst.stop_reason = StopCause.PREEMPTED, reason
    old = s.get(AllocationRow, old_id) if old_id is not None else None
    notice = new_allocation(s, inst, "interruptible", now)
    _move_gpus(s, inst, old, notice)
    inst.kill_after_ms = deadline_ms
    write_preempt_deadline(p, inst.id, deadline_ms)
    told = f"{reason}; save a checkpoint and exit by {iso(deadline_ms)} "
    told += "(SIGTERM now; $DANLU_PREEMPT_FILE holds the deadline)"
    s.add(Event.about_instance(inst, "preemption_notice", told, now))
    return inst.run_handle


def _move_gpus(s: Session, inst: Instance, old: AllocationRow | None, new: AllocationRow) -> None:
    """The GPUs of ``old`` now belong to ``new`` (the same process goes on, billed otherwise)."""
    new.host_id, new.gpu_indices = inst.host_id, old.gpu_indices if old else ""
    if old is not None:
        s.execute(
            update(Gpu)
            .where(Gpu.allocation_id == old.id)
            .values(allocation_id=new.id)
            .execution_options(synchronize_session=False)
        )
    inst.current_allocation_id = new.id


def continue_on_demand(s: Session, inst: Instance, at_ms: int, reason: str) -> None:
    """The hold ``inst`` runs on ended at ``at_ms``: the same process goes on, on the same GPUs,
    billed at the on-demand price from exactly ``at_ms`` (the meter stops it if the money runs out)."""
    old_id = inst.current_allocation_id
    old = s.get(AllocationRow, old_id, populate_existing=True) if old_id is not None else None
    if old is not None:
        lock_billing_account(s, inst.billing_account_id)
        if old.ended_at_ms is None:
            old.ended_at_ms = max(old.billed_until_ms, at_ms)
            s.flush()
        if not old.settled:
            meter_account(s, old.billing_account_id, [old], max(at_ms, old.billed_until_ms))
        at_ms = max(at_ms, old.ended_at_ms or at_ms)
    new = new_allocation(s, inst, rental_plan(inst), at_ms)
    _move_gpus(s, inst, old, new)
    s.add(
        InstanceEvent(instance_id=inst.id, from_status=inst.status, to_status=inst.status, reason=reason, at_ms=at_ms)
    )


def destroy(p: Platform, user: User, instance_id: str, reason: str = "destroyed by user") -> None:
    """End billing, kill the run, free the GPUs, delete the workspace."""
    with p.db.write() as s:
        inst = get_owned(s, user, instance_id, for_update=True)
        if (job_id := job_in_workspace(s, instance_id, unfinished=True)) is not None:
            raise workspace_in_use(job_id, instance_id, "removed")
        handle = inst.run_handle if Status(inst.status) in HAS_PROCESS else None
        # Pending without a handle: a launch this process is running kills its prepared run when it
        # sees the instance destroyed; one left by a dead server is discarded here.
        orphaned = inst.status == Status.PENDING and handle is None and not is_launching(p, instance_id)
        transition(s, inst, Status.DESTROYED, reason, p.clock.now_ms(), "destroy")
    if handle is not None:
        p.backend.kill(handle)
        p.backend.release(handle)
    elif orphaned:
        p.backend.discard(instance_id)
    p.end_transfers(instance_id)
    remove_workspace(p, p.workspaces / instance_id)
    for folder in (p.run_dirs / instance_id, p.control_dir(instance_id)):
        fstree.remove_tree(folder)  # renter-built trees of any depth (shutil.rmtree recursed and raised)
