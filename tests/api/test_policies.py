"""One authorization module (issue 27, item 3; danlu.accounts.policies): every route of the API declares the
policy a caller must meet — the operator's token, a person's, a socket's credentials checked on its connection,
this machine for /metrics, or nobody in particular — and a route that declares none fails here, so a new route
cannot be left open by forgetting. Which routes are open to anyone is a list in this test: making one public is
a visible decision. What each policy means is tested where it is enforced: tests/api/test_tenant_matrix.py calls
every OPERATOR route as a person (403) and every route naming an object as a stranger (404)."""

from __future__ import annotations

import pytest
from fastapi.routing import APIRoute, APIWebSocketRoute, iter_route_contexts
from starlette.routing import Mount, Route, WebSocketRoute

from danlu.accounts.policies import Policy
from danlu.api.deps import route_policy
from danlu.console.web import ConsoleRoute
from danlu.context import Platform
from danlu.server.app import create_app

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # the route table, not the data

PUBLIC = {
    "GET /healthz",
    "GET /readyz",
    "GET /docs",
    "GET /redoc",
    "GET /docs-assets/redoc.standalone.js",
    "POST /api/v1/advice",
    "GET /api/v1/advice/compare",
    "POST /api/v1/advice/plan",
    "POST /api/v1/advice/buy",
}
# Routes outside FastAPI's (they check who is calling themselves, or serve files anyone may read).
OTHERS = {
    "/openapi.json": "the API's description: public",
    "/p/{instance_id}/{port}": "the port proxy: each request is checked by danlu.access.service (a person or a link)",
    "/p/{instance_id}/{port}/{path:path}": "the port proxy, as above",
    "/pa/{instance_id}/{port}": "the port proxy (whole path), as above",
    "/pa/{instance_id}/{port}/{path:path}": "the port proxy (whole path), as above",
    "/docs-assets": "the documentation pages' script and styles: public",
    "/console-assets": "the console's script, styles and vendored xterm.js: public",
}


def test_every_route_declares_one_policy_and_the_open_ones_are_listed(platform: Platform) -> None:
    app = create_app(platform)
    policies: dict[str, Policy | None] = {}
    others: set[str] = set()
    for ctx in iter_route_contexts(app.routes):
        route = ctx.original_route
        if isinstance(route, ConsoleRoute):
            continue  # the console's pages: a signed-in page context each (tests/console, the tenant matrix)
        if isinstance(route, APIRoute | APIWebSocketRoute):
            for method in sorted(ctx.methods or {"WS"}):
                policies[f"{method} {ctx.path}"] = route_policy(route.dependant)
        elif isinstance(route, Route | WebSocketRoute | Mount):
            others.add(str(route.path))
        else:
            raise AssertionError(f"{route!r}: a kind of route this test does not know")
    undeclared = sorted(k for k, v in policies.items() if v is None)
    assert undeclared == [], (
        "routes without exactly one policy: depend on CurrentUser or AdminUser, or declare "
        f"dependencies=[Public | ByConnection | Scraper] (danlu.api.deps): {undeclared}"
    )
    assert {k for k, v in policies.items() if v is Policy.PUBLIC} == PUBLIC
    assert {k for k, v in policies.items() if v is Policy.SCRAPER} == {"GET /metrics"}
    sockets = {k for k in policies if k.startswith("WS ")}
    assert sockets and all(policies[k] is Policy.PERSON for k in sockets)
    assert sum(v is Policy.OPERATOR for v in policies.values()) >= 30  # /admin/… and the operator's lists
    assert others == set(OTHERS), others ^ set(OTHERS)


def test_a_route_without_a_policy_is_found(platform: Platform) -> None:
    """The check itself: a route added with no dependency, or with two declarations, has no single policy."""
    from fastapi import FastAPI

    from danlu.api.deps import Public, Scraper

    app = FastAPI()

    @app.get("/forgotten")
    def forgotten() -> None: ...

    @app.get("/both", dependencies=[Public, Scraper])
    def both() -> None: ...

    found = {r.path: route_policy(r.dependant) for r in app.routes if isinstance(r, APIRoute)}
    assert found == {"/forgotten": None, "/both": None}
