"""The one rater: whole seconds from an allocation's start, tariff parts, one rounding."""

from __future__ import annotations

from datetime import datetime, time
from decimal import Decimal
from fractions import Fraction
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danlu.billing.pricing import Plan, PriceBook, Tariff, active_tariff
from danlu.billing.rating import (
    Rate,
    billable_seconds,
    charge_between,
    cumulative_cost,
    exact_cost,
    latest_affordable_ms,
    rate_interval,
    round_half_up,
    segments,
)
from danlu.core.errors import InvalidInput

prices = st.integers(min_value=1, max_value=100_000)  # minor units per GPU-hour
counts = st.integers(min_value=1, max_value=8)
ALL_DAYS = frozenset(range(7))
SHANGHAI = ZoneInfo("Asia/Shanghai")
BERLIN = ZoneInfo("Europe/Berlin")
NIGHT_SH = Tariff("night", ALL_DAYS, time(23), time(8), Decimal("0.5"), timezone="Asia/Shanghai")
NIGHT_BERLIN = Tariff("night", ALL_DAYS, time(0), time(8), Decimal("0.5"), timezone="Europe/Berlin")
WEEKEND = Tariff("weekend", frozenset({5, 6}), time(0), time(0), Decimal("0.7"), timezone="Asia/Shanghai")
SPOT_ONLY = Tariff("spot-night", ALL_DAYS, time(1), time(5), Decimal("0.25"), plans=frozenset({Plan.INTERRUPTIBLE}))
TARIFFS = (NIGHT_SH, WEEKEND, SPOT_ONLY)
H = 3_600_000


def ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def test_one_hour_of_two_gpus_costs_twice_the_hourly_price() -> None:
    assert cumulative_cost(Rate(3600, 2, 0), 3600) == 7200
    assert charge_between(Rate(3600, 2, 0), 0, 3_600_000) == 7200


def test_partial_seconds_are_not_billed() -> None:
    assert billable_seconds(1_000, 1_999) == 0
    assert billable_seconds(1_000, 2_000) == 1


def test_one_and_a_half_seconds_cost_one_fen_live_and_simulated() -> None:
    """36.00/h is 1 fen per GPU-second: 1.5 s is one whole second, in the meter and the simulator
    alike (the simulator used to say 2 fen: 1.5 s rounded half up)."""
    assert charge_between(Rate(3600, 1, 0), 0, 1_500) == 1
    book = PriceBook("CNY", {("T4", Plan.ON_DEMAND): 3600})
    rated = rate_interval(book, "T4", Plan.ON_DEMAND, 0, 1_500, 1)
    assert rated.total_minor == 1 and rated.seconds == 1 and rated.exact == 1


def test_round_half_up_is_exact_and_away_from_zero() -> None:
    assert [round_half_up(Fraction(n, 2)) for n in (-3, -1, 0, 1, 3, 5)] == [-2, -1, 0, 1, 2, 3]
    assert round_half_up(Fraction(2499999, 1000000)) == 2


def test_an_allocation_across_a_tariff_boundary_is_split_exactly_at_it() -> None:
    start = ms(datetime(2026, 1, 5, 22, 59, 30, tzinfo=SHANGHAI))  # Monday
    rate = Rate(3600, 1, start, tariffs=(NIGHT_SH,))
    parts = segments(rate, 0, 60)
    boundary = ms(datetime(2026, 1, 5, 23, tzinfo=SHANGHAI))
    assert [(p.start_ms, p.end_ms, p.seconds, p.tariff, p.multiplier) for p in parts] == [
        (start, boundary, 30, None, Decimal(1)),
        (boundary, boundary + 30_000, 30, "night", Decimal("0.5")),
    ]
    assert [p.exact for p in parts] == [Fraction(30), Fraction(15)]
    assert cumulative_cost(rate, 60) == 45
    assert charge_between(rate, start, start + 60_000) == 45


def test_a_boundary_inside_a_second_goes_to_the_earlier_rate() -> None:
    start = ms(datetime(2026, 1, 5, 22, 59, 59, 500_000, tzinfo=SHANGHAI))
    rate = Rate(7200, 1, start, tariffs=(NIGHT_SH,))  # 2 minor units per full-price second
    parts = segments(rate, 0, 2)
    # 22:59:59.5-23:00:00.5 started before 23:00: one second at the day rate, then the night rate
    assert [(p.start_ms - start, p.end_ms - start, p.tariff) for p in parts] == [(0, 1000, None), (1000, 2000, "night")]
    assert [p.exact for p in parts] == [Fraction(2), Fraction(1)]
    assert cumulative_cost(rate, 2) == 3


