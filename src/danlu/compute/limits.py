"""A run's own limits, as the renter asks for them and the operator bounds them (docs/telemetry.md):
``--idle-stop 30m [--idle-threshold 5] [--max-duration 6h]``. Pure: no database."""

from __future__ import annotations

from dataclasses import dataclass

from danlu.context import Settings
from danlu.core.errors import InvalidInput
from danlu.core.parse import duration_s, duration_text

MAX_S = 9999 * 86400  # what the API's pattern admits (d: 4 digits); the operator's maximum bounds it further
OFF = ("off", "0")


@dataclass(frozen=True)
class RunLimits:
    idle_stop_s: int | None = None
    idle_threshold_pm: int = 50
    max_duration_s: int | None = None


def parse_seconds(text: str, code: str, what: str) -> int:
    """``90s``, ``30m``, ``6h``, ``2d`` → seconds (1 s to 9,999 days)."""
    return duration_s(
        text, code=code, message=f"{what} is a duration such as 90s, 30m, 6h or 2d, not {text!r}", max_s=MAX_S
    )


def parse_threshold(text: str) -> int:
    """``5``, ``2.5``, ``5%`` → per-mille (above 0, at most 1000)."""
    whole, _, frac = text.strip().removesuffix("%").partition(".")
    if not whole.isdigit() or (frac and (not frac.isdigit() or len(frac) > 1)):
        raise InvalidInput("invalid_idle_threshold", "--idle-threshold is a percentage such as 5 or 2.5")
    threshold = int(whole) * 10 + int(frac or 0)
    if not 0 < threshold <= 1000:
        raise InvalidInput("invalid_idle_threshold", "--idle-threshold is above 0 and at most 100 (percent)")
    return threshold


def resolve(
    settings: Settings,
    idle_stop: str | None,
    idle_threshold: str | None,
    max_duration: str | None,
    *,
    job: bool = False,
) -> RunLimits:
    """What applies to a new rental or job: the renter's values, else the operator's default; never
    past the operator's maximum (where one is set, an idle stop cannot be turned off either). The
    default is for rentals (interactive: a notebook left open); a batch job gets an idle stop only
    when it asks or the operator sets a maximum, as its data loading may leave the GPU idle a while."""
    limit = settings.idle_stop_max_s
    if idle_stop is None:
        idle_s = limit if job else settings.idle_stop_default_s
    elif idle_stop.strip().lower() in OFF:
        if limit is not None:
            raise InvalidInput(
                "invalid_idle_stop",
                f"this platform stops idle runs after at most {duration_text(limit)}; ask for that or less",
            )
        idle_s = None
    else:
        idle_s = parse_seconds(idle_stop.strip(), "invalid_idle_stop", "--idle-stop")
    if idle_s is not None and limit is not None and idle_s > limit:
        raise InvalidInput(
            "invalid_idle_stop", f"--idle-stop is at most {duration_text(limit)} here (the operator's maximum)"
        )
    threshold = settings.idle_threshold_default_pm if idle_threshold is None else parse_threshold(idle_threshold)
    max_s = (
        None if max_duration is None else parse_seconds(max_duration.strip(), "invalid_max_duration", "--max-duration")
    )
    return RunLimits(idle_s, threshold, max_s)
