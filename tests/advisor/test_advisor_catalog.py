"""The price catalog's rows (issue 11): each row dated, newest wins, outliers flagged, every listing
names its source and date, and the H100 PCIe / SXM variants kept apart."""

from __future__ import annotations

import csv
import json
import re
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from danlu.advisor import service
from danlu.advisor.workload import build_workload
from danlu.catalog import prices
from danlu.catalog.gpu_models import gpu_models
from danlu.cli import output
from danlu.cli.main import app as cli_app
from tests.fakes import platform_offer

TODAY = date(2026, 12, 2)
W = build_workload(params=7e9, tokens=1e9)
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
FSDL_SOURCE = "the-full-stack/website"
HEAD = "# test catalog, snapshot 2026-01-01\n" + ",".join(prices.COLUMNS) + "\n"


def _bundled() -> prices.PriceCatalog:
    return prices._load(None, 0)


def _rows(cat: prices.PriceCatalog, provider: str, model: str, gpus: int | None = None) -> list[prices.PriceRow]:
    return [r for r in cat.rows if r.provider == provider and r.gpu_model == model and gpus in (None, r.gpus)]


@pytest.fixture
def own_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Install catalog lines as the operator's file (DANLU_PRICES_CSV) and return the parsed catalog."""

    def install(*lines: str) -> prices.PriceCatalog:
        path = tmp_path / "prices.csv"
        path.write_text(HEAD + "\n".join(lines) + "\n", encoding="utf-8")
        monkeypatch.setenv("DANLU_PRICES_CSV", str(path))
        return prices.price_catalog()

    return install


# 1. each row has its own observation date -------------------------------------------------------


def test_a_price_carried_unchanged_from_an_older_list_keeps_the_older_date() -> None:
    cat = _bundled()
    (stale,) = [r for r in _rows(cat, "Lambda", "A100-40GB", 1) if r.price_per_gpu_hour == Decimal("1.1")]
    assert stale.as_of == date(2022, 8, 4)  # first dated FSDL version holding it; still there on 2025-03-07
    (dataoorts,) = [r for r in _rows(cat, "Dataoorts", "A100-80GB", 1)]
    assert dataoorts.as_of == date(2024, 5, 20)
    fsdl_dates = {r.as_of for r in cat.rows if FSDL_SOURCE in r.source}
    assert len(fsdl_dates) >= 10 and max(fsdl_dates) <= date(2025, 3, 7)
    assert all(r.as_of == date(2026, 12, 2) for r in cat.rows if "skypilot" in r.source)
    # the header says how each date was found, and where only the list's date is known
    assert "first" in cat.attribution and "list" in cat.attribution and "retrieved" in cat.attribution


@pytest.mark.skipif(not (SHARED / "prices" / "fsdl_cloud_gpus_history").is_dir(), reason="no shared/data here")
def test_fsdl_row_dates_are_the_first_dated_version_holding_that_price() -> None:
    """Recompute from the 29 dated FSDL versions: the earliest one from which the row (cloud, GPU type,
    GPUs, name, on-demand and spot price) is present in every later version."""

    def num(s: str | None) -> Decimal | None:
        s = (s or "").replace("$", "").replace(",", "").strip()
        return Decimal(s) if s else None

    Key = tuple[str, str, Decimal | None, str, Decimal | None, Decimal | None]

    def key(r: dict[str, str]) -> Key:
        return (r["Cloud"].strip(), r["GPU Type"].strip(), num(r["GPUs"]), (r["Name"] or "").strip(),
                num(r["On-demand"]), num(r["Spot"]))  # fmt: skip

    versions = []
    for f in sorted((SHARED / "prices" / "fsdl_cloud_gpus_history").glob("cloud-gpus_*.csv")):
        stamp = re.search(r"\d{4}-\d{2}-\d{2}", f.name)
        assert stamp
        with f.open(encoding="utf-8") as fh:
            versions.append((date.fromisoformat(stamp.group(0)), {key(r) for r in csv.DictReader(fh)}))
    first_seen: dict[Key, date] = {}
    for k in versions[-1][1]:
        for d, ks in reversed(versions):
            if k not in ks:
                break
            first_seen[k] = d
    cat = _bundled()
    checked = 0
    for k, d in first_seen.items():
        cloud, _, gpus, name, on_demand, _ = k
        if on_demand is None or gpus is None:
            continue
        per_gpu = (on_demand / gpus).quantize(Decimal("0.00001"))
        match = [
            r
            for r in cat.rows
            if FSDL_SOURCE in r.source
            and r.provider == cloud
            and r.gpus == gpus
            and r.price_per_gpu_hour == per_gpu
            and (not name or r.instance_type == name)
        ]
        if match:
            checked += 1
            assert d in {r.as_of for r in match}, (k, [r.as_of for r in match])
    assert checked > 150


