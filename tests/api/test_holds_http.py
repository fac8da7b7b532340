"""The advisor prices packages and reservations from this platform's real terms (issue 9 part 2):
what it quotes for a term is what buying that term costs, and a term taken off sale disappears
from its answers. Real server, real HTTP, SQLite and PostgreSQL."""

from __future__ import annotations

from decimal import Decimal

from tests.conftest import LiveServer


def test_the_advisor_quotes_packages_from_the_terms_on_sale_at_the_price_a_purchase_costs(live: LiveServer) -> None:
    renter = live.new_user("planner")
    profile = {"gpu": "A100-80GB", "hours_per_day": 20, "days_per_week": 7, "weeks": 4}
    before = renter.post("/advice/plan", json=profile).json()
    assert [p["plan"] for p in before["plans"]] == ["hourly"]  # nothing on sale: nothing invented
    assert before["rate_source"] == "this platform" and before["discount_source"].startswith("none")
    with live.admin() as adm:
        assert adm.put("/admin/plans/package-month", json={"discount": "30"}).status_code == 200
        assert adm.put("/admin/plans/reserved-3m", json={"discount": "35"}).status_code == 200
    after = renter.post("/advice/plan", json=profile).json()
    costs = {p["plan"]: Decimal(p["cost"]) for p in after["plans"]}
    assert set(costs) == {"hourly", "package-month", "reserved-3m"}
    assert after["discount_source"] == "this platform's terms on sale" and after["best"] == "package-month"
    quote = renter.post("/plans/quote", json={"term": "package-month", "gpu_model": "A100-80GB"}).json()
    assert costs["package-month"] == Decimal(quote["price"]) == Decimal("18144.00")  # 720 h × 36.00 × 0.7
    reserved = renter.post("/plans/quote", json={"term": "reserved-3m", "gpu_model": "A100-80GB"}).json()
    assert costs["reserved-3m"] == Decimal(reserved["price"])  # a whole 90-day term, used or not
    # The workload ranking offers the same terms on this platform's GPUs, at the same price per term.
    ranked = renter.post(
        "/advice", json={"params": 1e9, "task": "inference", "tokens": 1e6, "gpu": "A100-80GB", "currency": "CNY"}
    ).json()["options"]
    mine = {o["plan"]: o for o in ranked if o["provider"] == "this platform" and o["gpu_count"] == 1}
    assert {"on-demand", "package-month", "reserved-3m"} <= set(mine)
    assert Decimal(mine["package-month"]["cost"]) == Decimal(quote["price"])
    what_if = renter.post("/advice/plan", json={**profile, "discounts_pct": {"package-week": 25}}).json()
    assert {p["plan"] for p in what_if["plans"]} == {"hourly", "package-week"} and what_if["discount_source"] == "given"
    with live.admin() as adm:
        assert adm.delete("/admin/plans/package-month").status_code == 204
    gone = renter.post("/advice/plan", json=profile).json()
    assert {p["plan"] for p in gone["plans"]} == {"hourly", "reserved-3m"}


def test_the_operators_cheaper_hours_reach_the_advisor_as_an_off_peak_plan(live: LiveServer) -> None:
    """docs/advisor.md: off-peak "when the operator configures it". Tariffs never reached the advisor (its
    off-peak plan was never set): a newcomer's pass saw only on-demand with a ×0.5 night tariff in force."""
    renter = live.new_user("nightowl")
    ask = {"params": 1e9, "task": "inference", "tokens": 1e6, "gpu": "A100-80GB", "currency": "CNY"}

    def mine() -> dict[str, dict[str, str]]:
        ranked = renter.post("/advice", json=ask).json()["options"]
        return {o["plan"]: o for o in ranked if o["provider"] == "this platform" and o["gpu_count"] == 1}

    assert "off-peak" not in mine()
    night = {"name": "night", "days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"], "from": "23:00"}
    with live.admin() as adm:
        assert adm.post("/admin/tariffs", json={**night, "to": "07:00", "multiplier": "0.5"}).status_code == 201
        weekend = {**night, "name": "weekend", "days": ["sat"], "from": "00:00", "to": "06:00", "multiplier": "0.8"}
        assert adm.post("/admin/tariffs", json=weekend).status_code == 201  # saves less a week: not the one
    got = mine()
    assert "8 off-peak h/day at -50%" in got["off-peak"]["note"], got["off-peak"]
    assert Decimal(got["off-peak"]["cost"]) < Decimal(got["on-demand"]["cost"])
