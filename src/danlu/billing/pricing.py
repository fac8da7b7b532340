"""The price model: per-GPU-hour prices per plan and GPU model, and time-of-day tariffs.

Pure: no I/O, no clock. This module says what a GPU-hour costs and when a tariff is in force; it
does not rate usage. Rating (whole seconds, tariff parts, the one rounding) is
:mod:`danlu.billing.rating`, the only rater, used by the live meter, the simulator and the advisor.

Units
-----
* Prices are ``int`` minor units per GPU-hour. Tariff multipliers are ``Decimal``.
* Time is ``int`` epoch milliseconds; intervals are half-open ``[start_ms, end_ms)``.
* A tariff's window is local wall-clock time in its timezone (``zoneinfo``), so on DST days a
  local day has 23 or 25 hours; :func:`tariff_boundaries` gives the exact instants where windows
  open and close, :func:`active_tariff` the rule in force at an instant.

Plans
-----
:class:`Plan` names how time is priced; :class:`PriceBook` holds a price per (GPU model, plan).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal
from enum import StrEnum
from zoneinfo import ZoneInfo

from danlu.core.errors import InvalidInput
from danlu.core.weekdays import parse_days

MS_PER_HOUR = 3_600_000
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
        days = parse_days(",".join(str(d) for d in raw["days"]), "invalid_tariff")  # type: ignore[attr-defined]
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
