"""The polled reads answered from memory before routing (api/hot.py) answer exactly what their
routes answer, only when the memo is good, and are counted under their routes; the API's
dependencies never hop to the thread pool for nothing (issue 29, target 1's guards)."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute, iter_route_contexts
from sqlalchemy import select

from danlu.api import deps, hot, paging
from danlu.compute import views
from danlu.compute.reconcile import reconcile
from danlu.core.clock import FakeClock
from danlu.db.models import Instance, User
from danlu.server.app import create_app
from tests.conftest import LiveServer, end_runs, make_platform

SLEEP = ["sleep", "600"]


@pytest.fixture
def still(db_url: str, tmp_path: Path) -> Iterator[tuple[LiveServer, FakeClock]]:
    """A live server on a clock that moves only when told (no control loop): a memo stays good."""
    clock = FakeClock()
    p, token = make_platform(db_url, tmp_path / "data", clock)
    with LiveServer(p, token, with_loop=False) as srv:
        with srv.admin() as a:
            assert a.put("/admin/prices/T4", json={"price_per_hour": "3.60"}).status_code == 200
        yield srv, clock
    end_runs(p)
    p.db.engine.dispose()


class Answered:
    """Counts the requests api/hot.py answered from memory (the others reached their routes)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = hot.HotReads._from_memory

        def counted(me: hot.HotReads, *a: Any) -> Any:
            answer = real(me, *a)
            self.calls += answer is not None
            return answer

        monkeypatch.setattr(hot.HotReads, "_from_memory", counted)


def _from_memory(c: httpx.Client, path: str, answered: Answered, **headers: str) -> httpx.Response:
    """A request api/hot.py answered. The caches are filled by a routed request first; the user
    cache lives 1 s of real time, so on a loaded machine a try may miss and go to the route: ask
    again (evidence, with a generous number of tries)."""
    for _ in range(50):
        before = answered.calls
        r = c.get(path, headers=headers)
        if answered.calls > before:
            return r
    raise AssertionError(f"no GET {path} of 50 was answered from memory")


def test_an_answer_from_memory_is_the_routes_answer(
    still: tuple[LiveServer, FakeClock], monkeypatch: pytest.MonkeyPatch
) -> None:
    srv, _ = still
    answered = Answered(monkeypatch)
    with srv.new_user("hana") as c:
        r = c.post("/instances", json={"gpu_model": "T4", "command": SLEEP})
        assert r.status_code == 201, r.text
        for path in ("/offers", "/instances"):
            before = answered.calls
            by_route = c.get(path, params={"limit": 1000})  # a query string always goes to the route
            assert by_route.status_code == 200 and answered.calls == before
            hot_answer = _from_memory(c, path, answered)
            assert hot_answer.status_code == 200
            assert hot_answer.content == by_route.content
            for h in ("etag", "content-type", "content-length"):
                assert hot_answer.headers[h] == by_route.headers[h], h
            assert hot_answer.headers["x-request-id"]  # inside the request-id middleware like any answer
            unchanged = _from_memory(c, path, answered, **{"If-None-Match": hot_answer.headers["etag"]})
            assert unchanged.status_code == 304 and unchanged.content == b""
            assert unchanged.headers["etag"] == hot_answer.headers["etag"]
        with srv.admin() as a:  # counted under their routes, not as unmatched
            metrics = a.get(f"{srv.url}/metrics").text
        for route in (hot.OFFERS, hot.INSTANCES):
            assert f'route="{route}"' in metrics, route
        # A filter is the route's: the answer is filtered, not the memo of the whole list.
        filtered = c.get("/offers", params={"gpu": "A100-80GB"}).json()
        assert {o["gpu_model"] for o in filtered} == {"A100-80GB"}


def test_the_listing_is_rendered_once_a_second_each_row_as_of_one_instant(
    still: tuple[LiveServer, FakeClock], monkeypatch: pytest.MonkeyPatch
) -> None:
    srv, clock = still
    whole = clock.now_ms() // 1000 * 1000 + 1000
    clock.set(whole + 900)  # 0.9 s into a second
    with srv.new_user("ines") as c:
        r = c.post("/instances", json={"gpu_model": "T4", "command": SLEEP})
        assert r.status_code == 201, r.text
        iid = r.json()["id"]
        answered = Answered(monkeypatch)

        def row(listing: list[dict[str, Any]]) -> dict[str, Any]:
            return next(i for i in listing if i["id"] == iid)

        clock.set(whole + 3_600)  # 2.7 s after the start
        first = c.get("/instances").json()
        assert row(first)["billed_seconds"] == 2, row(first)
        # Seconds and cost of one instant, as `show` gives them then (not the second's start).
        shown = c.get(f"/instances/{iid}").json()
        assert (row(first)["billed_seconds"], row(first)["cost"]) == (shown["billed_seconds"], shown["cost"])
        clock.set(whole + 3_999)  # 3.099 s after the start, the same whole second: held as rendered
        assert _from_memory(c, "/instances", answered).json() == first
        clock.set(whole + 4_000)  # another whole second: rendered again, 3.1 s after the start
        now = c.get("/instances").json()
        assert row(now)["billed_seconds"] == 3, row(now)


