"""Off-peak tariffs, live: the operator's time-of-day rules, in the deployment's time zone.

* A rule: days of the week, from–to local time (``to <= from`` wraps past midnight), a price
  multiplier (``0.5`` = −50 %), optionally only some plans; it applies to every GPU model. Overlapping rules
  never stack: the cheapest one in force applies (danlu.billing.pricing.active_tariff).
* Rules are never edited; retiring one stamps ``retired_at_ms``. Each allocation records the rules
  in force when it started (``allocations.tariffs_json``) and is rated by them for its whole life
  by the one rater (danlu.billing.rating), split exactly at every boundary and DST change.
* ``offers`` shows the price now and the next cheaper window; the scheduler's deferral reads the
  same rules (:func:`current_tariffs`).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from datetime import time
from decimal import Decimal, InvalidOperation

from sqlalchemy import select
from sqlalchemy.orm import Session

from danlu.billing.caps import zone
from danlu.billing.pricing import Plan, Tariff, active_tariff, next_window_start
from danlu.context import Platform
from danlu.core.errors import InvalidInput, NotFound
from danlu.core.weekdays import DAY_NAMES, parse_days
from danlu.db.models import TariffRule

HORIZON_MS = 7 * 86_400_000  # how far ahead `offers` looks for a cheaper window


@dataclass(frozen=True)
class RuleView:
    id: int
    name: str
    days: list[str]
    start: str
    end: str
    multiplier: str
    plans: list[str]
    created_at_ms: int
    retired_at_ms: int | None


def _view(r: TariffRule) -> RuleView:
    return RuleView(
        r.id,
        r.name,
        r.days.split(","),
        r.start,
        r.end,
        r.multiplier,
        [x for x in r.plans.split(",") if x],
        r.created_at_ms,
        r.retired_at_ms,
    )


def _check(name: str, days: list[str], start: str, end: str, multiplier: str, plans: list[str]) -> tuple[str, str]:
    if not 1 <= len(name) <= 64 or "\x00" in name:
        raise InvalidInput("invalid_tariff", "a tariff's name is 1 to 64 characters")
    if not days or not all(d.strip() for d in days):
        raise InvalidInput("invalid_tariff", "give the days the window starts on, e.g. --days mon-fri")
    picked = [DAY_NAMES[d] for d in sorted(parse_days(",".join(days), "invalid_tariff"))]  # whole names only
    for t in (start, end):
        try:
            if len(t) != 5:
                raise ValueError
            time.fromisoformat(t)
        except ValueError:
            raise InvalidInput("invalid_tariff", f"times are HH:MM in 24 h, e.g. 23:00 (got {t!r})") from None
    if start == end:
        raise InvalidInput("invalid_tariff", "a window needs from and to to differ (to <= from wraps past midnight)")
    try:
        mult = Decimal(multiplier) if len(multiplier) <= 16 else Decimal(-1)
    except InvalidOperation:
        mult = Decimal(-1)
    if not mult.is_finite() or not (0 <= mult < 1) or mult.as_tuple().exponent < -4:  # type: ignore[operator]
        raise InvalidInput(
            "invalid_tariff", "an off-peak multiplier is from 0 to below 1 with at most 4 decimals, e.g. 0.5 for -50%"
        )
    for plan in plans:
        if plan not in (Plan.ON_DEMAND.value, Plan.INTERRUPTIBLE.value):
            raise InvalidInput("invalid_tariff", "plans are on-demand and interruptible")
    return ",".join(picked), str(mult)


def add_rule(
    p: Platform,
    name: str,
    days: list[str],
    start: str,
    end: str,
    multiplier: str,
    plans: list[str] | None = None,
) -> RuleView:
    day_list, mult = _check(name, days, start, end, multiplier, plans or [])
    with p.db.write() as s:
        row = TariffRule(
            name=name,
            days=day_list,
            start=start,
            end=end,
            multiplier=mult,
            plans=",".join(plans or []),
            created_at_ms=p.clock.now_ms(),
        )
        s.add(row)
        s.flush()
        return _view(row)


def list_rules(p: Platform, *, include_retired: bool = False) -> list[RuleView]:
    with p.db.read() as s:
        stmt = select(TariffRule).order_by(TariffRule.id)
        if not include_retired:
            stmt = stmt.where(TariffRule.retired_at_ms.is_(None))
        return [_view(r) for r in s.scalars(stmt)]


def retire_rule(p: Platform, rule_id: int) -> RuleView:
    """Stop offering a rule from now on; allocations already running keep it (never re-rated)."""
    with p.db.write() as s:
        row = s.get(TariffRule, rule_id, with_for_update=True)
        if row is None or row.retired_at_ms is not None:
            raise NotFound("tariff_not_found", f"no tariff rule {rule_id} in force; see `danlu admin tariff list`")
        row.retired_at_ms = p.clock.now_ms()
        s.flush()
        return _view(row)


def _in_force(session: Session, at_ms: int) -> list[TariffRule]:
    return list(
        session.scalars(
            select(TariffRule)
            .where(
                TariffRule.created_at_ms <= at_ms,
                (TariffRule.retired_at_ms.is_(None)) | (TariffRule.retired_at_ms > at_ms),
            )
            .order_by(TariffRule.id)
        )
    )


def _as_tariff(r: TariffRule, tz: str) -> Tariff:
    return Tariff(
        name=r.name,
        days=frozenset(DAY_NAMES.index(d) for d in r.days.split(",")),
        start=time.fromisoformat(r.start),
        end=time.fromisoformat(r.end),
        multiplier=Decimal(r.multiplier),
        timezone=tz,
        plans=frozenset(Plan(x) for x in r.plans.split(",") if x),
    )


def current_tariffs(session: Session, at_ms: int) -> tuple[Tariff, ...]:
    """The rules in force at ``at_ms`` (every plan's; a Tariff knows its plans)."""
    tz = zone(session).key
    return tuple(_as_tariff(r, tz) for r in _in_force(session, at_ms))


def snapshot(session: Session, plan: str, at_ms: int) -> str:
    """What a new allocation records: the rules in force for it, as JSON ("" when none)."""
    tz = zone(session).key
    rows = [
        r
        for r in _in_force(session, at_ms)
        if not r.plans or plan in r.plans.split(",")
    ]
    if not rows:
        return ""
    return json.dumps(
        [{"name": r.name, "days": r.days, "from": r.start, "to": r.end, "m": r.multiplier, "tz": tz} for r in rows],
        separators=(",", ":"),
    )


@functools.lru_cache(maxsize=4096)
def parse_snapshot(raw: str) -> tuple[Tariff, ...]:
    if not raw:
        return ()
    return tuple(
        Tariff(
            name=d["name"],
            days=frozenset(DAY_NAMES.index(x) for x in d["days"].split(",")),
            start=time.fromisoformat(d["from"]),
            end=time.fromisoformat(d["to"]),
            multiplier=Decimal(d["m"]),
            timezone=d["tz"],
        )
        for d in json.loads(raw)
    )


@dataclass(frozen=True)
class PriceNow:
    multiplier: Decimal  # in force now (1 = list price)
    tariff: str | None
    next_cheaper_ms: int | None  # when a cheaper window opens next (within a week)
    next_multiplier: Decimal | None


def price_now(tariffs: tuple[Tariff, ...], plan: Plan, now_ms: int) -> PriceNow:
    """The multiplier in force now and the next window cheaper than it."""
    applicable = [t for t in tariffs if t.applies_to(plan)]
    current = active_tariff(applicable, plan, now_ms)
    mult = current.multiplier if current else Decimal(1)
    at = now_ms
    while True:
        nxt = next_window_start(applicable, plan, at, now_ms + HORIZON_MS - at)
        if nxt is None or nxt > now_ms + HORIZON_MS:
            return PriceNow(mult, current.name if current else None, None, None)
        found = active_tariff(applicable, plan, nxt)
        if found is not None and found.multiplier < mult:
            return PriceNow(mult, current.name if current else None, nxt, found.multiplier)
        at = nxt
