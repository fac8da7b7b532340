"""The schema tells the truth (issue 8): limits, error statuses and the auth scheme are in the
OpenAPI document; 405 names what is allowed; /docs and /redoc work offline."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from danlu.core.clock import SystemClock
from danlu.server.app import create_app
from tests.conftest import make_platform

warnings.filterwarnings("ignore", message=".*httpx2.*")


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    folder: Path = tmp_path_factory.mktemp("schema")
    p, token = make_platform(f"sqlite:///{folder / 'danlu.db'}", folder / "data", SystemClock())
    with TestClient(create_app(p), headers={"Authorization": f"Bearer {token}"}) as c:
        yield c
    p.db.engine.dispose()


@pytest.fixture(scope="module")
def doc(client: TestClient) -> dict[str, Any]:
    r = client.get("/openapi.json")
    assert r.status_code == 200
    return dict(r.json())


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in doc["paths"].items():
        for method, op in item.items():
            yield method.upper(), path, op


def schema_of(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(doc["components"]["schemas"][name])


def test_every_operation_documents_its_errors_with_the_error_body(doc: dict[str, Any]) -> None:
    error_ref = {"$ref": "#/components/schemas/ErrorBody"}
    body = schema_of(doc, "ErrorBody")
    assert body["required"] == ["error"]
    assert set(schema_of(doc, "ErrorDetail")["required"]) == {"code", "message"}
    api = [(m, p, op) for m, p, op in operations(doc) if p.startswith("/api/v1/")]
    assert len(api) >= 30
    for method, path, op in api:
        responses = op["responses"]
        label = f"{method} {path}"
        for status in ("401", "422"):
            assert status in responses, label
        if "/admin/" in path:
            assert "403" in responses, label
        if "{" in path and "{gpu_model}" not in path:  # an object's id or name (a model is 422 if unknown)
            assert "404" in responses, label
        if "requestBody" in op:
            assert "400" in responses, label  # malformed JSON
        for status, response in responses.items():
            if status.startswith(("4", "5")):
                assert response["content"]["application/json"]["schema"] == error_ref, (label, status)
        assert op.get("security") == [{"bearer": []}], label
    assert "HTTPValidationError" not in doc["components"]["schemas"]  # FastAPI's default 422 body is not ours


def test_statuses_the_services_raise_are_documented(doc: dict[str, Any]) -> None:
    def statuses(method: str, path: str) -> set[str]:
        return set(doc["paths"][path][method.lower()]["responses"])

    assert {"402", "403", "409", "429", "503"} <= statuses("POST", "/api/v1/instances")
    assert {"402", "403", "409", "429", "503"} <= statuses("POST", "/api/v1/instances/{instance_id}/start")
    assert {"402", "404", "429", "503"} <= statuses("POST", "/api/v1/jobs")
    assert "409" in statuses("POST", "/api/v1/jobs/{job_id}/cancel")
    assert "409" in statuses("POST", "/api/v1/admin/users")
    assert "409" in statuses("POST", "/api/v1/admin/users/{name}/topup")
    assert "409" in statuses("DELETE", "/api/v1/admin/images/{name}")


def test_a_bearer_scheme_is_declared(doc: dict[str, Any], client: TestClient) -> None:
    assert doc["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": doc["components"]["securitySchemes"]["bearer"]["description"],
    }
    # Declared only: our own 401 body and codes still answer.
    r = client.get("/api/v1/me", headers={"Authorization": ""})
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_token"
    r = client.get("/api/v1/me", headers={"Authorization": "Basic abc"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_token"
    r = client.get("/api/v1/me", headers={"Authorization": "Bearer dl_wrong"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_token"
    # The Authorization header is not a parameter of its own (it is the scheme's).
    for method, path, op in operations(doc):
        names = [q["name"].lower() for q in op.get("parameters", [])]
        assert "authorization" not in names, f"{method} {path}"


def param(doc: dict[str, Any], method: str, path: str, name: str) -> dict[str, Any]:
    for q in doc["paths"][path][method.lower()].get("parameters", []):
        if q["name"] == name:
            s = q["schema"]
            return dict(next((a for a in s.get("anyOf", []) if a.get("type") != "null"), s))
    raise AssertionError(f"{method} {path} has no parameter {name}")


def prop(doc: dict[str, Any], model: str, name: str) -> dict[str, Any]:
    s = schema_of(doc, model)["properties"][name]
    return dict(next((a for a in s.get("anyOf", []) if a.get("type") != "null"), s))


def test_limits_are_stated(doc: dict[str, Any]) -> None:
    assert (prop(doc, "RentRequest", "gpu_count")["minimum"], prop(doc, "RentRequest", "gpu_count")["maximum"]) == (
        1,
        1024,
    )
    assert prop(doc, "JobIn", "gpus")["maximum"] == 1024
    assert prop(doc, "JobIn", "est_duration_s")["maximum"] < 2**31
    assert prop(doc, "QuotaIn", "gpus")["maximum"] < 2**31
    assert prop(doc, "JobIn", "gpu_types")["maxItems"] * 10 < 256  # the column is 256 characters
    assert prop(doc, "RentRequest", "name")["maxLength"] == 64
    assert prop(doc, "RentRequest", "command")["maxItems"] == 256
    assert param(doc, "GET", "/api/v1/instances/{instance_id}/logs", "offset")["maximum"] < 2**63
    assert param(doc, "GET", "/api/v1/jobs/{job_id}/logs", "offset")["maximum"] < 2**63
    assert param(doc, "GET", "/api/v1/advice/compare", "hours")["maximum"] <= 1e6
    assert prop(doc, "AdviceRequest", "tokens")["maximum"] <= 1e18
    limit = param(doc, "GET", "/api/v1/ledger", "limit")
    assert (limit["minimum"], limit["maximum"], limit["default"]) == (1, 1000, 100)
    deadline = re.compile(prop(doc, "JobIn", "deadline")["pattern"])
    assert deadline.match("2026-12-03T08:00:00+08:00") and not deadline.match("9999-12-31T23:59:59-14:00")


@pytest.mark.parametrize(
    ("path", "name", "good", "bad"),
    [
        ("/api/v1/instances/{instance_id}", "instance_id", ["i-0a1b2c3d4e", "i-0a1b2c3d4e-2"], ["i-x", "i-0\x00", "x"]),
        ("/api/v1/jobs/{job_id}", "job_id", ["j-0a1b2c3d4e"], ["j-0a1b\x00", "i-0a1b2c3d4e", "j-"]),
        ("/api/v1/admin/users/{name}/topup", "name", ["alice", "a.b-c_d"], ["A", "a", "b\x00", "bob\n", "1ab"]),
        ("/api/v1/admin/images/{name}", "name", ["host", "ubuntu-24.04"], ["Ubuntu", ".x", "a\x00"]),
        ("/api/v1/admin/hosts/{name}", "name", ["local", "gpu-01.lab"], ["-x", "a b", "a\x00"]),
        ("/api/v1/admin/prices/{gpu_model}", "gpu_model", ["T4", "a100_80gb", "rtx 4090"], ["Z9", "T4 ", "t4\x00"]),
    ],
)
def test_id_and_name_patterns(doc: dict[str, Any], path: str, name: str, good: list[str], bad: list[str]) -> None:
    """Ids are ``i-``/``j-`` and hex (scheduling/jobs.py, compute/instances.py); names follow the
    services' rules (accounts/service.py NAME_RE for users); no NUL or control characters."""
    methods = list(doc["paths"][path])
    s = param(doc, methods[0], path, name)
    rx = re.compile(s["pattern"])
    for g in good:
        assert rx.search(g) and "\n" not in g, g
    for b in bad:
        assert not (rx.search(b) and not b.endswith("\n")), b


