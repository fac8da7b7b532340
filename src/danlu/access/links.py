"""Links to a renter's web app: a revocable token that opens one port of one instance through the
port proxy (``/p/{id}/{port}/?danlu_link=TOKEN``) for whoever holds it — a colleague's browser with
no danlu account, a TensorBoard shown in a meeting. The link reaches that app only: no other port,
no shell, no tunnel, no API. It works while the instance runs and the person who made it may still
manage the instance (a member removed from the team takes their links with them), until revoked.

Only the token's SHA-256 is stored; the token is shown once, in the link's URL."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from sqlalchemy import func, select

from danlu.access.service import running_of
from danlu.accounts import policies
from danlu.accounts.service import hash_token
from danlu.compute import views
from danlu.context import Platform
from danlu.core.errors import Conflict, Forbidden, NotFound
from danlu.db.models import PortLink, User

PARAM = "danlu_link"  # the query parameter of a link's URL (taken off at once: it becomes a cookie)
TOKEN_PREFIX = "dlk_"
MAX_LINKS = 20  # live links per instance


def cookie_name(instance_id: str, port: int) -> str:
    """The browser keeps a link as this cookie, on the app's path only."""
    return f"{PARAM}_{instance_id}_{port}"


@dataclass(frozen=True)
class LinkView:
    id: int
    instance_id: str
    port: int
    created_at_ms: int
    created_by: str


def create(p: Platform, user: User, instance_id: str, port: int) -> tuple[LinkView, str]:
    """A new link to ``port`` of the user's running instance, and its token (shown once)."""
    t = running_of(p, user, instance_id)  # the renter or the team's managers; another's: not found
    token = TOKEN_PREFIX + secrets.token_urlsafe(24)
    with p.db.write() as s:
        live_here = (PortLink.instance_id == t.instance_id) & PortLink.revoked_at_ms.is_(None)
        live = s.execute(select(func.count(PortLink.id)).where(live_here)).scalar_one()
        if live >= MAX_LINKS:
            raise Conflict("too_many_links", f"{t.instance_id} has {live} links, the most one instance may; revoke one")
        row = PortLink(instance_id=t.instance_id, port=port, token_hash=hash_token(token), created_by=user.id,
                       created_at_ms=p.clock.now_ms())  # fmt: skip
        s.add(row)
        s.flush()
        return LinkView(row.id, row.instance_id, row.port, row.created_at_ms, user.name), token


def list_links(p: Platform, user: User, instance_id: str) -> list[LinkView]:
    """The instance's live links (the instance must be one the user may manage)."""
    t = _managed(p, user, instance_id)
    with p.db.read() as s:
        rows = s.execute(
            select(PortLink, User.name)
            .join(User, User.id == PortLink.created_by)
            .where(PortLink.instance_id == t, PortLink.revoked_at_ms.is_(None))
            .order_by(PortLink.id)
        ).all()
        return [LinkView(r.id, r.instance_id, r.port, r.created_at_ms, name) for r, name in rows]


def revoke(p: Platform, user: User, instance_id: str, link_id: int) -> None:
    t = _managed(p, user, instance_id)
    with p.db.write() as s:
        row = s.get(PortLink, link_id)
        if row is None or row.instance_id != t or row.revoked_at_ms is not None:
            why = f"no link {link_id} on {instance_id}; list them with `danlu port {instance_id} --links`"
            raise NotFound("link_not_found", why)
        row.revoked_at_ms = p.clock.now_ms()


def _managed(p: Platform, user: User, instance_id: str) -> str:
    """The id of an instance the user may manage, running or not (its links can be read and
    revoked after it stopped)."""
    with p.db.read() as s:
        inst = views.get_owned(s, user, instance_id)
        if not policies.may_manage(s, user, inst.user_id, inst.billing_account_id):
            raise Forbidden("team_role_required", "only the renter or the team's owners and admins manage its links")
        return inst.id