@pytest.mark.parametrize(
    ("day", "hours", "cheap_hours"),
    [(datetime(2026, 3, 29), 23, 7), (datetime(2026, 10, 25), 25, 9), (datetime(2026, 1, 11), 24, 8)],
)
def test_dst_days_have_23_or_25_hours_and_the_cheap_window_follows_wall_time(
    day: datetime, hours: int, cheap_hours: int
) -> None:
    midnight = day.replace(tzinfo=BERLIN)
    next_midnight = datetime(day.year, day.month, day.day + 1, tzinfo=BERLIN)
    start, end = ms(midnight), ms(next_midnight)
    assert end - start == hours * H
    rate = Rate(3600, 1, start, tariffs=(NIGHT_BERLIN,))
    seconds = billable_seconds(start, end)
    parts = segments(rate, 0, seconds)
    assert seconds == hours * 3600
    assert sum(p.seconds for p in parts if p.tariff == "night") == cheap_hours * 3600
    assert sum(p.seconds for p in parts if p.tariff is None) == (hours - cheap_hours) * 3600
    assert cumulative_cost(rate, seconds) == cheap_hours * 1800 + (hours - cheap_hours) * 3600


def test_discount_applies_to_the_exact_amount_before_the_one_rounding() -> None:
    rate = Rate(3600, 1, 0, discount_bp=2_500)
    parts = segments(rate, 0, 3)
    assert [(p.gross_exact, p.exact) for p in parts] == [(Fraction(3), Fraction(9, 4))]
    assert cumulative_cost(rate, 3) == 2  # 2.25, not 3 × round(0.75)
    assert cumulative_cost(Rate(3600, 1, 0, discount_bp=10_000), 3600) == 0


def test_tariffs_of_other_plans_are_ignored_and_match_the_flat_fast_path() -> None:
    at = ms(datetime(2026, 1, 6, 2, tzinfo=ZoneInfo("UTC")))
    assert active_tariff((SPOT_ONLY,), Plan.INTERRUPTIBLE, at) == SPOT_ONLY
    on_demand = Rate(295, 3, at, Plan.ON_DEMAND, (SPOT_ONLY,))
    assert [p.tariff for p in segments(on_demand, 0, 7200)] == [None]
    assert cumulative_cost(on_demand, 7200) == cumulative_cost(Rate(295, 3, at), 7200) == 1770
    spot = Rate(84, 1, at, Plan.INTERRUPTIBLE, (SPOT_ONLY,))
    assert cumulative_cost(spot, 3600) == 21


def test_a_rate_and_an_interval_reject_nonsense() -> None:
    with pytest.raises(InvalidInput):
        Rate(100, 1, 0, discount_bp=10_001)
    with pytest.raises(InvalidInput):
        Rate(-1, 1, 0)
    book = PriceBook("CNY", {("T4", Plan.ON_DEMAND): 3600})
    with pytest.raises(InvalidInput):
        rate_interval(book, "T4", Plan.ON_DEMAND, 10, 0, 1)
    with pytest.raises(InvalidInput):
        rate_interval(book, "T4", Plan.INTERRUPTIBLE, 0, 10, 1)


@given(prices, counts, st.lists(st.integers(min_value=0, max_value=10_000_000), min_size=1, max_size=30))
def test_ticks_sum_to_the_whole_interval(price: int, count: int, cuts: list[int]) -> None:
    """However the meter splits an allocation into ticks, the charges add up to the cost of the
    whole interval: no rounding drift, no second billed twice."""
    rate = Rate(price, count, 0)
    marks = [0, *sorted(cuts)]
    total = sum(charge_between(rate, a, b) for a, b in pairwise(marks))
    assert total == charge_between(rate, 0, marks[-1])
    assert all(charge_between(rate, a, b) >= 0 for a, b in pairwise(marks))


START_2026 = ms(datetime(2026, 1, 1, tzinfo=ZoneInfo("UTC")))
starts = st.integers(START_2026, START_2026 + 365 * 24 * H)
plans = st.sampled_from([Plan.ON_DEMAND, Plan.INTERRUPTIBLE])
discounts = st.integers(0, 10_000)


@settings(max_examples=200, deadline=None)
@given(prices, counts, starts, plans, discounts, st.lists(st.integers(0, 3 * 24 * H), min_size=1, max_size=20))
def test_ticks_with_tariffs_and_a_discount_sum_to_the_whole(
    price: int, count: int, start: int, plan: Plan, discount: int, cuts: list[int]
) -> None:
    rate = Rate(price, count, start, plan, TARIFFS, discount)
    marks = [start, *sorted(start + c for c in cuts)]
    charges = [charge_between(rate, a, b) for a, b in pairwise(marks)]
    assert all(c >= 0 for c in charges)
    assert sum(charges) == cumulative_cost(rate, billable_seconds(start, marks[-1]))
    assert sum(charges) == charge_between(rate, start, marks[-1])


