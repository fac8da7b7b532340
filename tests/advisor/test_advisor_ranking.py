"""Ranking, plan pricers, currencies, the price catalog, plan recommender and rent-vs-buy."""

from __future__ import annotations

from dataclasses import replace
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from danlu.advisor import service
from danlu.advisor.plan_recommender import UsageProfile, recommend_plan
from danlu.advisor.plans import PLAN_PRICERS, PlatformPlans
from danlu.advisor.rent_buy import BuyInputs, rent_or_buy
from danlu.advisor.workload import build_workload
from danlu.billing.rating import Rate, cumulative_cost
from danlu.catalog import prices
from danlu.core.errors import InvalidInput
from tests.fakes import platform_offer

TODAY = date(2026, 12, 2)
W = build_workload(params=7e9, tokens=1e9)


def test_first_fitting_option_is_the_cheapest_and_non_fitting_follow() -> None:
    opts = service.advise(W, today=TODAY).options
    fitting = [o for o in opts if o.fits]
    assert fitting and opts[0].fits
    assert opts[0].cost_minor == min(o.cost_minor for o in fitting if o.currency == "USD")
    first_misfit = next(i for i, o in enumerate(opts) if not o.fits)
    assert all(not o.fits for o in opts[first_misfit:])
    assert all(o.fixes for o in opts[first_misfit:])


def test_currencies_are_never_mixed_and_platform_currency_ranks_first() -> None:
    offer = platform_offer("H100-80GB", 2500, "CNY", free=8, total=8, interruptible_minor=1000)
    res = service.advise(W, today=TODAY, platform_offers=[offer])
    assert res.primary_currency == "CNY"
    assert res.options[0].currency == "CNY" and res.options[0].provider == "this platform"
    assert {o.currency for o in res.options} == {"CNY", "USD"}
    cny = [o for o in res.options if o.currency == "CNY" and o.fits]
    # 2 × H100 on demand at ¥25/GPU-h: what the meter would charge for those whole seconds (the
    # platform's one rater: 2 × 2500 fen per hour, rounded once)
    od2 = next(o for o in cny if o.plan == "on-demand" and o.gpu_count == 2)
    assert od2.cost_minor == cumulative_cost(Rate(2500, 2, 0), round(od2.hours * 3600))
    assert od2.cost_minor == round(Decimal(round(od2.hours * 3600)) * 2 * 2500 / 3600)
    intr = next(o for o in cny if o.plan == "interruptible" and o.gpu_count == 2)
    assert intr.hours == pytest.approx(od2.hours * 1.10)


def test_off_peak_and_packages_exist_only_when_configured_and_respect_the_deadline() -> None:
    offer = platform_offer("H100-80GB", 2500, "CNY", free=8, total=8)
    plain = service.advise(W, today=TODAY, platform_offers=[offer], include_public=False)
    assert {o.plan for o in plain.options} == {"on-demand"}
    plans = PlatformPlans(offpeak_discount_pct=Decimal(40), offpeak_hours_per_day=8, terms={"package-day": 1000})
    rich = service.advise(W, today=TODAY, platform_offers=[offer], platform_plans=plans, include_public=False)
    assert {"on-demand", "off-peak", "package-day"} <= {o.plan for o in rich.options}
    od = next(o for o in rich.options if o.plan == "on-demand" and o.gpu_count == 8)
    op = next(o for o in rich.options if o.plan == "off-peak" and o.gpu_count == 8)
    assert op.hours == pytest.approx(od.hours * 3) and op.cost_minor < od.cost_minor
    tight = service.advise(
        W, today=TODAY, platform_offers=[offer], platform_plans=plans, include_public=False, deadline_hours=od.hours * 2
    )
    assert all(o.hours <= od.hours * 2 for o in tight.options)
    assert "off-peak" not in {o.plan for o in tight.options if o.gpu_count == 8}


def test_new_plans_plug_in_through_the_registry() -> None:
    expected = {"on-demand", "interruptible", "off-peak", "package-day", "package-month", "reserved-12m"}
    assert expected <= set(PLAN_PRICERS)


def test_bundled_catalog_is_dated_attributed_and_reports_its_age() -> None:
    cat = prices.price_catalog()
    assert cat.origin == "bundled" and cat.snapshot == date(2026, 12, 2)
    assert "the-full-stack/website" in cat.attribution and "skypilot" in cat.attribution
    assert cat.age_days(date(2026, 12, 12)) >= 10
    assert all(r.currency == "USD" for r in cat.rows)


def test_compare_a100_lists_cheapest_first_with_contract_fields() -> None:
    rows = service.compare("A100", hours=10)
    assert {r["gpu_model"] for r in rows} == {"A100-80GB", "A100-40GB"}
    totals = [Decimal(r["total"]) for r in rows]
    assert totals == sorted(totals)
    for r in rows:
        assert Decimal(r["total"]) == (Decimal(r["price_per_hour"]) * 10).quantize(Decimal("0.01"))
        assert r["spot"] is False and date.fromisoformat(r["as_of"])
    spot = service.compare("A100", hours=10, spot=True)
    assert spot and all(r["spot"] for r in spot)
    with pytest.raises(InvalidInput) as err:
        service.compare("Z9000")
    assert err.value.code == "unknown_gpu_model"