def test_the_heartbeat_leaves_the_listing_and_a_reader_is_given_the_last_one_while_another_rebuilds(
    still: tuple[LiveServer, FakeClock],
) -> None:
    """The p99 of 32 connections polling ``GET /instances`` was their wait for its rebuild: the
    reconcile pass's heartbeat (``last_seen_alive_ms``, shown by no listing) made it out of date every
    tick, and the clock every second, and every reader of that moment waited for the one rebuilding it.
    Now the heartbeat changes no cached read, and while one request rebuilds, the others are given the
    last rendering -- unless something they would see was written since."""
    srv, clock = still
    p = srv.platform
    clock.set(clock.now_ms() // 1000 * 1000 + 1_100)  # 0.1 s into a whole second
    with srv.new_user("ida") as c:
        r = c.post("/instances", json={"gpu_model": "T4", "command": SLEEP})
        assert r.status_code == 201, r.text
        iid = r.json()["id"]
        first = c.get("/instances").content
        with p.db.read() as s:
            uid = s.scalars(select(User.id).where(User.name == "ida")).one()
            seen_before = s.scalars(select(Instance.last_seen_alive_ms).where(Instance.id == iid)).one()
        assert views.rendered_listing(p, uid, False, "json") == first
        clock.advance(ms=300)  # the same whole second
        assert reconcile(p).alive == 1
        with p.db.read() as s:  # the heartbeat was written ...
            assert s.scalars(select(Instance.last_seen_alive_ms).where(Instance.id == iid)).one() != seen_before
        assert views.rendered_listing(p, uid, False, "json") == first  # ... and the rendering is still good

        clock.advance(ms=1_000)  # another second: out of date by the clock alone
        assert views.rendered_listing(p, uid, False, "json") is None
        key = hot.listing_memo(p, uid, False).key
        started, release = threading.Event(), threading.Event()

        def slow_build() -> bytes:
            started.set()
            release.wait(60)
            return b"rebuilt"

        def aged() -> object | None:
            return views.rendered_listing(p, uid, False, "json", aged=True)

        async def readers() -> tuple[object, bool, bytes]:
            memo = hot.Memo(key, lambda: None, aged)
            builder = asyncio.create_task(hot.once(memo, slow_build))
            assert await asyncio.to_thread(started.wait, 60)
            # Another reader meanwhile: the last rendering at once, not a wait for the rebuild.
            other = await asyncio.wait_for(hot.once(memo, lambda: b"a second build"), 60)
            was_building = hot.building(key)
            release.set()
            return other, was_building, await builder

        assert asyncio.run(readers()) == (first, True, b"rebuilt")
        clock.advance(ms=4_000)  # up to 5 s past its second
        assert aged() == first
        clock.advance(ms=1_000)  # no longer: a rebuild that hangs does not stretch it further
        assert aged() is None
        clock.advance(ms=-5_000)

        assert c.post(f"/instances/{iid}/stop").status_code == 200  # written: no reader is given the old one
        assert aged() is None


def test_no_api_dependency_hops_to_the_thread_pool_without_reading_anything(tmp_path: Path) -> None:
    """FastAPI runs a plain ``def`` dependency in the thread pool: a thread hop per request (the
    offers route's page parameters cost one on every request until issue 29). Every dependency of
    an API route is ``async`` unless it may read the database (listed here with its reason)."""
    reads = {
        "get_platform_offers": "this platform's offers: a cache miss reads the database",
        "get_platform_plans": "the packages and commitments on sale: reads the database",
    }
    p, _ = make_platform(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path / "data", FakeClock())
    app = create_app(p, None)
    sync: set[str] = set()
    routes = 0
    for ctx in iter_route_contexts(app.routes):  # the app's routes with the prefixes they were included under
        route = ctx.original_route
        if not isinstance(route, APIRoute) or not (ctx.path_format or "").startswith("/api/"):
            continue
        routes += 1
        stack = list(route.dependant.dependencies)
        while stack:
            d = stack.pop()
            stack.extend(d.dependencies)
            if d.call is not None and not inspect.iscoroutinefunction(d.call):
                sync.add(d.call.__name__)
    assert routes > 100  # every API route was looked at
    assert sync - set(reads) == set(), sync
    assert inspect.iscoroutinefunction(deps.public) and paging.MAX_PAGE == 1000
    p.db.engine.dispose()


def test_etags_are_kept_only_for_small_bodies_and_a_long_list_is_never_hashed_whole() -> None:
    """A route that builds a new body per request (a long job history, a folder's entries) must not
    make the ETag memo hold its answers (the review's case: 256 bodies of megabytes each)."""
    paging._TAGS.clear()
    long_list = b"[" + b",".join(b'{"id":%d}' % i for i in range(paging.MAX_PAGE + 1)) + b"]"
    assert paging.whole(long_list, None) is None and paging._TAGS == {}  # ListRoute cuts it
    big = b'[{"blob":"' + b"x" * (2 * 1024 * 1024) + b'"}]'
    answer = paging.whole(big, None)
    assert answer is not None and answer.headers["etag"] == paging.etag_of(big)
    assert paging._TAGS == {}  # answered, not kept
    small = b'[{"id":1}]'
    tag = paging.whole(small, None).headers["etag"]  # type: ignore[union-attr]
    assert paging._TAGS[id(small)] == (small, tag)
    unchanged = paging.whole(small, tag)
    assert unchanged is not None and unchanged.status_code == 304