# 2. newest wins ---------------------------------------------------------------------------------


def test_the_newest_row_of_an_instance_wins_and_older_ones_are_kept_but_superseded(own_catalog) -> None:  # type: ignore[no-untyped-def]
    cat = own_catalog(
        "Acme,any,T4,1,0.50,,USD,t4.small,2024-01-01,old list",
        "Acme,any,T4,1,0.40,,USD,t4.small,2025-06-01,new list",
        "Acme,eu,T4,1,0.45,,USD,t4.small,2025-06-01,new list",  # same day, another region: both stand
        "Acme,any,T4,4,0.30,,USD,,2023-01-01,old list",  # no instance named: any 4×T4 instance of Acme
        "Acme,any,T4,4,0.35,,USD,t4.large,2025-06-01,new list",
        "Beta,any,T4,1,0.60,,USD,t4.small,2024-06-01,other",  # another provider: not superseded
        "Gamma,any,T4,1,0.70,,USD,,2024-07-01,one list",  # unnamed rows of one list: two offers, both stand
        "Gamma,any,T4,1,0.80,,USD,,2025-01-01,one list",
    )
    assert len(cat.rows) == 8  # kept in the file
    superseded = {(r.gpus, r.price_per_gpu_hour) for r in cat.rows if r.superseded}
    assert superseded == {(1, Decimal("0.50")), (4, Decimal("0.30"))}
    rows = service.compare("T4", hours=10)
    one = {(r["provider"], r["price_per_hour"]) for r in rows if r["gpus_billed"] == 1}
    assert one == {("Acme", "0.4"), ("Acme", "0.45"), ("Beta", "0.6"), ("Gamma", "0.7"), ("Gamma", "0.8")}
    four = service.compare("T4", hours=10, count=4)
    assert [r["price_per_hour"] for r in four] == ["1.4"]
    opts = service.advise(build_workload(params=1e8, tokens=1e7), today=TODAY, gpu="T4").options
    acme1 = [o for o in opts if o.provider == "Acme" and o.gpu_count == 1]
    assert acme1 and all(o.as_of == "2025-06-01" for o in acme1)
    assert all(o.as_of != "2023-01-01" for o in opts if o.gpu_count == 4)
    assert cat.age_days(date(2026, 1, 1)) == (date(2026, 1, 1) - date(2024, 6, 1)).days  # oldest row in use


def test_bundled_lambda_a100_40gb_shows_its_current_price_not_the_2022_one() -> None:
    cat = _bundled()
    lam = _rows(cat, "Lambda", "A100-40GB", 1)
    assert {r.price_per_gpu_hour for r in lam if r.superseded} == {Decimal("1.1")}
    assert {r.price_per_gpu_hour for r in lam if not r.superseded} == {Decimal("1.99")}
    assert all(
        Decimal(r["price_per_hour"]) != Decimal("1.1")
        for r in service.compare("A100-40GB")
        if r["provider"] == "Lambda"
    )
    opts = service.advise(W, today=TODAY, gpu="A100-40GB").options
    lambda_one = [o for o in opts if o.provider == "Lambda" and o.gpu_count == 1 and o.plan == "on-demand"]
    assert lambda_one and all(o.as_of == "2026-12-02" for o in lambda_one)
    assert lambda_one[0].cost_minor == pytest.approx(lambda_one[0].hours * 199, abs=2)


# 3. outliers ------------------------------------------------------------------------------------


