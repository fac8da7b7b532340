"""The shells: `danlu advise/compare/prices` (real CLI) and POST /api/v1/advice (real HTTP app)."""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from danlu.api import errors
from danlu.api.routers.advice import router
from danlu.cli.main import app as cli_app
from tests.fakes import Offer, platform_offer

CONTRACT = [
    "advise",
    "--params",
    "7e9",
    "--task",
    "finetune",
    "--precision",
    "bf16",
    "--optimizer",
    "adamw",
    "--tokens",
    "1e9",
    "--json",
]


def _api(offers: list[Offer]) -> TestClient:
    app = FastAPI()
    errors.install(app)
    app.include_router(router, prefix="/api/v1")
    app.state.platform_offers = lambda: offers
    return TestClient(app)


def test_advise_contract_in_a_real_subprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {k: v for k, v in __import__("os").environ.items() if k != "DANLU_URL"}
    out = subprocess.run(
        [sys.executable, "-m", "danlu.cli.main", *CONTRACT],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    options = json.loads(out.stdout)
    assert "source: local" in out.stderr
    for o in options:
        assert {"gpu_model", "gpu_count", "fits", "memory_gb", "hours", "cost", "provider", "plan"} <= set(o)
        assert isinstance(o["fits"], bool)
        Decimal(o["cost"])
    fitting = [o for o in options if o["fits"]]
    assert options[0]["fits"]
    assert Decimal(options[0]["cost"]) == min(Decimal(o["cost"]) for o in fitting if o["currency"] == "USD")


def test_compare_contract_and_bad_input_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DANLU_URL", raising=False)
    runner = CliRunner()
    res = runner.invoke(cli_app, ["compare", "--gpu", "A100", "--hours", "10", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert rows and {"provider", "region", "gpu_model", "price_per_hour", "total", "spot", "as_of"} <= set(rows[0])
    bad = runner.invoke(cli_app, ["advise", "--params", "7e9", "--json"])
    assert bad.exit_code != 0 and "missing_work" in bad.stderr
    plan = runner.invoke(cli_app, ["advise", "plan", "--gpu", "A100-80GB", "--hours-per-day", "20", "--json"])
    assert plan.exit_code == 0 and json.loads(plan.stdout)["best"] == "hourly"  # no packages known: none priced
    assert json.loads(plan.stdout)["discount_source"].startswith("none")
    args = ["advise", "plan", "--gpu", "A100-80GB", "--hours-per-day", "20", "--discount", "package-month=30", "--json"]
    plan = runner.invoke(cli_app, args)
    assert plan.exit_code == 0 and json.loads(plan.stdout)["best"] == "package-month", plan.output


def test_advise_buy_writes_an_svg_chart(tmp_path: Path) -> None:
    svg = tmp_path / "c.svg"
    res = CliRunner().invoke(
        cli_app,
        ["advise", "buy", "--gpu", "A100-80GB", "--purchase-price", "15000", "--rent-rate", "1.50", "--svg", str(svg)],
    )
    assert res.exit_code == 0, res.output
    assert "break-even utilisation" in res.stdout and "* buy" in res.stdout
    assert svg.read_text().startswith("<svg") and svg.read_text().count("<polyline") == 2


def test_server_configured_but_unreachable_is_an_error_not_a_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DANLU_URL", "http://127.0.0.1:9")
    res = CliRunner().invoke(cli_app, CONTRACT)
    assert res.exit_code != 0 and "server_unreachable" in res.stderr and res.stdout == ""


def test_advise_via_server_includes_platform_offers(monkeypatch: pytest.MonkeyPatch) -> None:
    client = _api([platform_offer("A100-80GB", 900, "CNY", free=8, total=8)])
    seen: dict[str, Any] = {}

    def fake_post(url: str, json: dict[str, Any], headers: dict[str, str], timeout: float) -> Any:
        seen.update(url=url, auth=headers["Authorization"])
        return client.post(url.split("127.0.0.1:8000", 1)[1], json=json)

    monkeypatch.setattr(httpx, "post", fake_post)
    monkeypatch.setenv("DANLU_URL", "http://127.0.0.1:8000")
    monkeypatch.setenv("DANLU_TOKEN", "tok")
    res = CliRunner().invoke(cli_app, CONTRACT)
    assert res.exit_code == 0, res.output
    assert seen == {"url": "http://127.0.0.1:8000/api/v1/advice", "auth": "Bearer tok"}
    assert "source: server" in res.stderr and "1 platform offer" in res.stderr
    options = json.loads(res.stdout)
    assert options[0]["provider"] == "this platform" and options[0]["currency"] == "CNY"


def test_advise_says_how_to_rent_or_resize_onto_the_best_option_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26, item 3: the advisor's answer leads to the rental — the command that rents the cheapest fitting
    option on this platform, or with ``--resize ID`` the one that starts a stopped rental on it."""
    client = _api([platform_offer("A100-80GB", 900, "CNY", free=8, total=8)])
    monkeypatch.setattr(httpx, "post", lambda url, json, headers, timeout: client.post("/api/v1/advice", json=json))
    monkeypatch.setenv("DANLU_URL", "http://127.0.0.1:8000")
    monkeypatch.setenv("DANLU_TOKEN", "tok")
    ask = ["advise", "--params", "7e9", "--task", "finetune", "--tokens", "1e8"]
    res = CliRunner().invoke(cli_app, [*ask, "--json"])
    here = [o for o in json.loads(res.stdout) if o["on_this_platform"] and o["fits"] and o["plan"] == "on-demand"]
    assert here and all(o["provider"] == "this platform" for o in here)
    best = here[0]
    assert best["gpu_count"] > 1  # 7e9 fully fine-tuned needs two 80 GB cards: "more GPUs?" answered with a count
    shape = f"--gpu A100-80GB --count {best['gpu_count']}"
    res = CliRunner().invoke(cli_app, [*ask, "--resize", "i-0123456789"])
    assert res.exit_code == 0, res.output
    assert f"danlu start i-0123456789 {shape}" in res.stdout.replace("\n", "")
    res = CliRunner().invoke(cli_app, ask)
    assert f"danlu rent {shape}" in res.stdout.replace("\n", "")
    monkeypatch.delenv("DANLU_URL")
    res = CliRunner().invoke(cli_app, [*ask, "--resize", "i-0123456789"])
    assert res.exit_code != 0 and "invalid_resize" in res.stderr


def test_api_advice_errors_are_typed() -> None:
    client = _api([])
    ok = client.post("/api/v1/advice", json={"model": "llama-7b", "tokens": 1e8, "deadline_hours": 24})
    assert ok.status_code == 200
    body = ok.json()
    assert body["source"].startswith("server: 0 platform offer") and body["catalog_snapshot"] == "2026-12-02"
    assert all(o["hours"] <= 24 for o in body["options"])
    bad = client.post("/api/v1/advice", json={"params": 7e9, "tokens": 1e9, "precision": "fp8"})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_precision"
    cmp = client.get("/api/v1/advice/compare", params={"gpu": "H100", "hours": 2})
    assert cmp.status_code == 200 and cmp.json()[0]["gpu_model"].startswith("H100")
    plan = client.post("/api/v1/advice/plan", json={"gpu": "T4", "hours_per_day": 1, "days_per_week": 1})
    assert plan.status_code == 200 and plan.json()["best"] == "hourly"
    buy = client.post("/api/v1/advice/buy", json={"gpu": "RTX-4090", "purchase_price": "1800.00"})
    assert buy.status_code == 200 and len(buy.json()["cumulative"]) == 37


def test_gpu_counts_take_gpus_and_count_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """`danlu run` said --gpus and `danlu compare`/`rent` said --count: a newcomer typing
    `danlu compare --gpu RTX-A6000 --gpus 4` got "No such option". Both spellings work everywhere."""
    monkeypatch.delenv("DANLU_URL", raising=False)
    runner = CliRunner()
    both = [
        runner.invoke(cli_app, ["compare", "--gpu", "RTX-A6000", flag, "4", "--json"]) for flag in ("--gpus", "--count")
    ]
    assert [r.exit_code for r in both] == [0, 0], [r.output for r in both]
    assert json.loads(both[0].stdout) == json.loads(both[1].stdout)
    assert json.loads(both[0].stdout)[0]["instance_type"] == "gpu_4x_a6000"
    for command in (["rent"], ["run"], ["hold", "buy"], ["advise", "plan"]):
        help_text = runner.invoke(cli_app, [*command, "--help"]).output
        assert "--gpus" in help_text and "--count" in help_text, command


def test_the_operators_tariffs_become_one_off_peak_window_the_one_saving_most_a_week() -> None:
    from decimal import Decimal

    from danlu.advisor.plans import offpeak_window

    night = (7, "23:00", "07:00", Decimal("0.5"), [])  # wraps midnight: 8 h a day, 28 h saved a week
    weekend = (2, "00:00", "00:00", Decimal("0.7"), ["on-demand"])  # whole days: 48 h × 0.3 = 14.4 h
    spot_only = (7, "00:00", "12:00", Decimal("0.1"), ["interruptible"])  # not the on-demand price
    dearer = (7, "12:00", "18:00", Decimal("1.5"), [])  # a surcharge is not off-peak
    assert offpeak_window([weekend, night, spot_only, dearer]) == (Decimal("50"), 8.0)
    assert offpeak_window([weekend]) == (Decimal("30"), 48 / 7)
    assert offpeak_window([spot_only, dearer]) is None and offpeak_window([]) is None
