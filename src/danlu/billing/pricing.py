"""The price model: per-GPU-hour prices per plan and GPU model, time-of-day tariffs, and rating.

Pure: no I/O, no clock. Both the simulator and the live engine rate usage through :func:`rate`.

Units and exactness
-------------------
* Prices are ``int`` minor units per GPU-hour. Tariff multipliers are ``Decimal``.
* Time is ``int`` epoch milliseconds; intervals are half-open ``[start_ms, end_ms)``.
* A usage interval is split exactly at tariff boundaries (local wall-clock times in the tariff's
  timezone). Each segment carries its *exact* amount as a :class:`~fractions.Fraction` of minor units.
* **Rounding happens once per rated interval**: ``total_minor = round_minor(sum(exact amounts))``
  (ROUND_HALF_UP, see :mod:`danlu.core.money`). Segments are never rounded on their own, so
  ``rate([a, c)).exact == rate([a, b)).exact + rate([b, c)).exact`` holds exactly and the rounded
  totals differ by at most one minor unit per extra interval.

Plans
-----
:class:`Plan` names how time is priced. Each plan has a rater in :data:`RATERS`; later plans
(packages, reserved commitments) add an enum member and a rater without touching callers.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal, localcontext
from enum import StrEnum
from fractions import Fraction
from zoneinfo import ZoneInfo

from danlu.core.errors import InvalidInput
from danlu.core.money import round_minor

MS_PER_HOUR = 3_600_000
DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Plan(StrEnum):
    ON_DEMAND = "on-demand"
    INTERRUPTIBLE = "interruptible"


@dataclass(frozen=True, slots=True)
class Tariff:
    """A time-of-day rule: on ``days`` (0 = Monday) from ``start`` to ``end`` local time, prices
    are multiplied by ``multiplier``. ``end <= start`` means the window wraps past midnight into
    the next day (the window belongs to the day it starts on). ``plans`` limits the rule to some
    plans (empty = all). ``synthetic`` marks an assumption rather than an observed price."""

    name: str
    days: frozenset[int]
    start: time
    end: time
    multiplier: Decimal
    timezone: str = "UTC"
    plans: frozenset[Plan] = frozenset()
    synthetic: bool = False

    def applies_to(self, plan: Plan) -> bool:
        return not self.plans or plan in self.plans

    def windows_on(self, day: datetime) -> list[tuple[datetime, datetime]]:
        """Local windows starting on the local calendar day ``day`` (a tz-aware midnight)."""
        if day.weekday() not in self.days:
            return []
        tz = day.tzinfo
        begin = datetime.combine(day.date(), self.start, tzinfo=tz)
        end_day = day.date() if self.end > self.start else day.date() + timedelta(days=1)
        return [(begin, datetime.combine(end_day, self.end, tzinfo=tz))]


@dataclass(frozen=True, slots=True)
class PriceBook:
    """Prices in one currency: ``prices[(gpu_model, plan)]`` in minor units per GPU-hour."""

    currency: str
    prices: Mapping[tuple[str, Plan], int]
    tariffs: tuple[Tariff, ...] = ()

    def price(self, gpu_model: str, plan: Plan) -> int:
        try:
            return self.prices[(gpu_model, plan)]
        except KeyError:
            raise InvalidInput(
                "no_price", f"no {plan.value} price for GPU model {gpu_model}; set one in the price book"
            ) from None

    def has_price(self, gpu_model: str, plan: Plan) -> bool:
        return (gpu_model, plan) in self.prices

    def without_tariffs(self) -> PriceBook:
        return PriceBook(self.currency, self.prices, ())


@dataclass(frozen=True, slots=True)
class Segment:
    start_ms: int
    end_ms: int
    multiplier: Decimal
    tariff: str | None
    exact: Fraction  # exact minor units, never rounded on its own


@dataclass(frozen=True, slots=True)
class Rating:
    segments: tuple[Segment, ...]
    exact: Fraction = field(default=Fraction(0))

    @property
    def total_minor(self) -> int:
        """The one rounding of this interval (ROUND_HALF_UP via :func:`round_minor`)."""
        return round_minor_fraction(self.exact)


def round_minor_fraction(value: Fraction) -> int:
    with localcontext() as ctx:
        ctx.prec = 60
        return round_minor(Decimal(value.numerator) / Decimal(value.denominator))


def _to_ms(dt: datetime) -> int:
    delta = dt.astimezone(UTC) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _from_ms(ms: int, tz: ZoneInfo) -> datetime:
    return (_EPOCH + timedelta(milliseconds=ms)).astimezone(tz)


def tariff_boundaries(tariffs: Iterable[Tariff], start_ms: int, end_ms: int) -> list[int]:
    """All instants in ``(start_ms, end_ms)`` where some tariff window opens or closes, sorted."""
    points: set[int] = set()
    for tariff in tariffs:
        tz = ZoneInfo(tariff.timezone)
        first = _from_ms(start_ms, tz).date() - timedelta(days=1)
        last = _from_ms(end_ms, tz).date()
        day = first
        while day <= last:
            midnight = datetime.combine(day, time(0), tzinfo=tz)
            for begin, end in tariff.windows_on(midnight):
                for edge in (_to_ms(begin), _to_ms(end)):
                    if start_ms < edge < end_ms:
                        points.add(edge)
            day += timedelta(days=1)
    return sorted(points)


def active_tariff(tariffs: Iterable[Tariff], plan: Plan, at_ms: int) -> Tariff | None:
    """The tariff in force at ``at_ms`` for ``plan``: the lowest multiplier among matching windows
    (overlapping rules never stack; the renter gets the best one)."""
    best: Tariff | None = None
    for tariff in tariffs:
        if not tariff.applies_to(plan):
            continue
        tz = ZoneInfo(tariff.timezone)
        local = _from_ms(at_ms, tz)
        for back in (0, 1):
            day = datetime.combine(local.date() - timedelta(days=back), time(0), tzinfo=tz)
            for begin, end in tariff.windows_on(day):
                if _to_ms(begin) <= at_ms < _to_ms(end) and (best is None or tariff.multiplier < best.multiplier):
                    best = tariff
    return best


Rater = Callable[[PriceBook, str, Plan, int, int, int], Rating]


def rate_hourly(book: PriceBook, gpu_model: str, plan: Plan, start_ms: int, end_ms: int, gpus: int) -> Rating:
    """Per-GPU-hour pricing with time-of-day tariffs: the rater of on-demand and interruptible."""
    if end_ms < start_ms or gpus < 0:
        raise InvalidInput("invalid_interval", "a rated interval needs start <= end and gpus >= 0")
    price = book.price(gpu_model, plan)
    tariffs = [t for t in book.tariffs if t.applies_to(plan)]
    edges = [start_ms, *tariff_boundaries(tariffs, start_ms, end_ms), end_ms]
    segments: list[Segment] = []
    total = Fraction(0)
    for seg_start, seg_end in itertools.pairwise(edges):
        if seg_end <= seg_start:
            continue
        tariff = active_tariff(tariffs, plan, seg_start)
        multiplier = tariff.multiplier if tariff else Decimal(1)
        exact = Fraction(price * gpus * (seg_end - seg_start), MS_PER_HOUR) * Fraction(multiplier)
        total += exact
        segments.append(Segment(seg_start, seg_end, multiplier, tariff.name if tariff else None, exact))
    return Rating(tuple(segments), total)


RATERS: dict[Plan, Rater] = {Plan.ON_DEMAND: rate_hourly, Plan.INTERRUPTIBLE: rate_hourly}


def rate(book: PriceBook, gpu_model: str, plan: Plan, start_ms: int, end_ms: int, gpus: int) -> Rating:
    """Rate ``gpus`` GPUs of ``gpu_model`` used over ``[start_ms, end_ms)`` under ``plan``."""
    return RATERS[plan](book, gpu_model, plan, start_ms, end_ms, gpus)


def next_window_start(tariffs: Iterable[Tariff], plan: Plan, at_ms: int, horizon_ms: int) -> int | None:
    """The first instant in ``(at_ms, at_ms + horizon_ms]`` where a tariff for ``plan`` opens."""
    applicable = [t for t in tariffs if t.applies_to(plan)]
    for edge in tariff_boundaries(applicable, at_ms, at_ms + horizon_ms + 1):
        if active_tariff(applicable, plan, edge) is not None:
            return edge
    return None


def parse_tariff(raw: Mapping[str, object], default_timezone: str = "UTC") -> Tariff:
    """A tariff from its JSON form: ``{"name", "days": ["mon",…], "from": "00:00", "to": "08:00",
    "price_multiplier": "0.6", "timezone"?, "plans"?, "synthetic"?}``."""
    try:
        days = frozenset(DAY_NAMES.index(str(d).lower()[:3]) for d in raw["days"])  # type: ignore[attr-defined]
        multiplier = Decimal(str(raw["price_multiplier"]))
        start = time.fromisoformat(str(raw["from"]))
        end = time.fromisoformat(str(raw["to"]))
        plans = frozenset(Plan(str(p)) for p in raw.get("plans", ()))  # type: ignore[attr-defined]
    except (KeyError, ValueError, TypeError, ArithmeticError) as exc:
        raise InvalidInput(
            "invalid_tariff", f"tariff {raw.get('name')!r} is malformed ({exc}); see docs/scheduling.md"
        ) from None
    if multiplier < 0:
        raise InvalidInput("invalid_tariff", "a tariff multiplier must not be negative")
    return Tariff(
        name=str(raw.get("name", "tariff")),
        days=days,
        start=start,
        end=end,
        multiplier=multiplier,
        timezone=str(raw.get("timezone", default_timezone)),
        plans=plans,
        synthetic=bool(raw.get("synthetic", False)),
    )
