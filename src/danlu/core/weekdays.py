"""Weekdays as people write them, one parser for every rule that names days (schedules, tariffs):
``mon-fri``, ``mon,wed,fri``, ``fri-mon`` (wraps), ``daily``, ``weekdays``, ``weekends``. Pure.

Only whole names: ``monkey`` is not Monday (tariffs once took any word's first three letters, and
``--days mon-fri`` was stored as Monday alone)."""

from __future__ import annotations

from danlu.core.errors import InvalidInput

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
ALIASES = {
    "daily": frozenset(range(7)),
    "weekdays": frozenset(range(5)),
    "weekends": frozenset({5, 6}),
}
DAYS_HELP = "weekdays as mon-fri, sat,sun, daily, weekdays or weekends"


def parse_days(text: str, code: str) -> frozenset[int]:
    """The weekday numbers (mon = 0) ``text`` names; ``InvalidInput(code)`` for anything else."""
    days: set[int] = set()
    for part in text.lower().replace(" ", "").split(","):
        if part in ALIASES:
            days |= ALIASES[part]
            continue
        ends = part.split("-")
        if len(ends) > 2 or any(e not in DAY_NAMES for e in ends):
            raise InvalidInput(code, f"{part!r} is not a day; {DAYS_HELP}")
        a, b = DAY_NAMES.index(ends[0]), DAY_NAMES.index(ends[-1])
        days |= {(a + k) % 7 for k in range((b - a) % 7 + 1)}  # wraps: fri-mon is fri, sat, sun, mon
    return frozenset(days)


def days_text(days: frozenset[int]) -> str:
    for name, value in ALIASES.items():
        if days == value:
            return name
    return ",".join(DAY_NAMES[d] for d in sorted(days))
