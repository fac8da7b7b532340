"""The advice endpoints carry the price catalog's row facts (issue 11) over HTTP, through the real app:
each row's ``source``, ``source_label``, ``as_of`` and ``outlier``, as the in-process service returns
them; ``include_outliers`` (default false) on compare, advice, plan and buy; a bad value is the usual 422."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from danlu.advisor import service
from danlu.cli.main import app as cli_app
from danlu.core.clock import SystemClock
from danlu.server.app import create_app
from tests.conftest import make_platform

warnings.filterwarnings("ignore", message=".*httpx2.*")

# Outliers in the bundled catalog (docs/advisor.md): Dataoorts A100-80GB $0.55 and H100 $0.69.
INFERENCE = {"params": 1e9, "task": "inference", "tokens": 1e6}


@pytest.fixture(autouse=True)
def _bundled_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DANLU_PRICES_CSV", raising=False)
    monkeypatch.setenv("DANLU_HOME", str(tmp_path / "home"))  # no imported catalog: the bundled one


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    folder: Path = tmp_path_factory.mktemp("advice_http")
    p, token = make_platform(f"sqlite:///{folder / 'danlu.db'}", folder / "data", SystemClock())
    with TestClient(create_app(p), headers={"Authorization": f"Bearer {token}"}) as c:
        yield c
    p.db.engine.dispose()


def _assert_dated_and_sourced(row: dict[str, Any]) -> None:
    assert row["source"] and row["source_label"], row
    if row["provider"] == "this platform":
        assert row["as_of"] is None and row["source"] == "this platform"
    else:
        date.fromisoformat(row["as_of"])
        assert row["source_label"] in {"FSDL cloud-gpus", "SkyPilot lambda", "SkyPilot gcp", "SkyPilot vast"}, row


@pytest.mark.parametrize("gpu", ["A100-80GB", "H100"])
def test_compare_rows_carry_source_and_date_and_leave_outliers_out_by_default(client: TestClient, gpu: str) -> None:
    r = client.get("/api/v1/advice/compare", params={"gpu": gpu, "hours": 2})
    assert r.status_code == 200, r.text
    rows = r.json()
    assert rows and not any(row["outlier"] for row in rows)
    for row in rows:
        _assert_dated_and_sourced(row)
    assert len({row["as_of"] for row in rows}) > 1  # each row its own date, not one per list
    assert rows == service.compare(gpu, hours=2)  # what the in-process service returns, field for field


@pytest.mark.parametrize(("gpu", "provider"), [("A100-80GB", "Dataoorts"), ("H100", "Dataoorts")])
def test_compare_include_outliers_ranks_and_flags_them(client: TestClient, gpu: str, provider: str) -> None:
    r = client.get("/api/v1/advice/compare", params={"gpu": gpu, "hours": 2, "include_outliers": "true"})
    assert r.status_code == 200, r.text
    rows = r.json()
    flagged = [row for row in rows if row["outlier"]]
    assert flagged and {row["provider"] for row in flagged} == {provider}
    assert rows[0]["outlier"]  # far below the others: ranked first by total, and marked
    assert rows == service.compare(gpu, hours=2, include_outliers=True)
    default = client.get("/api/v1/advice/compare", params={"gpu": gpu, "hours": 2}).json()
    assert [row for row in rows if not row["outlier"]] == default


def test_advice_options_carry_source_date_and_the_outlier_flag(client: TestClient) -> None:
    plain = client.post("/api/v1/advice", json={**INFERENCE, "gpu": "H100"})
    assert plain.status_code == 200, plain.text
    body = plain.json()
    assert body["options"] and not any(o["outlier"] for o in body["options"])
    assert body["outliers_left_out"] >= 1 and "1/3" in body["outlier_note"]
    for o in body["options"]:
        _assert_dated_and_sourced(o)
    sources = {o["source_label"] for o in body["options"]}
    assert {"FSDL cloud-gpus", "SkyPilot lambda"} <= sources

    wide = client.post("/api/v1/advice", json={**INFERENCE, "gpu": "H100", "include_outliers": True}).json()
    flagged = [o for o in wide["options"] if o["outlier"]]
    assert flagged and all(o["provider"] == "Dataoorts" for o in flagged)
    assert wide["outliers_left_out"] == 0
    for o in wide["options"]:
        _assert_dated_and_sourced(o)


def test_plan_and_buy_take_include_outliers_for_the_public_rate(client: TestClient) -> None:
    profile = {"gpu": "H100-80GB", "hours_per_day": 2, "days_per_week": 5}
    plain = client.post("/api/v1/advice/plan", json=profile).json()
    wide = client.post("/api/v1/advice/plan", json={**profile, "include_outliers": True}).json()
    assert "OUTLIER" not in plain["rate_source"] and "OUTLIER" in wide["rate_source"], (plain, wide)
    assert float(wide["hourly_rate"]) < float(plain["hourly_rate"])

    buy = {"gpu": "H100-80GB", "purchase_price": "25000"}
    plain = client.post("/api/v1/advice/buy", json=buy).json()
    wide = client.post("/api/v1/advice/buy", json={**buy, "include_outliers": True}).json()
    assert "OUTLIER" not in plain["rent_rate_source"] and "OUTLIER" in wide["rent_rate_source"], (plain, wide)
    assert wide["rent_rate"] == "0.69"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/api/v1/advice/compare?gpu=H100&include_outliers=maybe", None),
        ("POST", "/api/v1/advice", {**INFERENCE, "include_outliers": "yes"}),
        ("POST", "/api/v1/advice", {**INFERENCE, "include_outliers": 1}),
        ("POST", "/api/v1/advice/plan", {"gpu": "T4", "hours_per_day": 1, "include_outliers": "true"}),
        ("POST", "/api/v1/advice/buy", {"gpu": "T4", "purchase_price": "900", "include_outliers": None}),
    ],
)
def test_a_bad_include_outliers_is_the_usual_422(client: TestClient, method: str, path: str, body: object) -> None:
    r = client.request(method, path, json=body)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_request" and "include_outliers" in err["message"], err


def test_the_schema_documents_the_new_fields(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    for model in ("OptionOut", "CompareRow"):
        props = schemas[model]["properties"]
        for field in ("source", "source_label", "as_of", "outlier"):
            assert props[field].get("description"), (model, field)
    for model in ("AdviceRequest", "PlanRequest", "BuyRequest"):
        prop = schemas[model]["properties"]["include_outliers"]
        assert prop["default"] is False and prop["description"], model


def test_cli_include_outliers_against_a_server(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI with DANLU_URL set sends include_outliers only when asked; the server now takes it."""

    def fake_post(url: str, json: dict[str, Any], headers: dict[str, str], timeout: float) -> Any:
        return client.post(url.split("127.0.0.1:8000", 1)[1], json=json)

    monkeypatch.setattr(httpx, "post", fake_post)
    monkeypatch.setenv("DANLU_URL", "http://127.0.0.1:8000")
    args = ["advise", "--params", "1e9", "--task", "inference", "--tokens", "1e6", "--gpu", "H100", "--json"]
    res = CliRunner().invoke(cli_app, [*args, "--include-outliers"])
    assert res.exit_code == 0, res.output
    options = json.loads(res.stdout)
    assert any(o["outlier"] for o in options) and all(o["source"] for o in options)
    res = CliRunner().invoke(cli_app, args)
    assert res.exit_code == 0, res.output
    assert not any(o["outlier"] for o in json.loads(res.stdout))
    plan = ["advise", "plan", "--gpu", "H100-80GB", "--hours-per-day", "2", "--include-outliers", "--json"]
    res = CliRunner().invoke(cli_app, plan)
    assert res.exit_code == 0, res.output
    assert "OUTLIER" in json.loads(res.stdout)["rate_source"]


def test_api_advice_options_carry_every_field_the_service_gives(client: TestClient) -> None:
    """The API's option model once dropped `scaling_efficiency` and `interconnect`, so the CLI through a
    server (and every API user) never saw which per-GPU efficiency an estimate assumed."""
    from danlu.advisor.workload import build_workload

    finetune = {"params": 7e9, "task": "finetune", "precision": "bf16", "optimizer": "adamw", "tokens": 1e9}
    body = client.post("/api/v1/advice", json={**finetune, "gpu": "H100-80GB"}).json()
    local = service.advise(build_workload(**finetune), today=date.today()).options[0].to_dict()
    assert body["options"] and all(set(o) == set(local) for o in body["options"]), set(local) - set(body["options"][0])
    eight = next(o for o in body["options"] if o["gpu_count"] == 8)
    assert 0 < eight["scaling_efficiency"] < 1 and eight["interconnect"].startswith("NVLink")
    one = next(o for o in body["options"] if o["gpu_count"] == 1)
    assert one["scaling_efficiency"] == 1.0
