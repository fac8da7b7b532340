"""Dependencies: the platform, the current user, the admin (``Annotated`` aliases)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from danlu.accounts.policies import Policy
from danlu.accounts.service import authenticate, detached_user, hash_token, user_columns
from danlu.compute.views import CURRENT_USERS
from danlu.context import Platform
from danlu.core.errors import Forbidden, Unauthorized
from danlu.db.models import User


async def get_platform(request: Request) -> Platform:
    platform: Platform = request.app.state.platform
    return platform


PlatformDep = Annotated[Platform, Depends(get_platform)]

BEARER_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "description": "Your API token (`danlu login`, or the operator's admin token): `Authorization: Bearer TOKEN`",
}
"""The OpenAPI document declares this scheme, and every operation that depends on
:func:`get_current_user` requires it (danlu.api.app.install_openapi). It is not a FastAPI security
dependency: one fewer dependency to solve on every request, and get_current_user answers our own
401 (``missing_token`` / ``invalid_token``) anyway."""


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header, or None."""
    scheme, _, value = (authorization or "").partition(" ")
    return (value.strip() or None) if scheme.lower() == "bearer" else None


async def get_current_user(request: Request) -> User:
    """Answered on the event loop from the cache (skipping the thread hop is most of the cost of a
    small request); a miss reads the database in the thread pool, never on the event loop."""
    p: Platform = request.app.state.platform
    token = bearer_token(request.headers.get("authorization"))

    def load() -> dict[str, Any]:
        with p.db.read() as s:
            return user_columns(authenticate(s, token))

    # The user's columns come from a cache that any write to ``users`` in this process invalidates
    # at once (revoke, rotate, suspend: compute/views.py ReadCache); each request gets its own
    # detached User (accounts.service.detached_user).
    key = hash_token(token) if token else None
    columns = CURRENT_USERS.peek(p.db.engine, key) if key else None
    if columns is None:
        # Wrong tokens are counted per client address: past 20, each further try waits (429).
        guess = [f"addr:{request.client.host}"] if token and request.client is not None else []
        p.token_throttle.check(guess, p.clock.now_ms())
        try:
            columns = (
                await run_in_threadpool(CURRENT_USERS.get, p.db.engine, key, load)
                if key
                else await run_in_threadpool(load)
            )
        except Unauthorized:
            p.token_throttle.failed(guess, p.clock.now_ms())
            raise
    return detached_user(columns)


CurrentUser = Annotated[User, Depends(get_current_user)]


async def get_admin(user: CurrentUser) -> User:
    if not user.is_admin:
        raise Forbidden("admin_only", "this needs the operator's admin token")
    return user


AdminUser = Annotated[User, Depends(get_admin)]


# -- route policies (danlu.accounts.policies) --------------------------------------------------------------------
# A route's policy is what its dependencies ask: the admin token (OPERATOR), a person's token (PERSON), or one of
# the declarations below for a route that authenticates no person through them. tests/api/test_policies.py fails
# on a route that declares none, so a new route cannot be open by forgetting.
async def public() -> None:
    """PUBLIC: a route anyone may call (health, readiness, documentation, the advisor's arithmetic)."""


async def by_connection() -> None:
    """PERSON, checked on the connection: a socket's credentials (a bearer token, or the console's cookie a
    browser sends with an upgrade) are checked by danlu.access.service when it opens, and again while it lasts."""


async def scraper() -> None:
    """SCRAPER: /metrics, open to this machine or the operator's token (telemetry's metrics_reader)."""


Public = Depends(public)
ByConnection = Depends(by_connection)
Scraper = Depends(scraper)
_DECLARED = {public: Policy.PUBLIC, by_connection: Policy.PERSON, scraper: Policy.SCRAPER}


def route_policy(dependant: Any) -> Policy | None:
    """The one policy a route's dependencies declare, or None (none, or more than one)."""
    calls: set[Any] = set()
    stack = [dependant]
    while stack:
        for d in stack.pop().dependencies:
            calls.add(d.call)
            stack.append(d)
    found = {policy for call, policy in _DECLARED.items() if call in calls}
    if get_admin in calls:
        found.add(Policy.OPERATOR)
    elif get_current_user in calls:
        found.add(Policy.PERSON)
    return found.pop() if len(found) == 1 else None
