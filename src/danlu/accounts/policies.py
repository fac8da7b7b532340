"""Who may do what: the platform's one authorization module (issue 27, item 3; docs/layers.md).

**Route policies** — what a caller must be to reach a route at all. Every route of the API declares one (as its
FastAPI dependencies: ``api/deps.py``), and ``tests/api/test_policies.py`` fails on a route that declares none:

* ``PUBLIC``: nobody in particular (health, readiness, documentation, the advisor's arithmetic).
* ``PERSON``: a signed-in person (an API token, or the console's cookie where a browser opens a socket), acting on
  what is theirs: every object a route names is then checked with the object rules below, and one the caller may
  not see answers 404, as if it did not exist.
* ``OPERATOR``: the operator's admin token (a person gets ``403 admin_only``).
* ``SCRAPER``: ``/metrics`` — the operator's token, or a request from this machine (Prometheus beside it).

**Object rules** — whose an object is: its renter (``owner_id``) and the billing account that pays for it (a
person's own, or a team's, where the caller's role decides):

* ``may_see``: the renter, or any member of the paying team (a viewer included);
* ``may_manage`` (stop, remove, open a session, change its budget): the renter, or the team's owners and admins;
* ``may_spend`` (start it again, buy for the team): the team's owners, admins and members.

Services call the object rules with the row they loaded (one read, one decision); routes declare their policy.
Pure rules over the session's rows: no I/O of their own.
"""

from __future__ import annotations

from enum import StrEnum

from sqlalchemy import select
from sqlalchemy.orm import Session

from danlu.db.models import BillingAccount, Team, TeamMember, User

ROLES = ("owner", "admin", "member", "viewer")
SPENDERS = ("owner", "admin", "member")
MANAGERS = ("owner", "admin")


class Policy(StrEnum):
    PUBLIC = "public"
    PERSON = "person"
    OPERATOR = "operator"
    SCRAPER = "scraper"


def role_on(session: Session, user: User, billing_account_id: int) -> str | None:
    """The caller's role on a billing account: "owner" of their personal one, their team role,
    or None (not theirs: its objects answer 404)."""
    ba = session.get(BillingAccount, billing_account_id)
    if ba is None:
        return None
    if ba.kind == "personal":
        return "owner" if ba.user_id == user.id else None
    return session.execute(
        select(TeamMember.role)
        .join(Team, Team.id == TeamMember.team_id)
        .where(Team.billing_account_id == billing_account_id, TeamMember.user_id == user.id)
    ).scalar_one_or_none()


def may_see(session: Session, user: User, owner_id: int, billing_account_id: int) -> bool:
    return owner_id == user.id or role_on(session, user, billing_account_id) is not None


def may_manage(session: Session, user: User, owner_id: int, billing_account_id: int) -> bool:
    """Stop or remove: the renter, or the team's managers. (Starting again spends: see may_spend.)"""
    return owner_id == user.id or role_on(session, user, billing_account_id) in MANAGERS


def may_spend(session: Session, user: User, billing_account_id: int) -> bool:
    return role_on(session, user, billing_account_id) in SPENDERS