@settings(max_examples=200, deadline=None)
@given(prices, counts, starts, plans, discounts, st.integers(0, 4 * 24 * 3600), st.integers(0, 4 * 24 * 3600))
def test_cost_is_monotone_and_exact_amounts_add_up(
    price: int, count: int, start: int, plan: Plan, discount: int, a: int, b: int
) -> None:
    rate = Rate(price, count, start, plan, TARIFFS, discount)
    lo, hi = sorted((a, b))
    assert cumulative_cost(rate, lo) <= cumulative_cost(rate, hi)
    middle = sum((p.exact for p in segments(rate, lo, hi)), Fraction(0))
    assert exact_cost(rate, hi) == exact_cost(rate, lo) + middle


@settings(max_examples=200, deadline=None)
@given(prices, counts, starts, plans, discounts, st.integers(0, 5 * 24 * 3600), st.integers(0, 5 * 24 * 3600))
def test_segments_tile_the_seconds_and_are_priced_at_each_seconds_start(
    price: int, count: int, start: int, plan: Plan, discount: int, a: int, b: int
) -> None:
    rate = Rate(price, count, start, plan, TARIFFS, discount)
    s0, s1 = sorted((a, b))
    parts = segments(rate, s0, s1)
    if s0 == s1:
        assert parts == []
        return
    assert parts[0].start_ms == start + 1000 * s0 and parts[-1].end_ms == start + 1000 * s1
    assert all(prev.end_ms == nxt.start_ms for prev, nxt in pairwise(parts))  # no gap, no overlap
    assert sum(p.seconds for p in parts) == s1 - s0
    factor = Fraction(10_000 - discount, 10_000)
    for p in parts:
        assert p.seconds > 0 and p.end_ms - p.start_ms == 1000 * p.seconds
        for second_start in (p.start_ms, p.end_ms - 1000):  # the first and the last second of the part
            tariff = active_tariff(TARIFFS, plan, second_start)
            assert (tariff.name if tariff else None) == p.tariff
        assert p.gross_exact == Fraction(price * count * p.seconds, 3600) * Fraction(p.multiplier)
        assert p.exact == p.gross_exact * factor
    assert all(prev.tariff != nxt.tariff or prev.multiplier != nxt.multiplier for prev, nxt in pairwise(parts))


@given(prices, counts, st.integers(0, 10**9), st.integers(0, 10**7))
def test_the_flat_fast_path_equals_the_exact_rater(price: int, count: int, start: int, seconds: int) -> None:
    flat = Rate(price, count, start)
    # a tariff that never applies to on-demand sends the same rate down the exact path
    exact_path = Rate(price, count, start, Plan.ON_DEMAND, (SPOT_ONLY,))
    assert cumulative_cost(flat, seconds) == cumulative_cost(exact_path, seconds)


@given(
    st.lists(st.tuples(prices, counts, st.integers(0, 10_000), st.integers(0, 5_000_000)), min_size=1, max_size=5),
    st.integers(min_value=0, max_value=50_000),
    st.booleans(),
)
def test_latest_affordable_cutoff_is_exact(allocs: list[tuple[int, int, int, int]], budget: int, tariffs: bool) -> None:
    base = START_2026 + 22 * H
    spec = [
        (
            Rate(p, c, base + b, tariffs=TARIFFS if tariffs else (), discount_bp=1_000 if tariffs else 0),
            base + b,
            base + b + n,
        )
        for p, c, b, n in allocs
    ]
    lo = min(s[1] for s in spec)
    hi = max(s[2] for s in spec)

    def charge(t: int) -> int:
        return sum(charge_between(r, b, max(b, min(t, e))) for r, b, e in spec)

    t = latest_affordable_ms(spec, budget, lo, hi)
    assert lo <= t <= hi
    assert charge(t) <= budget
    if t < hi:
        assert charge(t + 1) > budget


def test_a_window_shorter_than_a_second_is_not_billed_when_no_second_starts_in_it() -> None:
    blink = Tariff("blink", ALL_DAYS, time(23, 0, 0, 200_000), time(23, 0, 0, 700_000), Decimal("0.1"))
    start = ms(datetime(2026, 1, 5, 22, 59, 59, 900_000, tzinfo=ZoneInfo("UTC")))
    parts = segments(Rate(3600, 1, start, tariffs=(blink,)), 0, 3)
    assert [(p.seconds, p.tariff) for p in parts] == [(3, None)]
