"""Cursor pages and ETags on the API's lists (danlu.api.paging): the pure cut, then over real HTTP."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from danlu.api.paging import cut
from tests.conftest import LiveServer

ROWS = st.lists(
    st.fixed_dictionaries({"at": st.one_of(st.none(), st.text(max_size=3)), "id": st.integers(0, 10**6)}),
    max_size=40,
    unique_by=lambda r: r["id"],
)


RELAXED = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@RELAXED
@given(rows=ROWS, limit=st.integers(1, 7), descending=st.booleans())
def test_pages_concatenate_to_the_whole_list_in_order(rows: list[dict[str, Any]], limit: int, descending: bool) -> None:
    seen: list[dict[str, Any]] = []
    cursor = None
    for _ in range(len(rows) + 2):
        page, cursor = cut(rows, ["at", "id"], descending, limit, cursor)
        assert len(page) <= limit
        seen += page
        if cursor is None:
            break
    assert [r["id"] for r in seen] == [r["id"] for r in cut(rows, ["at", "id"], descending, 10**6, None)[0]]
    assert sorted(r["id"] for r in seen) == sorted(r["id"] for r in rows)


@RELAXED
@given(rows=ROWS, extra=ROWS, limit=st.integers(1, 5))
def test_rows_added_or_removed_between_pages_never_repeat_or_skip_the_others(
    rows: list[dict[str, Any]], extra: list[dict[str, Any]], limit: int
) -> None:
    first, cursor = cut(rows, ["id"], False, limit, None)
    if cursor is None:
        return
    changed = [r for r in rows if r["id"] % 3] + [r for r in extra if r["id"] not in {x["id"] for x in rows}]
    rest: list[dict[str, Any]] = []
    while cursor is not None:
        page, cursor = cut(changed, ["id"], False, limit, cursor)
        rest += page
    ids = [r["id"] for r in first + rest]
    assert len(ids) == len(set(ids))  # nothing twice
    last = first[-1]["id"]
    assert {r["id"] for r in changed if r["id"] > last} == {r["id"] for r in rest}  # nothing skipped


def test_instances_page_by_cursor_and_poll_with_etags(live: LiveServer) -> None:
    c = live.new_user("alice")
    ids = []
    for model in ("T4", "T4", "A100-80GB"):  # a GPU each: a finished `true` frees its own late under load
        r = c.post("/instances", json={"gpu_model": model, "command": ["true"]})
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    whole = c.get("/instances").json()
    r = c.get("/instances", params={"limit": 2})
    assert [i["id"] for i in r.json()] == [i["id"] for i in sorted(whole, key=lambda i: (i["created_at"], i["id"]))][:2]
    assert r.headers["link"].endswith('>; rel="next"')
    r2 = c.get("/instances", params={"limit": 2, "cursor": r.headers["x-next-cursor"]})
    assert len(r2.json()) == 1 and "x-next-cursor" not in r2.headers
    assert {i["id"] for i in r.json() + r2.json()} == set(ids)
    # A list answered again unchanged is a 304 without a body.
    jobs = c.get("/jobs")
    again = c.get("/jobs", headers={"If-None-Match": jobs.headers["etag"]})
    assert (again.status_code, again.content) == (304, b"")
    r = c.get("/jobs", headers={"If-None-Match": '"something-else"'})
    assert r.status_code == 200 and r.json() == []
    bad = c.get("/instances", params={"cursor": "bm90LWEtY3Vyc29y"})
    assert (bad.status_code, bad.json()["error"]["code"]) == (422, "invalid_cursor")
    assert c.get("/instances", params={"limit": 0}).status_code == 422
