"""How long samples are kept at each resolution (docs/telemetry.md), an operator setting."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Retention:
    raw_s: int = 3600  # every sample, for an hour
    minute_s: int = 7 * 86400  # 1-minute averages, for a week
    hour_s: int = 365 * 86400  # 1-hour averages, for a year
