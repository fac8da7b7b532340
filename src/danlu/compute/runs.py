"""Starting a run of an instance on the compute backend: what it is given (exactly its GPUs, the
host's per-GPU limits, its image, the host's network policy, the renter's own uid, an allow-listed
environment). The two-phase launch that never leaves a command running untracked
(danlu.compute.instances.launch):

1. ``backend.launch(spec)`` prepares the run (sandbox, cgroup, network) with the command held back;
2. one transaction re-reads the locked instance and records the handle (``pending → running``), or,
   if the instance was destroyed or its balance ran out meanwhile, decides to kill it;
3. after commit: ``backend.start(handle)`` lets the command begin (or ``backend.kill``).

A server that dies between 1 and 2 leaves an instance ``pending`` with no handle: the next
reconcile pass discards whatever the launch left and marks it lost. One that dies between 2 and 3
leaves a run that never started: the backend reports it lost.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from danlu.backend import PREEMPT_FILE, RunSpec
from danlu.compute import fstree, hosts, identity, images
from danlu.compute.devices import devices_for
from danlu.context import Platform
from danlu.core.clock import iso
from danlu.core.errors import DanluError, Forbidden
from danlu.db.models import AllocationRow, Gpu, HostRow, Instance, User


class SandboxUnavailable(DanluError):
    http_status = 503
    default_code = "sandbox_unavailable"


def check_may_run(p: Platform, user: User) -> None:
    """A suspended renter runs nothing; without a sandbox only the operator runs anything."""
    if user.suspended_reason is not None:
        raise Forbidden(
            "account_suspended",
            f"your account is suspended by the operator: {user.suspended_reason}; contact them to resume it",
        )
    if p.sandbox.mode == "unavailable" and not user.is_admin:
        raise SandboxUnavailable(
            "sandbox_unavailable",
            f"this server cannot sandbox renters' code ({p.sandbox.detail}); ask the operator to install "
            "bubblewrap, or to restart with --no-sandbox if you are its only, trusted user",
        )
    refuse_while_unreachable(p, "nothing was started or charged, try again shortly")


def refuse_while_unreachable(p: Platform, consequence: str) -> None:
    """503 ``backend_unavailable`` while the backend cannot carry out what is asked (Slurm's controller does
    not answer), saying ``consequence``; nothing is changed before it."""
    why = p.backend.unavailable()
    if why is not None:
        raise BackendUnavailable("backend_unavailable", f"{why}; {consequence}")


class BackendUnavailable(DanluError):
    http_status = 503
    default_code = "backend_unavailable"


def platform_env(gpus: list[Gpu], inst: Instance) -> dict[str, str]:
    simulated = any(g.simulated for g in gpus)
    # Real GPUs by UUID (immune to CUDA's device ordering); simulated ones by their index.
    visible = ",".join(str(g.idx) if g.simulated else g.uuid for g in gpus)
    return {
        "CUDA_VISIBLE_DEVICES": visible,
        "NVIDIA_VISIBLE_DEVICES": visible,
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "DANLU_INSTANCE_ID": inst.id,
        "DANLU_GPU_MODEL": inst.gpu_model,
        "DANLU_GPUS_SIMULATED": "1" if simulated else "0",
    }


def session_env(s: Session, inst: Instance) -> dict[str, str]:
    """What a session inside the running instance (exec, shell, SSH) sees of the run's environment:
    the renter's own variables and the platform's (DANLU_INSTANCE_ID, the GPUs, a job's id), as the
    run's command got them: a shell's ``$DANLU_INSTANCE_ID`` is the instance (it was empty)."""
    gpus = list(s.scalars(select(Gpu).where(Gpu.allocation_id == inst.current_allocation_id).order_by(Gpu.idx)))
    env = {**json.loads(inst.env_json or "{}"), **platform_env(gpus, inst)}
    if inst.job_id is not None:
        env["DANLU_JOB_ID"] = inst.job_id
    return env


def ensure_sandbox_uid(p: Platform, user_id: int) -> None:
    """Give the renter their sandbox uid in a transaction of its own, before a run's transaction.
    Inside it, the uid's UPDATE (a unique column, so it waits for every key-share lock on the user's
    row) came after the instance's insert (a key-share lock) and the payer's lock: two first rentals
    at once each waited for the other (PostgreSQL deadlock, issue 28 finding 5)."""
    if not (p.sandbox.sandboxed and p.sandbox.identity == "per-renter uid"):
        return
    with p.db.read() as s:  # given once: every later run needs no write transaction for it
        if s.scalar(select(User.sandbox_uid).where(User.id == user_id)) is not None:
            return
    with p.db.write() as s:
        identity.sandbox_uid(s, user_id, p.settings.sandbox_uid_first, p.settings.sandbox_uid_count)


def build_spec(
    p: Platform,
    s: Session,
    inst: Instance,
    alloc: AllocationRow,
    *,
    log_key: str,
    checkpoints: Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> RunSpec:
    """Everything the backend needs for this run, read inside the caller's transaction. Records on
    the instance what its sandbox is given (``sandbox_json``), for ``show`` and the operator."""
    gpus = list(s.scalars(select(Gpu).where(Gpu.allocation_id == alloc.id).order_by(Gpu.idx)))
    host = s.get(HostRow, alloc.host_id)
    assert host is not None
    by_host: dict[int, list[Gpu]] = {}
    for g in sorted(gpus, key=lambda g: (g.host_id != alloc.host_id, g.host_id, g.idx)):  # its own host first
        by_host.setdefault(g.host_id, []).append(g)
    nodes: tuple[str, ...] = ()
    node_env: tuple[dict[str, str], ...] = ()
    if len(by_host) > 1:  # a gang over several hosts: each node sees its own GPUs
        names = {h.id: h.name for h in s.scalars(select(HostRow).where(HostRow.id.in_(by_host)))}
        nodes = tuple(names[h] for h in by_host)
        node_env = tuple(platform_env(part, inst) for part in by_host.values())
        gpus = [g for part in by_host.values() for g in part]
    env = {**json.loads(inst.env_json or "{}"), **platform_env(gpus, inst), **(extra_env or {})}
    uid = None
    if p.sandbox.sandboxed and p.sandbox.identity == "per-renter uid":
        uid = identity.sandbox_uid(s, inst.user_id, p.settings.sandbox_uid_first, p.settings.sandbox_uid_count)
    limits = hosts.limits_for(host, inst.gpu_count // max(1, len(nodes)))  # a gang's: one node's
    network = host.network_policy if p.sandbox.sandboxed else "host"
    inst.sandbox_json = json.dumps(
        {
            "sandbox": p.sandbox.mode,
            "uid": uid,
            "network": network,
            "image": inst.image,
            "limits_enforced_by": p.sandbox.limits if p.sandbox.sandboxed else "none",
            "disk_enforced_by": p.sandbox.disk_enforced_by if p.sandbox.sandboxed else "none",
            **limits.describe(),
            **({"nodes": list(nodes)} if nodes else {}),
        },
        sort_keys=True,
    )
    return RunSpec(
        run_id=inst.id,
        log_key=log_key,
        command=json.loads(inst.command_json),
        env=env,
        workspace=Path(inst.workspace),
        control_dir=p.control_dir(inst.id),
        checkpoints=checkpoints,
        devices=devices_for(gpus, p.sandbox_root),
        limits=limits,
        image=images.resolve(s, inst.image),
        network=network,
        uid=uid,
        host=host.name,
        gpu_model=inst.gpu_model if gpus else "",
        gpu_count=len(gpus),
        interruptible=alloc.plan == "interruptible",
        nodes=nodes,
        node_env=node_env,
    )


def prepare_control_dir(p: Platform, instance_id: str) -> None:
    """The run's ``/run/danlu``: the platform's own folder (no renter-made symlink can redirect a
    write), readable by the renter, emptied at every start."""
    folder = p.control_dir(instance_id)
    fstree.remove_tree(folder)
    for path in (folder.parent, folder):
        path.mkdir(parents=True, exist_ok=True)
    os.chmod(folder.parent, 0o711)
    os.chmod(folder, 0o755)


def write_preempt_deadline(p: Platform, instance_id: str, deadline_ms: int) -> None:
    """The deadline a run is told (``DANLU_PREEMPT_FILE``): ISO time, then epoch seconds."""
    text = f"{iso(deadline_ms)}\n{deadline_ms // 1000}\n"
    path = p.control_dir(instance_id) / PREEMPT_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.chmod(tmp, 0o644)
    tmp.replace(path)
