"""Who may use a rental's kept workspace now: the renter's own stopped rental for copying or snapshotting
(``resting_workspace``), not while a job (``danlu run --workspace``) is in it (``job_in_workspace``)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from danlu.compute.lifecycle import HAS_PROCESS, KEEPS_WORKSPACE, Status
from danlu.compute.views import get_owned
from danlu.core.clock import iso
from danlu.core.errors import Conflict, NotFound
from danlu.db.models import Instance, Job, User


def job_in_workspace(session: Session, instance_id: str, *, unfinished: bool = False) -> str | None:
    """A job (``danlu run --workspace``) whose run is in ``instance_id``'s workspace now — or, ``unfinished``,
    one that has not ended and will use it: the rental may then not start (or go) under it."""
    query = select(Job.id).where(Job.workspace_instance_id == instance_id)
    if unfinished:
        query = query.where(Job.end_ms.is_(None))
    else:
        live = [st.value for st in HAS_PROCESS]
        query = query.join(Instance, Instance.id == Job.current_instance_id).where(Instance.status.in_(live))
    return session.scalars(query.limit(1)).first()


def workspace_in_use(job_id: str, instance_id: str, doing: str) -> Conflict:
    return Conflict(
        "workspace_in_use",
        f"{instance_id}'s workspace is job {job_id}'s (`danlu run --workspace`); it cannot be {doing} until that job "
        f"has ended (`danlu jobs`, `danlu job cancel {job_id}`)",
    )


def resting_workspace(session: Session, user: User, instance_id: str, doing: str) -> Instance:
    """The renter's own instance whose workspace nothing writes to (stopped, exited, failed, lost), for
    ``doing`` it (copying, snapshotting): a teammate's workspace is theirs even where the team sees it
    (404), a running one is ``source_running``, a released one ``workspace_released``."""
    inst = get_owned(session, user, instance_id)
    if inst.user_id != user.id:
        raise NotFound("instance_not_found", f"no instance {instance_id!r}; list yours with `danlu ps`")
    if Status(inst.status) not in KEEPS_WORKSPACE:
        raise Conflict(
            "source_running",
            f"{instance_id} is {inst.status}; stop it first (`danlu stop {instance_id}`): its workspace is "
            f"{doing} while nothing writes to it",
        )
    if inst.workspace_released_at_ms is not None:
        raise Conflict(
            "workspace_released",
            f"{instance_id}'s workspace was released at {iso(inst.workspace_released_at_ms)}; nothing to do",
        )
    if (job_id := job_in_workspace(session, instance_id)) is not None:  # a job's run writes to it now
        raise workspace_in_use(job_id, instance_id, doing)
    return inst
