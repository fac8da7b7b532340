"""The only rater: what an allocation's usage costs. Pure, exact, cumulative.

The live meter, the simulator, the scheduler's deferral and the advisor's estimates all rate
through this module (the price model itself, prices and tariffs, is :mod:`danlu.billing.pricing`).

* An allocation is rated by a :class:`Rate`: its price per GPU-hour, GPU count, start, plan, the
  tariffs in force for it and a discount in basis points.
* Usage is billed in **whole seconds from the allocation's start**: second ``k`` covers
  ``[started + 1000k, started + 1000(k+1))`` and a started second is not billed until it
  completes, so a renter never pays for time not yet used.
* :func:`segments` splits whole seconds at tariff boundaries (local wall time in each tariff's
  zone, so DST days have 23 or 25 hours). A boundary inside a second moves to the end of that
  second: **a second is rated at the rate in force when it started**.
* Exact amounts are :class:`~fractions.Fraction` minor units; the discount applies to the exact
  amount. **Rounding happens once, on the cumulative sum** (:func:`cumulative_cost`, half up), and a
  meter tick from ``t0`` to ``t1`` charges ``cost(s(t1)) - cost(s(t0))`` (:func:`charge_between`).
  Every tick charges a difference of the same cumulative function, so the sum over any sequence
  of ticks equals the cost of the whole interval: rounding never accumulates, however often the
  meter runs, with or without tariffs.
"""

from __future__ import annotations

import functools
from bisect import bisect_right
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

from danlu.billing.pricing import Plan, PriceBook, Tariff, active_tariff, tariff_boundaries
from danlu.core.errors import InvalidInput
from danlu.core.money import round_minor

MS_PER_SECOND = 1000
SECONDS_PER_HOUR = 3600
MS_PER_DAY = 86_400_000
BASIS_POINTS = 10_000


@dataclass(frozen=True, slots=True)
class Rate:
    """How one allocation is rated. ``tariffs`` are the time-of-day rules that may apply to it
    (those not applying to ``plan`` are ignored); ``discount_bp`` (0..10000) is taken off the exact
    amount before the single rounding."""

    price_per_hour_minor: int
    gpu_count: int
    started_ms: int
    plan: Plan = Plan.ON_DEMAND
    tariffs: tuple[Tariff, ...] = ()
    discount_bp: int = 0
    # The price is per GPU per this many seconds: an hour for GPUs; stored workspaces are priced
    # per MiB per month (danlu.billing.storage), with the same exact, cumulative arithmetic.
    seconds_per_unit: int = SECONDS_PER_HOUR

    def __post_init__(self) -> None:
        if self.price_per_hour_minor < 0 or self.gpu_count < 0:
            raise InvalidInput("invalid_rate", "a rate needs a price and a GPU count of at least 0")
        if not 0 <= self.discount_bp <= BASIS_POINTS:
            raise InvalidInput("invalid_discount", "a discount is 0 to 10000 basis points (0 % to 100 %)")
        if self.seconds_per_unit <= 0:
            raise InvalidInput("invalid_rate", "a price is per a positive number of seconds")


@dataclass(frozen=True, slots=True)
class RatedPart:
    """Whole seconds of an allocation at one price: ``[start_ms, end_ms)``, ``seconds`` long."""

    start_ms: int
    end_ms: int
    seconds: int
    multiplier: Decimal
    tariff: str | None
    exact: Fraction  # exact minor units after the discount, never rounded on its own
    gross_exact: Fraction  # before the discount


@dataclass(frozen=True, slots=True)
class RatedTotal:
    """An interval rated from its own start: ``total_minor`` is ``cumulative_cost(rate, seconds)``."""

    rate: Rate
    seconds: int
    parts: tuple[RatedPart, ...]
    exact: Fraction
    total_minor: int


# (tariff name or None, multiplier, multiplier as a Fraction): the price in force on a stretch of time.
_Price = tuple[str | None, Decimal, Fraction]
_FLAT: _Price = (None, Decimal(1), Fraction(1))


def round_half_up(value: Fraction) -> int:
    """Exact minor units to an int, half away from zero (the ROUND_HALF_UP of :func:`round_minor`)."""
    n, d = value.numerator, value.denominator
    q = (2 * abs(n) + d) // (2 * d)
    return q if n >= 0 else -q


def billable_seconds(started_ms: int, at_ms: int) -> int:
    return max(0, at_ms - started_ms) // MS_PER_SECOND


def _price_of(tariff: Tariff | None) -> _Price:
    if tariff is None:
        return _FLAT
    return (tariff.name, tariff.multiplier, Fraction(tariff.multiplier))


