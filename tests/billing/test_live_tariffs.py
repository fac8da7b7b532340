"""Off-peak tariffs, live (issue 9 part 3): the operator's rules rate running work exactly at every
boundary, a change never re-rates what already runs, and `offers` shows the price now and the
next cheaper window. SQLite and PostgreSQL, fake clock."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from danlu.billing import service as billing
from danlu.billing import tariffs
from danlu.compute import instances
from danlu.compute.offers import list_offers
from danlu.compute.reconcile import meter_all
from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.core.errors import InvalidInput
from tests.billing.test_caps_and_discounts import usage
from tests.billing.test_metering import renter
from tests.billing.test_money_machine import check_books
from tests.fakes import RecordingBackend


def at(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


@pytest.fixture
def p(platform: Platform) -> Platform:
    platform.backend = RecordingBackend()
    billing.set_price(platform, "A100-80GB", "36.00")  # 1 fen per GPU-second
    billing.set_price(platform, "T4", "3.60")
    return platform


EVERY_DAY = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]


def test_usage_across_a_tariff_boundary_is_billed_exactly_30_s_at_each_rate(p: Platform, fake_clock: FakeClock) -> None:
    fake_clock.set(at("2026-12-01T12:00:00"))
    tariffs.add_rule(p, "night", EVERY_DAY, "23:00", "08:00", "0.5")
    user = renter(p, "nina", "10.00")
    fake_clock.set(at("2026-12-01T22:59:30"))
    inst = instances.rent(p, user, "A100-80GB", 1, ["x"])
    fake_clock.advance(seconds=20)
    meter_all(p)  # a tick before the boundary changes nothing in the total
    fake_clock.set(at("2026-12-01T23:00:30"))
    instances.stop(p, user, inst.id)
    assert usage(p, inst.id) == (45, 0, 0, 45)  # 30 s × 1 fen + 30 s × 0.5 fen
    check_books(p)
    # `danlu cost` says the multiplier of the tariff part, so its rate times its seconds is its amount (it
    # showed only the list price beside 0.15 for 30 s: a newcomer could not reconcile it)
    from danlu.compute.cost import explain_cost

    lines = explain_cost(p, user, inst.id).as_dict()["lines"]
    assert [(x["tariff"], x["seconds"], x["price_per_hour"], x["multiplier"], x["amount"]) for x in lines] == [  # type: ignore[union-attr]
        (None, 30, "36.00", "1", "0.30"),
        ("night", 30, "36.00", "0.5", "0.15"),
    ]


def test_a_rule_added_or_retired_later_never_re_rates_running_work(p: Platform, fake_clock: FakeClock) -> None:
    fake_clock.set(at("2026-12-02T10:00:00"))
    user = renter(p, "rick", "10.00")
    before = instances.rent(p, user, "A100-80GB", 1, ["x"])
    rule = tariffs.add_rule(p, "day", EVERY_DAY, "08:00", "20:00", "0.5")
    after = instances.rent(p, user, "A100-80GB", 1, ["y"])
    tariffs.retire_rule(p, rule.id)
    fake_clock.advance(seconds=100)
    meter_all(p)
    assert usage(p, before.id)[3] == 100  # started before the rule: list price
    assert usage(p, after.id)[3] == 50  # started under it: keeps it after retirement
    assert [r.name for r in tariffs.list_rules(p)] == []
    assert [r.retired_at_ms is not None for r in tariffs.list_rules(p, include_retired=True)] == [True]


def test_offers_show_the_price_now_and_the_next_cheaper_window(p: Platform, fake_clock: FakeClock) -> None:
    fake_clock.set(at("2026-12-04T20:00:00"))  # a Friday
    tariffs.add_rule(p, "weekend", ["sat", "sun"], "00:00", "23:59", "0.4")
    tariffs.add_rule(p, "night", EVERY_DAY, "23:00", "08:00", "0.5")
    [a100] = list_offers(p, gpu="A100-80GB")
    assert (a100.price_now_minor, a100.tariff_now) == (3600, None)
    assert (a100.next_cheaper_at_ms, a100.next_cheaper_price_minor) == (at("2026-12-04T23:00:00"), 1800)
    fake_clock.set(at("2026-12-04T23:30:00"))
    [a100] = list_offers(p, gpu="A100-80GB")
    assert (a100.price_now_minor, a100.tariff_now) == (1800, "night")
    assert (a100.next_cheaper_at_ms, a100.next_cheaper_price_minor) == (at("2026-12-05T00:00:00"), 1440)


@pytest.mark.parametrize(
    ("days", "start", "end", "mult"),
    [
        ([], "23:00", "08:00", "0.5"),
        (["moon"], "23:00", "08:00", "0.5"),
        (["monkey", "frisbee"], "23:00", "08:00", "0.5"),  # was stored as mon,fri (issue 28, finding 10)
        (["monday"], "23:00", "08:00", "0.5"),
        (["mon-funday"], "23:00", "08:00", "0.5"),
        ([""], "23:00", "08:00", "0.5"),
        (EVERY_DAY, "25:00", "08:00", "0.5"),
        (EVERY_DAY, "23:00", "23:00", "0.5"),
        (EVERY_DAY, "23:00", "08:00", "1.5"),
        (EVERY_DAY, "23:00", "08:00", "x"),
        (EVERY_DAY, "23:00", "08:00", "NaN"),  # was a 500: NaN cannot be ordered
    ],
)
def test_a_bad_rule_is_refused_and_changes_nothing(
    p: Platform, days: list[str], start: str, end: str, mult: str
) -> None:
    with pytest.raises(InvalidInput):
        tariffs.add_rule(p, "bad", days, start, end, mult)
    assert tariffs.list_rules(p, include_retired=True) == []


@pytest.mark.parametrize(
    ("days", "stored"),
    [
        (["mon-fri"], ["mon", "tue", "wed", "thu", "fri"]),  # was Monday alone (issue 28, finding 10)
        (["weekends"], ["sat", "sun"]),
        (["fri-mon"], ["mon", "fri", "sat", "sun"]),  # wraps, as schedules do
        (["sun", "mon", "sun"], ["mon", "sun"]),
        (["Mon", " tue "], ["mon", "tue"]),
    ],
)
def test_days_read_as_schedules_read_them(p: Platform, days: list[str], stored: list[str]) -> None:
    assert tariffs.add_rule(p, "r", days, "23:00", "08:00", "0.5").days == stored


def test_renting_in_a_cheaper_window_needs_the_balance_for_the_price_in_force(
    p: Platform, fake_clock: FakeClock
) -> None:
    """The up-front check asked for a minute at the list price while a ×0.5 tariff was in force (a newcomer
    was told 0.60 was needed where 0.30 covers it)."""
    fake_clock.set(at("2026-12-01T12:00:00"))
    tariffs.add_rule(p, "night", EVERY_DAY, "23:00", "08:00", "0.5")
    fake_clock.set(at("2026-12-01T23:30:00"))
    assert p.settings.min_prepaid_seconds == 60
    user = renter(p, "nell", "0.30")  # a minute at 0.5 fen/s (at the list price it would need 0.60)
    inst = instances.rent(p, user, "A100-80GB", 1, ["x"])
    assert inst.status == "running"
