"""How the console writes times and limits in each language (issue 28, finding 12)."""

from __future__ import annotations

import pytest

from danlu.i18n.catalogs import Formatter


@pytest.mark.parametrize(
    ("lang", "seconds", "shown"),
    [
        ("en", 1800, "30 minutes"),  # the default idle stop read "30:00", a clock time
        ("en", 7200, "2 hours"),
        ("en", 5400, "90 minutes"),
        ("en", 86400, "1 day"),
        ("en", 45, "45 seconds"),
        ("zh_CN", 1800, "30分钟"),
        ("zh_CN", 7200, "2小时"),
    ],
)
def test_a_limit_is_written_as_a_length_of_time_not_a_clock(lang: str, seconds: int, shown: str) -> None:
    assert Formatter(lang, "UTC").limit(seconds) == shown


def test_elapsed_time_stays_a_running_clock() -> None:
    assert Formatter("en", "UTC").duration(3725) == "1:02:05"