def test_a_price_under_a_third_of_the_other_providers_median_is_an_outlier(own_catalog) -> None:  # type: ignore[no-untyped-def]
    cat = own_catalog(
        "A,any,T4,1,1.00,,USD,a,2025-01-01,s",
        "B,any,T4,1,1.10,,USD,b,2025-01-01,s",
        "B,any,T4,1,9.00,,USD,b,2020-01-01,s",  # superseded: not part of any median
        "C,any,T4,1,0.90,,USD,c,2025-01-01,s",
        "D,any,T4,1,1.20,,USD,d,2025-01-01,s",
        "E,any,T4,1,0.30,,USD,e,2025-01-01,s",  # others' median 1.00: 0.30 < 1/3 → outlier
        "F,any,T4,1,0.34,,USD,f,2025-01-01,s",  # others' median 1.00: 0.34 ≥ 1/3 → not
        "A,any,L4,1,2.00,,USD,a,2025-01-01,s",
        "B,any,L4,1,0.10,,USD,b,2025-01-01,s",  # only one other provider: no median to judge by
    )
    flagged = {(r.provider, r.gpu_model) for r in cat.rows if r.outlier}
    assert flagged == {("E", "T4")}
    assert service.compare("T4")[0]["provider"] == "F"
    shown = service.compare("T4", include_outliers=True)
    assert shown[0]["provider"] == "E" and shown[0]["outlier"] is True
    assert all(r["outlier"] is False for r in shown[1:])


def test_bundled_outliers_are_left_out_by_default_and_marked_when_shown() -> None:
    for gpu, rate in (("A100-80GB", "0.55"), ("H100-80GB", "0.69")):
        rows = service.compare(gpu, hours=10)
        assert rows[0]["provider"] != "Dataoorts" and not any(r["outlier"] for r in rows)
        shown = service.compare(gpu, hours=10, include_outliers=True)
        dat = [r for r in shown if r["provider"] == "Dataoorts"]
        assert shown[0]["provider"] == "Dataoorts" and all(r["outlier"] for r in dat)
        assert Decimal(dat[0]["price_per_hour"]) == Decimal(rate)
        assert service.hourly_rate_for(gpu, [])[0] != Decimal(rate)
        assert service.hourly_rate_for(gpu, [], include_outliers=True)[0] == Decimal(rate)
    opts = service.advise(W, today=TODAY, gpu="A100-80GB").options
    assert "Dataoorts" not in {o.provider for o in opts}
    with_out = service.advise(W, today=TODAY, gpu="A100-80GB", include_outliers=True).options
    assert with_out[0].provider == "Dataoorts" and with_out[0].outlier and with_out[0].to_dict()["outlier"]
    buy = service.buy_advice("A100-80GB", purchase_price="15000")
    assert Decimal(str(buy.to_dict()["rent_rate"])) > Decimal("0.55")
    assert "Dataoorts" not in str(buy.to_dict()["rent_rate_source"])


def test_cli_include_outliers_marks_them_in_the_table_and_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DANLU_URL", raising=False)
    monkeypatch.setattr(output.console, "_width", 250)  # one line per row
    runner = CliRunner()
    plain = runner.invoke(cli_app, ["compare", "--gpu", "A100-80GB", "--hours", "10"])
    assert plain.exit_code == 0 and "Dataoorts" not in plain.stdout
    shown = runner.invoke(cli_app, ["compare", "--gpu", "A100-80GB", "--hours", "10", "--include-outliers"])
    assert shown.exit_code == 0, shown.output
    line = next(ln for ln in shown.stdout.splitlines() if "Dataoorts" in ln)
    assert "outlier" in line.lower()
    adv = runner.invoke(cli_app, ["advise", "--params", "7e9", "--tokens", "1e9", "--gpu", "A100-80GB",
                                  "--include-outliers", "--json"])  # fmt: skip
    assert adv.exit_code == 0, adv.output
    first = json.loads(adv.stdout)[0]
    assert first["provider"] == "Dataoorts" and first["outlier"] is True
    buy = runner.invoke(cli_app, ["advise", "buy", "--gpu", "A100-80GB", "--purchase-price", "15000",
                                  "--include-outliers", "--json"])  # fmt: skip
    assert buy.exit_code == 0, buy.output
    assert json.loads(buy.stdout)["rent_rate"] == "0.55"


# 4. every listing names its source and date -----------------------------------------------------


