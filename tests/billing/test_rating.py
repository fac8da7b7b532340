from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from danlu.billing.rating import billable_seconds, charge_between, cumulative_cost, latest_affordable_ms

prices = st.integers(min_value=1, max_value=100_000)  # minor units per GPU-hour
counts = st.integers(min_value=1, max_value=8)


def test_one_hour_of_two_gpus_costs_twice_the_hourly_price() -> None:
    assert cumulative_cost(3600, 2, 3600) == 7200
    assert charge_between(3600, 2, 0, 0, 3_600_000) == 7200


def test_partial_seconds_are_not_billed() -> None:
    assert billable_seconds(1_000, 1_999) == 0
    assert billable_seconds(1_000, 2_000) == 1


@given(prices, counts, st.lists(st.integers(min_value=0, max_value=10_000_000), min_size=1, max_size=30))
def test_ticks_sum_to_the_whole_interval(price: int, count: int, cuts: list[int]) -> None:
    """However the meter splits an allocation into ticks, the charges add up to the cost of the
    whole interval: no rounding drift, no second billed twice."""
    marks = [0, *sorted(cuts)]
    total = sum(charge_between(price, count, 0, a, b) for a, b in pairwise(marks))
    assert total == charge_between(price, count, 0, 0, marks[-1])
    assert all(charge_between(price, count, 0, a, b) >= 0 for a, b in pairwise(marks))


@given(
    st.lists(st.tuples(prices, counts, st.integers(0, 10_000), st.integers(0, 5_000_000)), min_size=1, max_size=5),
    st.integers(min_value=0, max_value=50_000),
)
def test_latest_affordable_cutoff_is_exact(allocs: list[tuple[int, int, int, int]], budget: int) -> None:
    spec = [(p, c, b, b, b + length) for p, c, b, length in allocs]
    lo = min(s[3] for s in spec)
    hi = max(s[4] for s in spec)

    def charge(t: int) -> int:
        return sum(charge_between(p, c, s, b, max(b, min(t, e))) for p, c, s, b, e in spec)

    t = latest_affordable_ms(spec, budget, lo, hi)
    assert lo <= t <= hi
    assert charge(t) <= budget
    if t < hi:
        assert charge(t + 1) > budget