@functools.lru_cache(maxsize=16_384)
def _day_timeline(tariffs: tuple[Tariff, ...], plan: Plan, day: int) -> tuple[tuple[int, ...], tuple[_Price, ...]]:
    """The prices in force during the UTC day ``day`` (epoch days): ``edges[i]`` is where
    ``prices[i]`` starts, ``edges[0]`` the day's start; consecutive prices differ."""
    lo = day * MS_PER_DAY
    applicable = [t for t in tariffs if t.applies_to(plan)]
    edges = [lo]
    prices = [_price_of(active_tariff(applicable, plan, lo))]
    for edge in tariff_boundaries(applicable, lo, lo + MS_PER_DAY):
        price = _price_of(active_tariff(applicable, plan, edge))
        if price != prices[-1]:
            edges.append(edge)
            prices.append(price)
    return tuple(edges), tuple(prices)


def _pieces(rate: Rate, s0: int, s1: int) -> list[tuple[int, int, _Price]]:
    """Seconds ``[s0, s1)`` of ``rate``'s allocation as (first second, end second, price) runs,
    each second priced as at its start."""
    if s1 <= s0:
        return []
    if not rate.tariffs or not any(t.applies_to(rate.plan) for t in rate.tariffs):
        return [(s0, s1, _FLAT)]
    started = rate.started_ms
    first = started + s0 * MS_PER_SECOND  # start of the first second
    last = started + (s1 - 1) * MS_PER_SECOND  # start of the last second
    out: list[tuple[int, int, _Price]] = []
    day = first // MS_PER_DAY
    edges, prices = _day_timeline(rate.tariffs, rate.plan, day)
    i = bisect_right(edges, first) - 1
    current, k_from = prices[i], s0
    i += 1
    while True:
        while i < len(edges):
            edge = edges[i]
            if edge > last:
                break
            price = prices[i]
            i += 1
            if price == current:
                continue  # a day's first edge where nothing changes
            # the first second starting at or after the edge is the first one at the new price
            k = -(-(edge - started) // MS_PER_SECOND)
            if k > k_from:
                _append(out, k_from, k, current)
                k_from = k
            current = price
        day += 1
        if day * MS_PER_DAY > last:
            break
        edges, prices = _day_timeline(rate.tariffs, rate.plan, day)
        i = 0
    _append(out, k_from, s1, current)
    return out


def _append(out: list[tuple[int, int, _Price]], k0: int, k1: int, price: _Price) -> None:
    """Add a run, merged into the previous one when the price is the same (a window shorter than
    a second opens and closes inside one second)."""
    if out and out[-1][2] == price:
        out[-1] = (out[-1][0], k1, price)
    else:
        out.append((k0, k1, price))


def _gross(rate: Rate, seconds: int, price: _Price) -> Fraction:
    mult = price[2]
    return Fraction(
        rate.price_per_hour_minor * rate.gpu_count * seconds * mult.numerator, rate.seconds_per_unit * mult.denominator
    )


def _weight(rate: Rate, s0: int, s1: int) -> Fraction:
    """Seconds ``[s0, s1)`` weighted by their multipliers (a plain count where no tariff is in force)."""
    return sum((price[2] * (k1 - k0) for k0, k1, price in _pieces(rate, s0, s1)), Fraction(0))


def _exact_from_weight(rate: Rate, weight: Fraction) -> Fraction:
    return _discounted(rate, weight * Fraction(rate.price_per_hour_minor * rate.gpu_count, rate.seconds_per_unit))


# The weight of the last prefix rated per rate: the meter's next tick starts where its last one
# ended, so an allocation running for months is not re-split from its start every tick. Exact
# (a cache of Fractions, never of rounded amounts), bounded, and only ever extended forwards.
_PREFIX: dict[Rate, tuple[int, Fraction]] = {}
_PREFIX_MAX = 100_000


def _prefix_weight(rate: Rate, seconds: int) -> Fraction:
    memo = _PREFIX.get(rate)
    if memo is not None and memo[0] <= seconds:
        weight = memo[1] + _weight(rate, memo[0], seconds)
    else:
        weight = _weight(rate, 0, seconds)
    if memo is None or memo[0] <= seconds:
        if len(_PREFIX) >= _PREFIX_MAX:
            _PREFIX.clear()
        _PREFIX[rate] = (seconds, weight)
    return weight


def _discounted(rate: Rate, gross: Fraction) -> Fraction:
    if rate.discount_bp == 0:
        return gross
    return gross * Fraction(BASIS_POINTS - rate.discount_bp, BASIS_POINTS)


def segments(rate: Rate, s0: int, s1: int) -> list[RatedPart]:
    """Whole seconds ``[s0, s1)`` of the allocation, split where the price changes (a boundary
    inside a second moves to that second's end). The parts tile ``[started + 1000 s0, started + 1000 s1)``."""
    s0 = max(0, s0)
    parts = []
    for k0, k1, price in _pieces(rate, s0, s1):
        gross = _gross(rate, k1 - k0, price)
        parts.append(
            RatedPart(
                rate.started_ms + k0 * MS_PER_SECOND,
                rate.started_ms + k1 * MS_PER_SECOND,
                k1 - k0,
                price[1],
                price[0],
                _discounted(rate, gross),
                gross,
            )
        )
    return parts


def exact_cost(rate: Rate, seconds: int) -> Fraction:
    """The exact (unrounded) cost in minor units of the first ``seconds`` seconds."""
    if seconds <= 0:
        return Fraction(0)
    return _exact_from_weight(rate, _prefix_weight(rate, seconds))


def _is_flat(rate: Rate) -> bool:
    return not rate.tariffs and rate.discount_bp == 0


def cumulative_cost(rate: Rate, seconds: int) -> int:
    """Cost in minor units of the first ``seconds`` seconds of an allocation: one rounding."""
    if _is_flat(rate):
        # the flat fast path: the live meter's formula since issue 1 (identical results)
        if rate.seconds_per_unit != SECONDS_PER_HOUR:
            return round_half_up(Fraction(rate.price_per_hour_minor * rate.gpu_count * seconds, rate.seconds_per_unit))
        exact = Decimal(rate.price_per_hour_minor) * rate.gpu_count * seconds / SECONDS_PER_HOUR
        return round_minor(exact)
    return round_half_up(exact_cost(rate, seconds))


def charge_between(rate: Rate, t0_ms: int, t1_ms: int) -> int:
    """What a tick moving the billed-until mark from ``t0_ms`` to ``t1_ms`` charges."""
    s0 = billable_seconds(rate.started_ms, t0_ms)
    s1 = billable_seconds(rate.started_ms, t1_ms)
    if s1 == s0:
        return 0
    before = cumulative_cost(rate, s0)  # first: it extends the last tick's prefix, s1 extends this one
    return cumulative_cost(rate, s1) - before


def latest_affordable_ms(allocations: list[tuple[Rate, int, int]], budget_minor: int, lo_ms: int, hi_ms: int) -> int:
    """The latest common cut-off ``T`` in ``[lo_ms, hi_ms]`` such that billing every allocation
    from its billed-until mark up to ``min(T, its end)`` costs at most ``budget_minor`` in total.

    ``allocations`` holds (rate, billed_until_ms, end_ms) tuples. The charge is monotone in ``T``,
    so a binary search over milliseconds is exact.
    """
    # Each allocation's prefix up to its mark is rated once; the search only rates what follows it.
    base = []
    for rate, billed, end in allocations:
        s_billed = billable_seconds(rate.started_ms, billed)
        weight = Fraction(0) if _is_flat(rate) else _prefix_weight(rate, s_billed)
        base.append((rate, billed, end, s_billed, weight, cumulative_cost(rate, s_billed)))

    def charge(t: int) -> int:
        total = 0
        for rate, billed, end, s_billed, weight, already in base:
            s = billable_seconds(rate.started_ms, max(billed, min(t, end)))
            if s == s_billed:
                continue
            if _is_flat(rate):
                total += cumulative_cost(rate, s) - already
            else:
                exact = _exact_from_weight(rate, weight + _weight(rate, s_billed, s))
                total += round_half_up(exact) - already
        return total

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


def rate_from_book(
    book: PriceBook, gpu_model: str, plan: Plan, started_ms: int, gpus: int, discount_bp: int = 0
) -> Rate:
    """The :class:`Rate` of ``gpus`` GPUs of ``gpu_model`` on ``plan`` started at ``started_ms``:
    the book's price and the book's tariffs that apply to ``plan``."""
    tariffs = tuple(t for t in book.tariffs if t.applies_to(plan))
    return Rate(book.price(gpu_model, plan), gpus, started_ms, plan, tariffs, discount_bp)


def rate_interval(book: PriceBook, gpu_model: str, plan: Plan, started_ms: int, end_ms: int, gpus: int) -> RatedTotal:
    """Rate ``[started_ms, end_ms)`` as an allocation of its own (whole seconds from ``started_ms``):
    what the simulator bills, the deferral compares and the advisor quotes."""
    if end_ms < started_ms or gpus < 0:
        raise InvalidInput("invalid_interval", "a rated interval needs start <= end and gpus >= 0")
    rate = rate_from_book(book, gpu_model, plan, started_ms, gpus)
    seconds = billable_seconds(started_ms, end_ms)
    parts = tuple(segments(rate, 0, seconds))
    exact = sum((p.exact for p in parts), Fraction(0))
    return RatedTotal(rate, seconds, parts, exact, cumulative_cost(rate, seconds))