def test_compare_and_advise_rows_carry_source_and_date(monkeypatch: pytest.MonkeyPatch) -> None:
    for r in service.compare("A100", hours=10):
        assert r["source"] and r["source_label"] and date.fromisoformat(r["as_of"])
    lam = next(r for r in service.compare("H100-80GB") if r["provider"] == "Lambda")
    assert "skypilot" in lam["source"] and lam["source_label"] == "SkyPilot lambda"
    offer = platform_offer("H100-80GB", 2500, "CNY", free=8, total=8)
    opts = service.advise(W, today=TODAY, platform_offers=[offer]).options
    mine = next(o.to_dict() for o in opts if o.provider == "this platform")
    assert mine["source"] == "this platform" and mine["as_of"] is None
    public = next(o.to_dict() for o in opts if o.provider != "this platform")
    assert public["source"] and public["source_label"] and date.fromisoformat(public["as_of"])

    monkeypatch.delenv("DANLU_URL", raising=False)
    monkeypatch.setattr(output.console, "_width", 250)  # one line per row
    runner = CliRunner()
    table = runner.invoke(cli_app, ["compare", "--gpu", "A100-40GB", "--hours", "10"])
    assert table.exit_code == 0, table.output
    assert "source" in table.stdout and "SkyPilot lambda" in table.stdout and "FSDL cloud-gpus" in table.stdout
    adv = runner.invoke(cli_app, ["advise", "--params", "7e9", "--tokens", "1e9", "--top", "5"])
    assert adv.exit_code == 0, adv.output
    assert "price from" in adv.stdout and re.search(r"(FSDL|SkyPilot) \S+ \d{4}-\d{2}-\d{2}", adv.stdout)
    js = json.loads(runner.invoke(cli_app, ["compare", "--gpu", "T4", "--json"]).stdout)
    assert {"source", "source_label", "as_of", "outlier"} <= set(js[0])


# 5. H100 PCIe and SXM ---------------------------------------------------------------------------


def test_h100_variants_are_distinct_rows_with_the_spec_tables_figures() -> None:
    models = gpu_models()
    sxm, pcie = models["H100-80GB"], models["H100-PCIE"]
    assert (sxm.fp32_tflops, sxm.tensor_tflops, sxm.mem_bw_gbps, sxm.tdp_w) == (66.91, 989.4, 3350, 700)
    assert (pcie.fp32_tflops, pcie.tensor_tflops, pcie.mem_bw_gbps, pcie.tdp_w) == (51.22, 756, 2040, 350)
    assert "SXM5" in sxm.source and "PCIe" in pcie.source
    spec_file = SHARED / "specs" / "gpu_specs_subset_from_epoch.csv"
    if spec_file.is_file():
        with spec_file.open(encoding="utf-8") as fh:
            spec = {r["gpu"]: r for r in csv.DictReader(fh)}
        for model, name in ((sxm, "H100 SXM5 80GB"), (pcie, "H100 PCIe")):
            row = spec[name]
            assert model.fp32_tflops == float(row["fp32_tflops"])
            assert model.tensor_tflops == float(row["tensor_fp16_bf16_tflops_dense"])
            assert model.mem_bw_gbps == float(row["mem_bw_gbps"]) and model.tdp_w == float(row["tdp_w"])
            assert model.vram_gb == int(row["memory_gb"])


def test_each_h100_price_row_maps_to_the_variant_its_instance_names() -> None:
    cat = _bundled()
    # FSDL's Lambda "H100 (80 GB)" is 1 GPU, 26 vCPUs, 200 GB: SkyPilot's gpu_1x_h100_pcie, not the SXM5 one
    (lam,) = [r for r in cat.rows if r.provider == "Lambda" and FSDL_SOURCE in r.source and "H100" in r.gpu_model]
    assert (lam.gpu_model, lam.instance_type, lam.price_per_gpu_hour) == (
        "H100-PCIE",
        "gpu_1x_h100_pcie",
        Decimal("1.99"),
    )
    assert lam.superseded  # SkyPilot's 2026 list prices the same instance at 3.29
    for r in cat.rows:
        itype = r.instance_type.lower()
        if "pcie" in itype and "h100" in itype:
            assert r.gpu_model == "H100-PCIE", r
        if "h100" in itype and ("sxm" in itype or "hgx" in itype):
            assert r.gpu_model == "H100-80GB", r
    nimbus = {
        (r.gpu_model, r.price_per_gpu_hour) for r in cat.rows if r.provider == "NovoNimbus" and "H100" in r.gpu_model
    }
    assert nimbus == {("H100-80GB", Decimal("4.78")), ("H100-PCIE", Decimal("4.29"))}  # "H100 HGX" / "H100 PCIe"
