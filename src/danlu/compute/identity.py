"""Each renter's own unprivileged OS uid (and gid, the same number), from the operator's range.

Allocated on the user's first run and kept (``users.sandbox_uid``, UNIQUE): the uid owns the
user's workspaces, so it must not change. The first free uid is ``first + user id`` — unique
within a database because user ids are; the unique constraint is the guard. Two deployments on
one host must be given disjoint ranges (``danlu server --sandbox-uids``).
"""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.orm import Session

from danlu.core.errors import NoCapacity
from danlu.db.models import User


def sandbox_uid(session: Session, user_id: int, first: int, count: int) -> int:
    user = session.get(User, user_id)
    assert user is not None
    if user.sandbox_uid is not None:
        return user.sandbox_uid
    uid = first + user_id
    if uid >= first + count:
        raise NoCapacity(
            "sandbox_uids_exhausted",
            f"the sandbox uid range {first}-{first + count - 1} has no uid left for this user; "
            "the operator must widen it (danlu server --sandbox-uids FIRST-LAST)",
        )
    session.execute(update(User).where(User.id == user_id, User.sandbox_uid.is_(None)).values(sandbox_uid=uid))
    session.refresh(user, ["sandbox_uid"])
    assert user.sandbox_uid is not None
    return user.sandbox_uid