def test_the_user_name_rule_is_the_services(doc: dict[str, Any]) -> None:
    from danlu.accounts.service import NAME_RE

    assert prop(doc, "UserCreate", "name")["pattern"] == NAME_RE.pattern
    assert param(doc, "POST", "/api/v1/admin/users/{name}/suspend", "name")["pattern"] == NAME_RE.pattern


def test_amounts_are_stated_in_the_deployments_decimal_places(doc: dict[str, Any]) -> None:
    """The test platform is in CNY (2 places): the document says so, though the models accept any
    currency's shape."""
    rx = re.compile(prop(doc, "AmountIn", "amount")["pattern"])
    assert rx.match("12.50") and rx.match("0") and not rx.match("1.234") and not rx.match("-1")
    positive = re.compile(prop(doc, "TopupIn", "amount")["pattern"])
    assert positive.match("0.01") and positive.match("5") and not positive.match("0") and not positive.match("0.00")


def test_405_names_the_allowed_methods(client: TestClient) -> None:
    """Issue 8: 19 operations answered 405 without an ``Allow`` header."""
    for method, path, allowed in [
        ("PATCH", "/api/v1/instances", "GET, POST"),
        ("PUT", "/api/v1/instances/i-0000000000", "GET, DELETE"),
        ("DELETE", "/api/v1/admin/users/bob/topup", "POST"),
        ("POST", "/healthz", "GET"),
    ]:
        r = client.request(method, path)
        assert r.status_code == 405, (method, path)
        assert r.headers["allow"] == allowed, (method, path)
        err = r.json()["error"]
        assert err["code"] == "method_not_allowed" and allowed.split(",")[0] in err["message"]


def test_the_docs_pages_fetch_nothing_from_the_network_at_run_time(client: TestClient) -> None:
    """Issue 28, finding 12: ReDoc's bundle drew its footer logo from cdn.redoc.ly, and Swagger UI
    sends the spec's URL to validator.swagger.io for its badge unless told not to."""
    js = client.get("/docs-assets/redoc.standalone.js")
    assert js.status_code == 200 and "javascript" in js.headers["content-type"] and len(js.content) > 100_000
    assert b"cdn.redoc.ly" not in js.content
    assert b"/docs-assets/favicon.png" in js.content  # the footer's image, served here
    page = client.get("/docs").text
    assert re.search(r'"validatorUrl":\s*null', page), page


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_are_served_offline(client: TestClient, page: str) -> None:
    """/docs and /redoc loaded their scripts from a CDN and were blank offline (issue 8)."""
    r = client.get(page)
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", r.text)
    urls += re.findall(r"""url:\s*['"]([^'"]+)['"]""", r.text)
    assert "http://" not in r.text.replace("http://www.w3.org", "") and "https://" not in r.text, r.text
    scripts = [u for u in urls if u.endswith(".js")]
    assert scripts, urls
    for url in urls:
        assert url.startswith("/"), url
        got = client.get(url)
        assert got.status_code == 200, url
        if url.endswith(".js"):
            assert "javascript" in got.headers["content-type"] and len(got.content) > 100_000, url
        if url.endswith(".css"):
            assert "text/css" in got.headers["content-type"], url
