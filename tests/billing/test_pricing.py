"""The price model (prices, tariffs) as the one rater sees it: exact splits at tariff boundaries,
one rounding per rated interval, whole seconds from the interval's start."""

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
)
from danlu.billing.rating import rate_interval
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
    rating = rate_interval(BOOK, "V100", Plan.ON_DEMAND, MONDAY_9, MONDAY_9 + H, 2)
    assert rating.total_minor == 590
    assert [s.tariff for s in rating.parts] == [None]


def test_interval_is_split_exactly_at_the_off_peak_opening() -> None:
    midnight = MONDAY_9 + 15 * H  # Tuesday 00:00 UTC
    rating = rate_interval(BOOK, "K80", Plan.ON_DEMAND, midnight - H, midnight + H, 1)
    assert [(s.start_ms, s.end_ms, s.tariff) for s in rating.parts] == [
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
    assert rate_interval(book, "V100", Plan.ON_DEMAND, start, start + H, 1).total_minor == 295
    assert rate_interval(book, "V100", Plan.INTERRUPTIBLE, start, start + H, 1).total_minor == 42


def test_missing_price_and_bad_interval_are_typed_errors() -> None:
    with pytest.raises(InvalidInput):
        rate_interval(BOOK, "K80", Plan.INTERRUPTIBLE, MONDAY_9, MONDAY_9 + H, 1)
    with pytest.raises(InvalidInput):
        rate_interval(BOOK, "V100", Plan.ON_DEMAND, MONDAY_9 + 1, MONDAY_9, 1)


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
    d1=st.integers(0, 3 * 24 * 3600),
    d2=st.integers(0, 3 * 24 * 3600),
    frac=st.integers(0, 999),
    gpus=st.integers(0, 8),
    plan=st.sampled_from([Plan.ON_DEMAND, Plan.INTERRUPTIBLE]),
)
def test_splitting_is_additive_and_rounds_once(a: int, d1: int, d2: int, frac: int, gpus: int, plan: Plan) -> None:
    """Intervals cut on whole seconds of the first one add up exactly; each rated interval rounds
    once, so the parts' totals drift from the whole by at most one minor unit per extra interval.
    A trailing fraction of a second is not billed."""
    b, c = a + 1000 * d1, a + 1000 * (d1 + d2)
    whole = rate_interval(BOOK, "V100", plan, a, c + frac, gpus)
    left = rate_interval(BOOK, "V100", plan, a, b, gpus)
    right = rate_interval(BOOK, "V100", plan, b, c, gpus)
    assert whole.seconds == d1 + d2
    assert whole.exact == left.exact + right.exact  # exact, before rounding
    assert abs(whole.total_minor - (left.total_minor + right.total_minor)) <= 1


@settings(max_examples=150, deadline=None)
@given(a=instants, d=st.integers(0, 5 * 24 * H))
def test_segments_tile_the_interval_and_are_priced_by_their_tariff(a: int, d: int) -> None:
    rating = rate_interval(BOOK, "V100", Plan.ON_DEMAND, a, a + d, 3)
    if d < 1000:
        assert rating.parts == () and rating.total_minor == 0
        return
    assert rating.parts[0].start_ms == a and rating.parts[-1].end_ms == a + 1000 * (d // 1000)
    for prev, nxt in zip(rating.parts, rating.parts[1:], strict=False):
        assert prev.end_ms == nxt.start_ms
    for seg in rating.parts:
        # each second is priced as at its start: constant from the part's first to its last second
        tariff = active_tariff(BOOK.tariffs, Plan.ON_DEMAND, seg.start_ms)
        assert tariff == active_tariff(BOOK.tariffs, Plan.ON_DEMAND, seg.end_ms - 1000)
        assert seg.tariff == (tariff.name if tariff else None)
        assert seg.exact == Fraction(295 * 3 * seg.seconds, 3600) * Fraction(seg.multiplier)
    full = Fraction(295 * 3 * (d // 1000), 3600)
    assert full * Fraction(3, 5) <= rating.exact <= full
