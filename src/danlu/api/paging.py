"""Cursor pages and cheap polling for the API's lists (issue 12).

- **Pages.** Every list takes ``limit`` (1–1000, default 1000) and ``cursor``. A page with more rows
  after it sets ``X-Next-Cursor`` and ``Link: <…>; rel="next"``: pass the cursor back as
  ``?cursor=`` for the next page. A cursor is the sort key of the last row returned, so rows added
  or removed meanwhile neither repeat nor skip the others. Each of these lists is already scoped to
  one caller (their own instances, jobs, tokens …, or the operator's inventory) and is cut into
  pages in its sort order after it is read. The ledger, the one list that grows without bound,
  pages in SQL instead (``?before=``, danlu.billing.service.statement).
- **ETags.** Every list's answer carries an ``ETag`` (a hash of its bytes). A request sending that
  value in ``If-None-Match`` gets ``304 Not Modified`` with no body, so a client polling every
  second pays for the bytes only when something changed.

A route opts in with ``**paged("field", ...)`` in its decorator, on a router whose ``route_class``
is :class:`ListRoute`; the route itself still returns its whole list.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Query, Request, Response
from fastapi.routing import APIRoute

from danlu.core.errors import InvalidInput

MAX_PAGE = 1000
_MARK = "x-danlu-page"
_OTHER_LIST = "this cursor belongs to another list; start again without it"


async def _page_query(
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="At most this many rows (a page)")] = MAX_PAGE,
    cursor: Annotated[
        str | None,
        Query(max_length=400, pattern=r"^[A-Za-z0-9_\-=]+$", description="The previous page's X-Next-Cursor header"),
    ] = None,
) -> None:
    """Declares and validates ``limit`` and ``cursor`` (ListRoute reads them back)."""


def paged(*key: str, descending: bool = False) -> dict[str, Any]:
    """Decorator keywords for a list route: its rows are sorted by the fields ``key`` (the last one
    unique) and paged by cursor."""
    return {
        "dependencies": [Depends(_page_query)],
        "openapi_extra": {_MARK: {"key": list(key), "descending": descending}},
    }


def _encode(key: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(key, separators=(",", ":")).encode()).decode()


def _decode(cursor: str, width: int) -> list[Any]:
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, UnicodeDecodeError):
        value = None
    if not isinstance(value, list) or len(value) != width:
        raise InvalidInput("invalid_cursor", "this cursor is not one this list gave; use its X-Next-Cursor header")
    return value


def _sort_key(fields: list[str]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    # None sorts first, as "" would: (is-not-None, value) keeps mixed rows comparable.
    return lambda row: tuple((row.get(f) is not None, row.get(f) if row.get(f) is not None else 0) for f in fields)


def cut(rows: list[dict[str, Any]], fields: list[str], descending: bool, limit: int, cursor: str | None) -> tuple[
    list[dict[str, Any]], str | None
]:  # fmt: skip
    """The page of ``rows`` after ``cursor`` and the next cursor (None: nothing after it). Pure."""
    key = _sort_key(fields)
    ordered = sorted(rows, key=key, reverse=descending)
    if cursor is not None:
        raw = _decode(cursor, len(fields))
        after = tuple((v is not None, v if v is not None else 0) for v in raw)
        try:
            ordered = [r for r in ordered if (key(r) < after if descending else key(r) > after)]
        except TypeError:
            raise InvalidInput("invalid_cursor", _OTHER_LIST) from None
    out = ordered[:limit]
    nxt = _encode([out[-1].get(f) for f in fields]) if len(ordered) > limit else None
    return out, nxt


def etag_of(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


# The last bodies answered and their ETags: a memoised rendering hands out the same bytes object until
# it changes, so its hash is taken once per change, not per request (the object is held here, so an
# id is never reused while its entry lives). Small bodies only, and at most _TAGS_BYTES of them: a
# route that builds a new body per request (a long job history, a folder's entries) must not make
# this hold its answers.
_TAGS: dict[int, tuple[bytes, str]] = {}
_TAGS_BYTES = 16 * 1024 * 1024
_TAG_MAX_BODY = 1024 * 1024
_held = 0


def _tag(body: bytes) -> str:
    global _held
    hit = _TAGS.get(id(body))
    if hit is not None and hit[0] is body:
        return hit[1]
    tag = etag_of(body)
    if len(body) <= _TAG_MAX_BODY:
        if _held + len(body) > _TAGS_BYTES or len(_TAGS) >= 256:
            _TAGS.clear()
            _held = 0
        _TAGS[id(body)] = (body, tag)
        _held += len(body)
    return tag


def whole(body: bytes, if_none_match: str | None) -> Response | None:
    """The answer to a first page asked without ``limit`` or ``cursor`` (ETag, or 304 when the
    client has these bytes), or None when the list is longer than a page (:class:`ListRoute` cuts it)."""
    if body.count(b"{") > MAX_PAGE:  # may hold more rows than a page: cut, never hashed whole
        return None
    tag = _tag(body)
    headers = {"ETag": tag}
    if if_none_match is not None and _matches(if_none_match, tag):
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)


def not_modified(request: Request, tag: str) -> bool:
    return _matches(request.headers.get("if-none-match", ""), tag)


def _matches(seen: str, tag: str) -> bool:
    return seen.strip() == "*" or tag in (t.strip() for t in seen.split(","))


class ListRoute(APIRoute):
    """Pages and ETags for the routes marked with :func:`paged`; other routes pass through."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        mark = (self.openapi_extra or {}).get(_MARK)
        if mark is None:
            return handler
        fields, descending = list(mark["key"]), bool(mark["descending"])

        async def route(request: Request) -> Response:
            response = await handler(request)
            if response.status_code != 200 or not response.headers.get("content-type", "").startswith(
                "application/json"
            ):
                return response
            body = response.body if isinstance(response.body, bytes) else bytes(response.body)
            limit = int(request.query_params.get("limit", MAX_PAGE))
            cursor = request.query_params.get("cursor")
            headers = {k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "content-type")}
            if cursor is None and limit == MAX_PAGE and not headers:
                answer = whole(body, request.headers.get("if-none-match"))
                if answer is not None:
                    return answer
            if cursor is not None or body.count(b"{") > limit:  # may hold more rows than a page
                rows = json.loads(body)
                if isinstance(rows, list) and (cursor is not None or len(rows) > limit):
                    out, nxt = cut(rows, fields, descending, limit, cursor)
                    body = json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode()
                    if nxt is not None:
                        headers["X-Next-Cursor"] = nxt
                        headers["Link"] = f'<{request.url.include_query_params(cursor=nxt)}>; rel="next"'
            tag = etag_of(body)
            headers["ETag"] = tag
            if not_modified(request, tag):
                return Response(status_code=304, headers=headers)
            return Response(body, media_type="application/json", headers=headers)

        return route
