"""Dependencies: the platform, the current user, the admin (``Annotated`` aliases)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from danlu.accounts.service import authenticate
from danlu.context import Platform
from danlu.core.errors import Forbidden
from danlu.db.models import User


async def get_platform(request: Request) -> Platform:
    platform: Platform = request.app.state.platform
    return platform


PlatformDep = Annotated[Platform, Depends(get_platform)]


async def get_current_user(p: PlatformDep, authorization: Annotated[str | None, Header()] = None) -> User:
    """Runs on the event loop, not in the thread pool: a read by indexed key never blocks (SQLite
    WAL readers do not wait for writers; PostgreSQL reads are MVCC), and skipping the thread hop
    is most of the cost of a small request."""
    token = None
    if authorization:
        scheme, _, value = authorization.partition(" ")
        token = value.strip() if scheme.lower() == "bearer" else None
    with p.db.read() as s:
        user = authenticate(s, token)
        s.expunge(user)
        return user


CurrentUser = Annotated[User, Depends(get_current_user)]


async def get_admin(user: CurrentUser) -> User:
    if not user.is_admin:
        raise Forbidden("admin_only", "this needs the operator's admin token")
    return user


AdminUser = Annotated[User, Depends(get_admin)]
