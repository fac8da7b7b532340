"""Per-user GPU quotas: the most GPUs a user may hold at once, interactive rentals, job runs and
the packages and reservations they bought together. Checked when a rental, a restart or a
purchase claims GPUs; the scheduler gets what is left of each quota after the user's rentals and
holds (danlu.scheduling.live)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from danlu.compute.lifecycle import HoldState
from danlu.core.errors import QuotaExceeded
from danlu.db.models import AllocationRow, Gpu, Hold, Instance, Team, TeamMember, User


def gpus_held(session: Session, user_id: int, *, jobs: bool | None = None, interruptible: bool | None = None) -> int:
    """GPUs bound to the user's allocations now (``jobs``: only job runs / only rentals / both;
    ``interruptible``: only interruptible rentals / only the others / both), and, but for job runs
    alone, the idle GPUs of the packages and reservations the user bought (a held GPU something
    runs on counts once, through its allocation)."""
    stmt = (
        select(func.count(Gpu.id))
        .join(AllocationRow, AllocationRow.id == Gpu.allocation_id)
        .join(Instance, Instance.id == AllocationRow.instance_id)
        .where(AllocationRow.user_id == user_id)
    )
    if jobs is True:
        stmt = stmt.where(Instance.job_id.is_not(None))
    elif jobs is False:
        stmt = stmt.where(Instance.job_id.is_(None))
    if interruptible is not None:
        stmt = stmt.where(Instance.interruptible.is_(interruptible))
    held = int(session.execute(stmt).scalar_one())
    if jobs is not True and interruptible is not True:
        held += _idle_held(session, user_id)
    return held


def _idle_held(session: Session, user_id: int, billing_account_id: int | None = None) -> int:
    """Idle GPUs of the active holds ``user_id`` bought (on ``billing_account_id`` if given)."""
    holds = select(Hold.id).where(Hold.user_id == user_id, Hold.state == HoldState.ACTIVE)
    if billing_account_id is not None:
        holds = holds.where(Hold.billing_account_id == billing_account_id)
    return int(
        session.execute(
            select(func.count(Gpu.id)).where(Gpu.allocation_id.is_(None), Gpu.hold_id.in_(holds))
        ).scalar_one()
    )


def check_quota(session: Session, user_id: int, more_gpus: int) -> None:
    quota = session.execute(select(User.gpu_quota).where(User.id == user_id)).scalar_one()
    if quota is None:
        return
    held = gpus_held(session, user_id)
    if held + more_gpus > quota:
        raise QuotaExceeded(
            "gpu_quota_exceeded",
            f"your GPU quota is {quota} and you hold {held}; {more_gpus} more would exceed it. "
            "Stop or remove an instance, or ask your operator to raise the quota",
            quota=quota,
            held=held,
        )


def check_member_quota(session: Session, billing_account_id: int, user_id: int, more_gpus: int) -> None:
    """A team member's own quota on the team's account (set by the team's owner or admins)."""
    row = session.execute(
        select(TeamMember.gpu_quota, Team.name)
        .join(Team, Team.id == TeamMember.team_id)
        .where(Team.billing_account_id == billing_account_id, TeamMember.user_id == user_id)
    ).first()
    if row is None or row[0] is None:
        return
    quota: int = row[0]
    team: str = row[1]
    held = int(
        session.execute(
            select(func.count(Gpu.id))
            .join(AllocationRow, AllocationRow.id == Gpu.allocation_id)
            .where(AllocationRow.user_id == user_id, AllocationRow.billing_account_id == billing_account_id)
        ).scalar_one()
    ) + _idle_held(session, user_id, billing_account_id)
    if held + more_gpus > quota:
        raise QuotaExceeded(
            "member_gpu_quota_exceeded",
            f"your GPU quota in team {team} is {quota} and you hold {held} there; {more_gpus} more would exceed "
            "it. Stop an instance, or ask the team's owner to raise it",
            quota=quota,
            held=held,
        )
