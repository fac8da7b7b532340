"""The operator's controls over renters' work: stop or remove any instance with a reason the renter
sees, suspend and resume a renter, and list the sandboxes running on the hosts."""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import select

from danlu.accounts.service import get_user_by_name
from danlu.compute import instances
from danlu.compute.lifecycle import HAS_PROCESS, Status, StopCause
from danlu.compute.runs import refuse_while_unreachable
from danlu.compute.views import InstanceView, get_owned, show
from danlu.context import Platform
from danlu.core.errors import Conflict, InvalidInput, NotFound
from danlu.db.models import HostRow, Instance, User

MAX_REASON = 500


def _reason(text: str) -> str:
    text = (text or "").strip()
    if not text or len(text) > MAX_REASON or "\x00" in text:
        raise InvalidInput("invalid_reason", f"give a reason the renter will read (1-{MAX_REASON} characters)")
    return text


def _owner(p: Platform, instance_id: str) -> User:
    with p.db.read() as s:
        inst = s.get(Instance, instance_id) if len(instance_id) <= 32 else None
        if inst is None or inst.status == Status.DESTROYED:
            raise NotFound("instance_not_found", f"no instance {instance_id!r}; see `danlu admin sandboxes`")
        if inst.job_id is not None:
            raise Conflict("job_run", f"{instance_id} is a run of job {inst.job_id}; stop the job's run instead")
        user = s.get(User, inst.user_id)
        assert user is not None
        s.expunge(user)
        return user


def stop_instance(p: Platform, instance_id: str, reason: str) -> InstanceView:
    """Stop any renter's instance (its workspace is kept); the renter sees the reason."""
    why = f"stopped by the operator: {_reason(reason)}"
    user = _owner(p, instance_id)
    with p.db.read() as s:
        has_run = get_owned(s, user, instance_id).run_handle is not None
    if has_run:  # as a renter's stop: never billing's end while the run goes on (checked outside the write lock)
        refuse_while_unreachable(p, "the rental runs on until a stop reaches it: try again shortly")
    with p.db.write() as s:
        inst = get_owned(s, user, instance_id, for_update=True)
        handle = instances.request_stop(p, s, inst, StopCause.OPERATOR, why, p.settings.stop_grace_s)
    instances.terminate_runs(p, [handle])
    return show(p, user, instance_id)


def destroy_instance(p: Platform, instance_id: str, reason: str) -> None:
    """Remove any renter's instance and its workspace; the renter sees the reason."""
    why = f"removed by the operator: {_reason(reason)}"
    instances.destroy(p, _owner(p, instance_id), instance_id, reason=why)


def suspend_user(p: Platform, name: str, reason: str) -> int:
    """Suspend a renter: nothing new may start, and every running instance and job run of theirs
    is stopped now (workspaces kept; stopped job runs wait in the queue). Returns how many."""
    why = _reason(reason)
    handles: list[str | None] = []
    with p.db.write() as s:
        user = get_user_by_name(s, name)
        if user.is_admin:
            raise InvalidInput("cannot_suspend_admin", "the operator's own account cannot be suspended")
        user.suspended_reason = why
        running = s.scalars(
            select(Instance)
            .where(Instance.user_id == user.id, Instance.status == Status.RUNNING.value)
            .order_by(Instance.id)
            .with_for_update()
        ).all()
        for inst in running:
            handles.append(
                instances.request_stop(
                    p, s, inst, StopCause.OPERATOR, f"account suspended: {why}", p.settings.stop_grace_s
                )
            )
    instances.terminate_runs(p, handles)
    return len(handles)


def resume_user(p: Platform, name: str) -> None:
    with p.db.write() as s:
        get_user_by_name(s, name).suspended_reason = None


@dataclass
class SandboxView:
    instance_id: str
    user: str
    job_id: str | None
    host: str
    status: str
    image: str
    uid: int | None
    network: str
    limits: dict[str, object]


def list_sandboxes(p: Platform) -> list[SandboxView]:
    """Every run that has (or is getting) a process, with what its sandbox was given."""
    with p.db.read() as s:
        rows = s.execute(
            select(Instance, User.name, HostRow.name)
            .join(User, User.id == Instance.user_id)
            .outerjoin(HostRow, HostRow.id == Instance.host_id)
            .where(Instance.status.in_([st.value for st in HAS_PROCESS]))
            .order_by(Instance.created_at_ms)
        ).all()
    out = []
    for inst, user, host in rows:
        info = json.loads(inst.sandbox_json) if inst.sandbox_json else {}
        limits = {k: info[k] for k in ("cpus_milli", "memory_mb", "pids", "disk_mb", "limits_enforced_by") if k in info}
        out.append(
            SandboxView(
                instance_id=inst.id,
                user=user,
                job_id=inst.job_id,
                host=host or "",
                status=inst.status,
                image=inst.image,
                uid=info.get("uid"),
                network=str(info.get("network", "")),
                limits=limits,
            )
        )
    return out
