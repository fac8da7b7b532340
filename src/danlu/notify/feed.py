"""The in-app event feed (``danlu events``, ``GET /api/v1/events``): what the platform told a person
or an account's managers — idle detected and stopped by policy, budget thresholds, holds ending,
storage retention warnings, a team member removed. Newest first; ``after`` pages forward by id.

Who sees an event (``visible_to``, also what webhooks send): the person it names (``user_id``); an
event addressed to an account alone (``user_id`` NULL) goes to that account's owner — the person,
for a personal account — and, for a team account, to its owners and admins."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, or_, select

from danlu.accounts.policies import MANAGERS
from danlu.context import Platform
from danlu.core.errors import InvalidInput
from danlu.db.models import BillingAccount, Event, Team, TeamMember, User

MAX_LIMIT = 500


@dataclass(frozen=True)
class EventView:
    id: int
    kind: str
    message: str
    instance_id: str | None
    at_ms: int


def visible_to(user_id: int) -> Any:
    """The WHERE clause of the events ``user_id`` sees."""
    personal = select(BillingAccount.id).where(BillingAccount.kind == "personal", BillingAccount.user_id == user_id)
    managed = personal.union(
        select(Team.billing_account_id)
        .join(TeamMember, TeamMember.team_id == Team.id)
        .where(TeamMember.user_id == user_id, TeamMember.role.in_(MANAGERS))
    )
    return or_(Event.user_id == user_id, and_(Event.user_id.is_(None), Event.billing_account_id.in_(managed)))


def feed(p: Platform, user: User, *, after: int = 0, limit: int = 100, kind: str | None = None) -> list[EventView]:
    if not 0 < limit <= MAX_LIMIT:
        raise InvalidInput("invalid_limit", f"limit is 1 to {MAX_LIMIT}")
    with p.db.read() as s:
        stmt = select(Event).where(visible_to(user.id), Event.id > after)
        if kind is not None:
            stmt = stmt.where(Event.kind == kind)
        rows = s.scalars(stmt.order_by(Event.id.desc()).limit(limit)).all()
        return [EventView(e.id, e.kind, e.message, e.instance_id, e.at_ms) for e in rows]
