"""The pure idle and duration verdicts and the limits a renter may ask for (docs/telemetry.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.compute.limits import RunLimits, parse_seconds, parse_threshold, resolve
from danlu.context import Settings
from danlu.core.errors import InvalidInput
from danlu.telemetry.idle import idle_reason, overtime_reason

P = 5_000  # sample period, ms
START = 1_000_000


def samples(pattern: list[int], gpus: int = 1, start: int = START + P) -> list[tuple[int, int]]:
    """One sample per period from ``start``: utilisation per-mille, the same on each GPU."""
    return [(start + i * P, u) for i, u in enumerate(pattern) for _ in range(gpus)]


def verdict(s: list[tuple[int, int]], now: int, window_s: int = 30, threshold: int = 50) -> str | None:
    return idle_reason(
        s, window_ms=window_s * 1000, threshold_pm=threshold, running_since_ms=START, now_ms=now, period_ms=P
    )


def test_a_run_idle_for_the_whole_window_is_idle_and_the_reason_says_what_was_measured() -> None:
    s = samples([0, 3, 1, 0, 2, 0, 1, 0])  # 8 samples, 5 s apart, all under 5 %
    now = START + 8 * P
    why = verdict(s, now, window_s=30)
    assert why is not None and why.startswith("idle:")
    # the window (the last 30 s) holds the last 6 samples
    assert "under 5.0% for 30 s" in why and "max 0.2%" in why and "6 samples" in why
    assert why.startswith("idle:")


def test_one_busy_sample_in_the_window_keeps_it_running() -> None:
    s = samples([0, 0, 0, 0, 0, 700, 0, 0])
    assert verdict(s, START + 8 * P) is None


def test_busy_then_idle_then_busy_is_never_stopped_early() -> None:
    pattern = [900] * 4 + [0] * 4 + [900] * 4 + [0] * 5  # idle stretches of 20 s and 25 s, window 30 s
    s = samples(pattern)
    for k in range(1, len(pattern) + 1):
        now = START + k * P
        assert verdict([x for x in s if x[0] <= now], now) is None, f"stopped at sample {k}"


def test_a_window_is_measured_to_the_sample_not_rounded_up() -> None:
    s = samples([0] * 10)
    # The window is full once the run has run 30 s and samples cover it.
    assert verdict(s, START + 29_999) is None
    assert verdict(s, START + 30_000) is not None


def test_every_gpu_must_be_idle() -> None:
    s = samples([0] * 8, gpus=1) + [(t, 600) for t, _ in samples([0] * 8)]  # GPU 2 is busy
    assert verdict(s, START + 8 * P) is None


def test_gaps_in_the_samples_are_not_taken_as_idle() -> None:
    s = [x for x in samples([0] * 8) if x[0] not in (START + 4 * P, START + 5 * P, START + 6 * P)]
    assert verdict(s, START + 8 * P) is None  # 20 s without a sample: the loop was not watching
    assert verdict([], START + 8 * P) is None
    stale = samples([0] * 4)  # nothing in the last 20 s
    assert verdict(stale, START + 8 * P) is None


def test_a_run_younger_than_its_window_or_at_the_threshold_is_not_idle() -> None:
    s = samples([0] * 4)
    assert verdict(s, START + 4 * P, window_s=30) is None
    at_threshold = samples([50] * 8)
    assert verdict(at_threshold, START + 8 * P, threshold=50) is None
    assert verdict(at_threshold, START + 8 * P, threshold=51) is not None


def test_maximum_duration() -> None:
    assert overtime_reason(max_ms=3_600_000, running_since_ms=0, now_ms=3_599_999) is None
    why = overtime_reason(max_ms=3_600_000, running_since_ms=0, now_ms=3_600_000)
    assert why is not None and why.startswith("maximum duration: ran 3600 s of at most 3600 s")


def test_durations_and_thresholds_parse_exactly_or_fail_clearly() -> None:
    assert [parse_seconds(t, "c", "x") for t in ("90s", "30m", "6h", "2d")] == [90, 1800, 21600, 172800]
    for bad in ("", "m", "0m", "-5m", "1.5h", "5", "30 m", "9999999999d"):
        with pytest.raises(InvalidInput) as e:
            parse_seconds(bad, "invalid_idle_stop", "--idle-stop")
        assert e.value.code == "invalid_idle_stop" and "30m" in e.value.message
    assert [parse_threshold(t) for t in ("5", "2.5", "5%", "100", "0.1")] == [50, 25, 50, 1000, 1]
    for bad in ("0", "100.1", "abc", "5.25", "-1", ""):
        with pytest.raises(InvalidInput):
            parse_threshold(bad)


def test_the_operator_default_and_maximum_bound_what_a_renter_asks() -> None:
    free = Settings(data_dir=Path("."))
    assert resolve(free, None, None, None) == RunLimits(None, 50, None)
    assert resolve(free, "30m", "2.5", "6h") == RunLimits(1800, 25, 21600)
    assert resolve(free, "off", None, None).idle_stop_s is None
    capped = Settings(
        data_dir=Path("."), idle_stop_default_s=7200, idle_stop_max_s=14400, idle_threshold_default_pm=100
    )
    assert resolve(capped, None, None, None) == RunLimits(7200, 100, None)  # the default applies
    assert resolve(capped, "1h", None, None).idle_stop_s == 3600
    with pytest.raises(InvalidInput, match="at most 4h"):
        resolve(capped, "5h", None, None)
    with pytest.raises(InvalidInput, match="at most 4h"):
        resolve(capped, "off", None, None)  # where the operator sets a maximum it cannot be turned off
