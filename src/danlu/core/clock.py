"""Clocks. Nothing below the service layer reads the wall clock: it takes a :class:`Clock`.

Time on billing paths is an ``int`` of epoch milliseconds, so that intervals and their
identities are exact and portable between SQLite and PostgreSQL.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class FakeClock:
    """A clock that moves only when told to; thread-safe for tests with real concurrency."""

    def __init__(self, start_ms: int = 1_767_600_000_000) -> None:
        self._now = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now

    def advance(self, seconds: float = 0, ms: int = 0) -> int:
        with self._lock:
            self._now += int(seconds * 1000) + ms
            return self._now

    def set(self, ms: int) -> None:
        with self._lock:
            self._now = ms


def iso(ms: int | None) -> str | None:
    """Epoch milliseconds as an ISO-8601 UTC string (for display only)."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")
