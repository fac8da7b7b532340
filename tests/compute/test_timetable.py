"""Start/stop timetables, the pure part: parsing, next and last boundaries across weekdays, time
zones and daylight saving, and which action wins after a gap."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from danlu.compute.timetable import Timetable, last_at, next_at, parse_days, parse_time
from danlu.core.errors import InvalidInput
from danlu.core.weekdays import days_text

SH = ZoneInfo("Asia/Shanghai")
BERLIN = ZoneInfo("Europe/Berlin")


def ms(text: str, tz: ZoneInfo) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=tz).timestamp() * 1000)


def local(t: int | None, tz: ZoneInfo) -> str:
    assert t is not None
    return datetime.fromtimestamp(t / 1000, tz).strftime("%a %Y-%m-%d %H:%M %z")


@pytest.mark.parametrize(
    ("text", "days"),
    [
        ("mon-fri", {0, 1, 2, 3, 4}),
        ("weekdays", {0, 1, 2, 3, 4}),
        ("sat,sun", {5, 6}),
        ("fri-mon", {4, 5, 6, 0}),
        ("Mon, Wed,FRI", {0, 2, 4}),
        ("daily", set(range(7))),
    ],
)
def test_days(text: str, days: set[int]) -> None:
    assert parse_days(text) == frozenset(days)


@pytest.mark.parametrize("bad", ["24:00", "8:00", "23:60", "noon", ""])
def test_a_bad_time_says_how_to_write_one(bad: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_time(bad)
    assert err.value.code == "invalid_schedule" and "HH:MM" in err.value.message


def test_bad_schedules_are_refused() -> None:
    for stop, start, days in [(None, None, "daily"), ("23:00", "23:00", "daily"), ("23:00", None, "someday")]:
        with pytest.raises(InvalidInput):
            Timetable.parse(stop, start, days)


def test_days_text_round_trips() -> None:
    assert days_text(parse_days("mon-fri")) == "weekdays"
    assert days_text(parse_days("mon,wed")) == "mon,wed"


def test_weekday_evenings_skip_the_weekend() -> None:
    stop, weekdays = parse_time("23:00"), parse_days("mon-fri")
    fri_noon = ms("2026-12-04T12:00", SH)  # a Friday
    assert local(next_at(stop, weekdays, SH, fri_noon), SH) == "Fri 2026-12-04 23:00 +0800"
    after_friday = ms("2026-12-04T23:00", SH)
    assert local(next_at(stop, weekdays, SH, after_friday), SH) == "Mon 2026-12-07 23:00 +0800"  # strictly after
    assert local(last_at(stop, weekdays, SH, ms("2026-12-06T12:00", SH)), SH) == "Fri 2026-12-04 23:00 +0800"


def test_daylight_saving_keeps_the_wall_clock() -> None:
    start = parse_time("08:00")
    daily = parse_days("daily")
    # Berlin moves from +01:00 to +02:00 on 2026-03-29: 08:00 stays 08:00 local, 23 h after the day before.
    sat = next_at(start, daily, BERLIN, ms("2026-03-28T07:00", BERLIN))
    sun = next_at(start, daily, BERLIN, ms("2026-03-29T07:00", BERLIN))
    assert local(sat, BERLIN) == "Sat 2026-03-28 08:00 +0100" and local(sun, BERLIN) == "Sun 2026-03-29 08:00 +0200"
    assert sat is not None and sun is not None and sun - sat == 23 * 3600 * 1000
    # 02:30 does not exist that night: it happens as if the clock had not jumped (03:30 new time).
    gap = next_at(parse_time("02:30"), daily, BERLIN, ms("2026-03-29T00:00", BERLIN))
    assert local(gap, BERLIN) == "Sun 2026-03-29 03:30 +0200"
    # 02:30 happens twice on 2026-10-25: the first time.
    twice = next_at(parse_time("02:30"), daily, BERLIN, ms("2026-10-25T00:00", BERLIN))
    assert local(twice, BERLIN) == "Sun 2026-10-25 02:30 +0200"


def test_after_a_gap_the_latest_boundary_decides() -> None:
    tt = Timetable.parse("23:00", "08:00", "daily")
    evening = ms("2026-12-03T22:00", SH)
    # The server was down from 22:00 until 23:30 the next day: it missed 23:00, 08:00 and 23:00.
    assert tt.due(SH, evening, ms("2026-12-04T23:30", SH)) == "stop"
    assert tt.due(SH, evening, ms("2026-12-04T09:00", SH)) == "start"
    assert tt.due(SH, ms("2026-12-04T09:00", SH), ms("2026-12-04T22:59", SH)) is None
    assert tt.next_change(SH, ms("2026-12-04T09:00", SH)) == ("stop", ms("2026-12-04T23:00", SH))
    assert tt.describe("Asia/Shanghai") == "stop 23:00, start 08:00 daily (Asia/Shanghai)"
