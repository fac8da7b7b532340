"""The price model: exact splitting at tariff boundaries, one rounding per interval."""

from __future__ import annotations

from datetime import UTC, datetime, time
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from danlu.billing.pricing import (
    Plan,
    PriceBook,
    Tariff,
    active_tariff,
    next_window_start,
    parse_tariff,
    rate,
)
from danlu.core.errors import InvalidInput

H = 3_600_000
MONDAY_9 = int(datetime(2026, 1, 5, 9, tzinfo=UTC).timestamp()) * 1000
NIGHT = Tariff("night", frozenset(range(7)), time(0), time(8), Decimal("0.6"), synthetic=True)
LATE = Tariff("late", frozenset({0, 1, 2, 3, 4}), time(22), time(2), Decimal("0.75"), timezone="Asia/Shanghai")
BOOK = PriceBook(
    "USD",
    {("V100", Plan.ON_DEMAND): 295, ("V100", Plan.INTERRUPTIBLE): 84, ("K80", Plan.ON_DEMAND): 92},
    (NIGHT, LATE),
)

instants = st.integers(MONDAY_9 - 3 * 24 * H, MONDAY_9 + 10 * 24 * H)


def test_flat_hour_without_tariff_is_the_list_price() -> None:
    rating = rate(BOOK, "V100", Plan.ON_DEMAND, MONDAY_9, MONDAY_9 + H, 2)
    assert rating.total_minor == 590
    assert [s.tariff for s in rating.segments] == [None]


def test_interval_is_split_exactly_at_the_off_peak_opening() -> None:
    midnight = MONDAY_9 + 15 * H  # Tuesday 00:00 UTC
    rating = rate(BOOK, "K80", Plan.ON_DEMAND, midnight - H, midnight + H, 1)
    assert [(s.start_ms, s.end_ms, s.tariff) for s in rating.segments] == [
        (midnight - H, midnight, None),
        (midnight, midnight + H, "night"),
    ]
    assert rating.exact == Fraction(92) + Fraction(92) * Fraction(3, 5)
    assert rating.total_minor == 147  # 92 + 55.2 rounds once, half up


def test_overlapping_tariffs_do_not_stack_the_lowest_multiplier_wins() -> None:
    # Monday 17:00 UTC = Tuesday 01:00 in Shanghai: inside "late" (0.75), outside "night" (UTC)
    at = MONDAY_9 + 8 * H
    assert active_tariff(BOOK.tariffs, Plan.ON_DEMAND, at) == LATE
    # Tuesday 01:00 UTC = 09:00 Shanghai: only "night"
    assert active_tariff(BOOK.tariffs, Plan.ON_DEMAND, MONDAY_9 + 16 * H) == NIGHT


def test_next_window_start_finds_the_off_peak_opening() -> None:
    only_night = (NIGHT,)
    assert next_window_start(only_night, Plan.ON_DEMAND, MONDAY_9, 24 * H) == MONDAY_9 + 15 * H


def test_plan_scoped_tariff_leaves_other_plans_alone() -> None:
    spot_only = Tariff(
        "spot-night", frozenset(range(7)), time(0), time(8), Decimal("0.5"), plans=frozenset({Plan.INTERRUPTIBLE})
    )
    book = PriceBook("USD", BOOK.prices, (spot_only,))
    start = MONDAY_9 + 15 * H
    assert rate(book, "V100", Plan.ON_DEMAND, start, start + H, 1).total_minor == 295
    assert rate(book, "V100", Plan.INTERRUPTIBLE, start, start + H, 1).total_minor == 42


def test_missing_price_and_bad_interval_are_typed_errors() -> None:
    with pytest.raises(InvalidInput):
        rate(BOOK, "K80", Plan.INTERRUPTIBLE, MONDAY_9, MONDAY_9 + H, 1)
    with pytest.raises(InvalidInput):
        rate(BOOK, "V100", Plan.ON_DEMAND, MONDAY_9 + 1, MONDAY_9, 1)


def test_parse_tariff_reads_the_scenario_form_and_rejects_junk() -> None:
    tariff = parse_tariff(
        {
            "name": "off-peak",
            "synthetic": True,
            "days": ["mon", "sun"],
            "from": "00:00",
            "to": "08:00",
            "price_multiplier": "0.6",
        }
    )
    assert tariff.days == frozenset({0, 6}) and tariff.multiplier == Decimal("0.6") and tariff.synthetic
    with pytest.raises(InvalidInput):
        parse_tariff({"name": "x", "days": ["mon"], "from": "25:00", "to": "08:00", "price_multiplier": "1"})


@settings(max_examples=150, deadline=None)
@given(
    a=instants,
    d1=st.integers(0, 3 * 24 * H),
    d2=st.integers(0, 3 * 24 * H),
    gpus=st.integers(0, 8),
    plan=st.sampled_from([Plan.ON_DEMAND, Plan.INTERRUPTIBLE]),
)
def test_splitting_is_additive_and_rounds_once(a: int, d1: int, d2: int, gpus: int, plan: Plan) -> None:
    b, c = a + d1, a + d1 + d2
    whole = rate(BOOK, "V100", plan, a, c, gpus)
    left = rate(BOOK, "V100", plan, a, b, gpus)
    right = rate(BOOK, "V100", plan, b, c, gpus)
    assert whole.exact == left.exact + right.exact  # exact, before rounding
    # one rounding per interval: the parts' rounded totals may drift from the whole by <= 1 minor unit
    assert abs(whole.total_minor - (left.total_minor + right.total_minor)) <= 1


@settings(max_examples=150, deadline=None)
@given(a=instants, d=st.integers(0, 5 * 24 * H))
def test_segments_tile_the_interval_and_are_priced_by_their_tariff(a: int, d: int) -> None:
    rating = rate(BOOK, "V100", Plan.ON_DEMAND, a, a + d, 3)
    if d == 0:
        assert rating.segments == () and rating.total_minor == 0
        return
    assert rating.segments[0].start_ms == a and rating.segments[-1].end_ms == a + d
    for prev, nxt in zip(rating.segments, rating.segments[1:], strict=False):
        assert prev.end_ms == nxt.start_ms
    for seg in rating.segments:
        tariff = active_tariff(BOOK.tariffs, Plan.ON_DEMAND, seg.start_ms)
        assert tariff == active_tariff(BOOK.tariffs, Plan.ON_DEMAND, seg.end_ms - 1)  # constant inside
        assert seg.exact == Fraction(295 * 3 * (seg.end_ms - seg.start_ms), H) * Fraction(seg.multiplier)
    full = Fraction(295 * 3 * d, H)
    assert full * Fraction(3, 5) <= rating.exact <= full
