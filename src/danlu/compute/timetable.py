"""Start/stop schedules of an instance, the pure part (docs/telemetry.md "Schedules"): parsing
``23:00`` and ``mon-fri``, and when a wall-clock time on given weekdays next (or last) happens in
the deployment's time zone.

A schedule is at most two rules sharing one set of weekdays: stop at HH:MM and start at HH:MM
("stop 23:00, start 08:00 on weekdays"). That is the cron-like subset renters asked for; a full
cron expression would add nothing a start/stop pair needs. Times are the deployment's wall clock,
so they follow daylight saving: a time that does not exist that day (02:30 on a spring-forward
night) happens as if the clock had not jumped (03:30 new time); a time that happens twice (fall
back) happens the first time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from danlu.core import weekdays
from danlu.core.errors import InvalidInput
from danlu.core.weekdays import DAYS_HELP, days_text

HHMM = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")


def parse_time(text: str) -> tuple[int, int]:
    m = HHMM.fullmatch(text.strip())
    if m is None:
        raise InvalidInput("invalid_schedule", f"{text!r} is not a time of day; write HH:MM, e.g. 23:00 or 08:30")
    return int(m.group(1)), int(m.group(2))


def parse_days(text: str) -> frozenset[int]:
    """``mon-fri``, ``mon,wed,fri``, ``sat-sun``, ``daily``, ``weekdays``, ``weekends`` → weekday numbers (mon = 0)."""
    return weekdays.parse_days(text, "invalid_schedule")


def _instant(day: date, hm: tuple[int, int], tz: ZoneInfo) -> int:
    """Epoch ms of ``hm`` on ``day`` in ``tz``: fold 0, so a repeated time is its first instance
    and a skipped one is read with the offset before the jump (02:30 → 03:30 new time; PEP 495)."""
    return int(datetime(day.year, day.month, day.day, hm[0], hm[1], tzinfo=tz).timestamp() * 1000)


def _candidates(hm: tuple[int, int], days: frozenset[int], tz: ZoneInfo, around_ms: int) -> list[int]:
    today = datetime.fromtimestamp(around_ms / 1000, tz).date()
    out = []
    for k in range(-8, 9):
        day = today + timedelta(days=k)
        if day.weekday() in days:
            out.append(_instant(day, hm, tz))
    return sorted(out)


def next_at(hm: tuple[int, int], days: frozenset[int], tz: ZoneInfo, after_ms: int) -> int | None:
    """The first time ``hm`` happens on one of ``days`` strictly after ``after_ms``."""
    return next((t for t in _candidates(hm, days, tz, after_ms) if t > after_ms), None)


def last_at(hm: tuple[int, int], days: frozenset[int], tz: ZoneInfo, upto_ms: int) -> int | None:
    """The last time ``hm`` happened on one of ``days`` at or before ``upto_ms``."""
    return next((t for t in reversed(_candidates(hm, days, tz, upto_ms)) if t <= upto_ms), None)


@dataclass(frozen=True)
class Timetable:
    stop: tuple[int, int] | None
    start: tuple[int, int] | None
    days: frozenset[int]

    @classmethod
    def parse(cls, stop: str | None, start: str | None, days: str | None) -> Timetable:
        if not stop and not start:
            raise InvalidInput("invalid_schedule", "give a stop time, a start time or both (HH:MM)")
        tt = cls(parse_time(stop) if stop else None, parse_time(start) if start else None, parse_days(days or "daily"))
        if not tt.days:
            raise InvalidInput("invalid_schedule", f"no day given; {DAYS_HELP}")
        if tt.stop is not None and tt.stop == tt.start:
            raise InvalidInput("invalid_schedule", "the stop and start times are the same; they must differ")
        return tt

    def due(self, tz: ZoneInfo, since_ms: int, now_ms: int) -> str | None:
        """What the schedule wants done now, given that it last acted on everything up to
        ``since_ms``: "stop", "start" or None. When both passed (the server was down), the later
        one wins: a server back at 23:30 after missing both 08:00 and 23:00 stops, never starts."""
        last = {}
        for action, hm in (("stop", self.stop), ("start", self.start)):
            if hm is not None:
                t = last_at(hm, self.days, tz, now_ms)
                if t is not None and t > since_ms:
                    last[action] = t
        return max(last, key=lambda a: last[a]) if last else None

    def next_change(self, tz: ZoneInfo, after_ms: int) -> tuple[str, int] | None:
        """The next action and its time, for display."""
        nxt = [
            (action, t)
            for action, hm in (("stop", self.stop), ("start", self.start))
            if hm is not None and (t := next_at(hm, self.days, tz, after_ms)) is not None
        ]
        return min(nxt, key=lambda x: x[1]) if nxt else None

    def describe(self, tz_name: str) -> str:
        parts = []
        if self.stop is not None:
            parts.append(f"stop {self.stop[0]:02d}:{self.stop[1]:02d}")
        if self.start is not None:
            parts.append(f"start {self.start[0]:02d}:{self.start[1]:02d}")
        return f"{', '.join(parts)} {days_text(self.days)} ({tz_name})"
