"""Rating of an allocation's usage: pure, exact, cumulative.

Usage is billed in whole seconds from the allocation's start (a started second is not billed
until it completes, so a renter never pays for time not yet used). The cost of the first ``s``
seconds is ``round_minor(price_per_hour × gpus × s / 3600)``, and a meter tick that moves an
allocation from ``t0`` to ``t1`` charges ``cost(t1) - cost(t0)``. Because every tick charges a
difference of the same cumulative function, the sum over any sequence of ticks equals the cost
of the whole interval: rounding never accumulates, however often the meter runs.
"""

from __future__ import annotations

from decimal import Decimal

from danlu.core.money import round_minor

MS_PER_SECOND = 1000
SECONDS_PER_HOUR = 3600


def billable_seconds(started_ms: int, at_ms: int) -> int:
    return max(0, at_ms - started_ms) // MS_PER_SECOND


def cumulative_cost(price_per_hour_minor: int, gpu_count: int, seconds: int) -> int:
    """Cost in minor units of the first ``seconds`` seconds of an allocation."""
    exact = Decimal(price_per_hour_minor) * gpu_count * seconds / SECONDS_PER_HOUR
    return round_minor(exact)


def charge_between(price_per_hour_minor: int, gpu_count: int, started_ms: int, t0_ms: int, t1_ms: int) -> int:
    """What a tick moving the billed-until mark from ``t0_ms`` to ``t1_ms`` charges."""
    s0 = billable_seconds(started_ms, t0_ms)
    s1 = billable_seconds(started_ms, t1_ms)
    return cumulative_cost(price_per_hour_minor, gpu_count, s1) - cumulative_cost(price_per_hour_minor, gpu_count, s0)


def latest_affordable_ms(
    allocations: list[tuple[int, int, int, int, int]], budget_minor: int, lo_ms: int, hi_ms: int
) -> int:
    """The latest common cut-off ``T`` in ``[lo_ms, hi_ms]`` such that billing every allocation
    from its billed-until mark up to ``min(T, its end)`` costs at most ``budget_minor`` in total.

    ``allocations`` holds (price_per_hour_minor, gpu_count, started_ms, billed_until_ms, end_ms)
    tuples. The charge is monotone in ``T``, so a binary search over milliseconds is exact.
    """

    def charge(t: int) -> int:
        return sum(charge_between(p, c, s, b, max(b, min(t, e))) for p, c, s, b, e in allocations)

    if charge(hi_ms) <= budget_minor:
        return hi_ms
    lo, hi = lo_ms, hi_ms  # invariant: charge(lo) <= budget (charge(lo_ms) is 0 or affordable)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if charge(mid) <= budget_minor:
            lo = mid
        else:
            hi = mid
    return lo