def test_operator_import_validates_and_takes_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DANLU_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DANLU_PRICES_CSV", raising=False)
    bad = tmp_path / "bad.csv"
    bad.write_text("provider,region\nx,y\n", encoding="utf-8")
    with pytest.raises(InvalidInput) as err:
        prices.import_catalog(bad)
    assert err.value.code == "invalid_price_catalog"
    good = tmp_path / "new.csv"
    good.write_text(
        "# my prices, snapshot 2027-01-15\n" + ",".join(prices.COLUMNS) + "\n"
        "Acme,eu,T4,1,0.10,,USD,t4.small,2027-01-15,operator\n",
        encoding="utf-8",
    )
    cat = prices.import_catalog(good)
    assert cat.snapshot == date(2027, 1, 15) and len(cat.rows) == 1
    assert prices.price_catalog().rows[0].provider == "Acme"
    assert service.compare("T4", hours=5)[0]["total"] == "0.50"


def test_plan_recommender_break_even_and_predictability() -> None:
    offered = {"package-day": Decimal(10), "package-week": Decimal(20), "package-month": Decimal(30)}
    offered["reserved-12m"] = Decimal(45)
    steady = recommend_plan(UsageProfile(20, 7, 4), Decimal("2.00"), "USD", discounts=offered)
    assert steady.best == "package-month"
    # month package at -30%: 720 h × 0.7 / 30 days = 16.8 h/day
    assert "above 16.8 h/day a package-month is cheaper than hourly" in steady.break_even
    assert {c.plan for c in steady.costs} == {"hourly", *offered}  # what is offered, nothing else
    light = recommend_plan(UsageProfile(2, 5, 4), Decimal("2.00"), "USD", discounts=offered)
    assert light.best == "hourly"
    assert light.costs[0].cost_minor == 2 * 5 * 4 * 200
    risky = recommend_plan(UsageProfile(20, 7, 4, predictability=0.5), Decimal("2.00"), "USD", discounts=offered)
    assert risky.best == "hourly"
    assert [c.plan for c in recommend_plan(UsageProfile(20, 7, 4), Decimal("2.00"), "USD").costs] == ["hourly"]
    with pytest.raises(InvalidInput):
        UsageProfile(25, 7, 4)


def test_rent_or_buy_break_even_is_where_costs_meet() -> None:
    x = BuyInputs(
        purchase_minor=2_000_000,
        currency="USD",
        rent_rate=Decimal("2.00"),
        power_w=Decimal(400),
        kwh_price=Decimal("0.15"),
        years=3,
        utilisation=Decimal("0.5"),
    )
    res = rent_or_buy(x)
    assert res.break_even_utilisation is not None and 0 < res.break_even_utilisation < 1
    at = rent_or_buy(replace(x, utilisation=Decimal(repr(res.break_even_utilisation))))
    assert abs(at.buy_cumulative_minor[-1] - at.rent_cumulative_minor[-1]) <= 2
    assert len(res.buy_cumulative_minor) == 37 and res.buy_cumulative_minor[0] == 2_000_000
    full = rent_or_buy(replace(x, utilisation=Decimal(1)))
    assert full.cheaper == "buy"


def test_compare_offers_what_skypilots_optimizer_launches_on_the_rows_both_hold() -> None:
    """benchmarks/skypilot_agreement.py checks all 18 (accelerator, count) pairs against SkyPilot
    0.14.1; these are the three it once disagreed on: Lambda's A6000 and B200 rows were not mapped,
    16 A100s come only as GCP's a2-megagpu-16g, and SkyPilot's "H100" includes the PCIe instance."""

    def top(gpu: str, n: int) -> tuple[str, str, str]:
        rows = service.compare(gpu, hours=1, count=n)
        rows = [r for r in rows if r["source_label"] in ("SkyPilot lambda", "SkyPilot gcp")]
        return rows[0]["provider"], rows[0]["instance_type"], rows[0]["price_per_hour"]

    assert top("RTX-A6000", 1) == ("Lambda", "gpu_1x_a6000", "1.09")
    assert top("B200", 8) == ("Lambda", "gpu_8x_b200_sxm6", "53.52")
    assert top("A100-40GB", 16) == ("GCP", "a2-megagpu-16g", "35.5024")
    assert top("H100", 1) == ("Lambda", "gpu_1x_h100_pcie", "3.29")


def test_compare_lists_an_instance_once_with_its_regions_as_advise_does() -> None:
    rows = service.compare("A10", hours=1, count=1)
    keys = [(r["provider"], r["instance_type"], r["price_per_hour"], r["as_of"]) for r in rows]
    assert len(keys) == len(set(keys))
    lambda_a10 = next(r for r in rows if r["instance_type"] == "gpu_1x_a10")
    assert len(lambda_a10["regions"]) > 1 and lambda_a10["region"] == lambda_a10["regions"][0]
    assert " " not in lambda_a10["region"]  # a region code, not a display string
