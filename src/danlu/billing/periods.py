"""Invoice periods: calendar months in the deployment's time zone (``--timezone``), written YYYY-MM.
A usage interval belongs to the month of its last millisecond. Pure but for reading the zone."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from danlu.context import Platform
from danlu.core.errors import InvalidInput


def zone(p: Platform) -> ZoneInfo:
    return ZoneInfo(p.settings.timezone)


def period_of(ms: int, tz: ZoneInfo) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=tz).strftime("%Y-%m")


def record_period(start_ms: int, end_ms: int, tz: ZoneInfo) -> str:
    """The month of an interval's last millisecond."""
    return period_of(max(start_ms, end_ms - 1), tz)


def next_period(period: str) -> str:
    y, m = int(period[:4]), int(period[5:])
    return f"{y + m // 12}-{m % 12 + 1:02d}"


def period_bounds(period: str, tz: ZoneInfo) -> tuple[int, int]:
    """[start, end) of the month in epoch milliseconds (local midnights, DST included)."""
    check_period(period)
    nxt = next_period(period)
    start = datetime(int(period[:4]), int(period[5:]), 1, tzinfo=tz)
    end = datetime(int(nxt[:4]), int(nxt[5:]), 1, tzinfo=tz)
    return int(start.timestamp() * 1000), int(end.timestamp() * 1000)


def check_period(period: str) -> str:
    ok = len(period) == 7 and period[4] == "-" and period[:4].isdigit() and period[5:].isdigit()
    if not ok or not 1 <= int(period[5:]) <= 12 or not 2000 <= int(period[:4]) <= 2999:
        raise InvalidInput(
            "invalid_period", f"a period is a month written YYYY-MM (2000-01 to 2999-12), e.g. 2026-01, not {period!r}"
        )
    return period
