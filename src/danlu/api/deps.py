"""Dependencies: the platform, the current user, the admin (``Annotated`` aliases)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from danlu.accounts.service import authenticate
from danlu.context import Platform
from danlu.core.errors import Forbidden
from danlu.db.models import User


def get_platform(request: Request) -> Platform:
    platform: Platform = request.app.state.platform
    return platform


PlatformDep = Annotated[Platform, Depends(get_platform)]


def get_current_user(p: PlatformDep, authorization: Annotated[str | None, Header()] = None) -> User:
    token = None
    if authorization:
        scheme, _, value = authorization.partition(" ")
        token = value.strip() if scheme.lower() == "bearer" else None
    with p.db.read() as s:
        user = authenticate(s, token)
        s.expunge(user)
        return user


CurrentUser = Annotated[User, Depends(get_current_user)]


def get_admin(user: CurrentUser) -> User:
    if not user.is_admin:
        raise Forbidden("admin_only", "this needs the operator's admin token")
    return user


AdminUser = Annotated[User, Depends(get_admin)]
