"""The API's two most polled reads answered from their memos, before routing (issue 29, target 1).

``GET /api/v1/offers`` and ``GET /api/v1/instances`` are what every CLI ``watch``, dashboard and
script polls. Their bytes are rendered once per change (compute/offers.render_offers,
compute/views.render_listing) and their ETag hashed once per body (api/paging.whole); what was
left per request was FastAPI's routing and dependency solving, about three quarters of such a
request's CPU (measured in-process: 1,062 us for a memo hit against 182 us for a bare FastAPI route
returning the same bytes).

:class:`HotReads` answers such a request itself when everything it needs is already in memory:
no query string (a filter, a page or a cursor goes to the route), a bearer token whose user the
user cache holds (compute/views.CURRENT_USERS: any write to users or tokens in this process clears
it, and it lives 1 s), and a rendering still good for the present clock. The answer is the one the
route gives: the same bytes, ``ETag``, ``304`` on ``If-None-Match`` (api/paging.whole, shared with
:class:`~danlu.api.paging.ListRoute`), inside the metrics and request-id middleware like any
other. Anything it cannot answer from memory goes on to the route unchanged, which reads, renders
and caches it; the route stays the one place that validates, authenticates and renders.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

from fastapi.routing import iter_route_contexts
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from danlu.accounts.service import hash_token
from danlu.api import paging
from danlu.api.deps import bearer_token
from danlu.compute import offers, views
from danlu.context import Platform

T = TypeVar("T")

# One table of locks per running event loop (an asyncio.Lock belongs to the loop that first waits on it).
_BUILDING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, weakref.WeakValueDictionary[Hashable, asyncio.Lock]]
_BUILDING = weakref.WeakKeyDictionary()


def _locks() -> weakref.WeakValueDictionary[Hashable, asyncio.Lock]:
    return _BUILDING.setdefault(asyncio.get_running_loop(), weakref.WeakValueDictionary())


def building(key: Hashable) -> bool:
    """Whether a request of this event loop is building ``key`` now (see :func:`once`)."""
    lock = _locks().get(key)
    return lock is not None and lock.locked()


@dataclass(frozen=True)
class Memo(Generic[T]):
    """A rendering kept in memory: its key (name the database in it: platforms may share a process),
    what is in memory now (``cached``), and the last one only the clock or a TTL aged (``aged``)."""

    key: Hashable
    cached: Callable[[], T | None]
    aged: Callable[[], T | None] | None = None

    def at_hand(self) -> T | None:
        """``cached()``, or while another request of this loop builds it, ``aged()``: the last
        rendering, if it is only older than its second or TTL and nothing in this process wrote what
        it shows since (a reader after a write, the writer's own read included, waits for the new
        one). The listing went out of date every second by the clock alone, and every reader of that
        moment waited for its rebuild: the p99 of 32 polling connections was that wait (issue 29)."""
        value = self.cached()
        if value is None and self.aged is not None and building(self.key):
            value = self.aged()
        return value


async def once(memo: Memo[T], build: Callable[[], T]) -> T:
    """``memo.at_hand()`` if it has a value, else ``build()`` in the thread pool — by one request at a
    time per key: the others waiting meanwhile take what it built. (When a rendering went out of date
    under 32 polling connections, each of them built it again at once: 32 renderings of the same
    listing in the thread pool.)"""
    value = memo.at_hand()
    if value is not None:
        return value
    lock = _locks().get(memo.key)
    if lock is None:
        lock = _locks()[memo.key] = asyncio.Lock()
    async with lock:
        value = memo.cached()
        if value is None:
            value = await run_in_threadpool(build)
    return value


def offers_memo(p: Platform, gpu: str | None, min_vram: int | None, max_price: str | None) -> Memo[object]:
    """The JSON bytes of ``GET /offers`` with these filters (compute/offers.rendered_offers)."""
    return Memo(
        ("offers", p.db.engine.pool, gpu, min_vram, max_price),
        partial(offers.rendered_offers, p, gpu, min_vram, max_price, "json"),
        partial(offers.rendered_offers, p, gpu, min_vram, max_price, "json", aged=True),
    )


def listing_memo(p: Platform, user_id: int, include_destroyed: bool) -> Memo[object]:
    """The JSON bytes of a person's ``GET /instances`` (compute/views.rendered_listing)."""
    return Memo(
        ("instances", p.db.engine.pool, user_id, include_destroyed),
        partial(views.rendered_listing, p, user_id, include_destroyed, "json"),
        partial(views.rendered_listing, p, user_id, include_destroyed, "json", aged=True),
    )


OFFERS = "/api/v1/offers"
INSTANCES = "/api/v1/instances"


class HotReads:
    def __init__(self, app: ASGIApp, platform: Platform) -> None:
        self.app, self.platform = app, platform
        self._routes: dict[str, Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope["query_string"]:
            path = scope["path"]
            if path in (OFFERS, INSTANCES):
                answer = self._from_memory(path, scope["headers"])
                route = self._route(scope, path) if answer is not None else None
                if route is not None:
                    scope["route"] = route  # as the router would: the request is counted under its route
                    await answer(scope, receive, send)
                    return
        await self.app(scope, receive, send)

    def _route(self, scope: Scope, path: str) -> Any:
        """The route that answers ``GET path`` (telemetry/http_metrics labels requests by it)."""
        found = self._routes.get(path)
        if found is None:
            for ctx in iter_route_contexts(scope["app"].routes):
                if ctx.path_format == path and "GET" in (getattr(ctx.original_route, "methods", None) or ()):
                    found = self._routes[path] = ctx.original_route
                    break
        return found

    def _from_memory(self, path: str, raw_headers: list[tuple[bytes, bytes]]) -> Any:
        authorization = if_none_match = None
        for key, value in raw_headers:  # the first of each, as Starlette's Headers.get reads them
            if key == b"authorization" and authorization is None:
                authorization = value.decode("latin-1")
            elif key == b"if-none-match" and if_none_match is None:
                if_none_match = value.decode("latin-1")
        token = bearer_token(authorization)
        if token is None:
            return None
        p = self.platform
        user = views.CURRENT_USERS.peek(p.db.engine, hash_token(token))
        if user is None:
            return None
        memo = offers_memo(p, None, None, None) if path == OFFERS else listing_memo(p, user["id"], False)
        body = memo.at_hand()
        if not isinstance(body, bytes):
            return None
        return paging.whole(body, if_none_match)
