"""Guessing is slow (issue 28, finding 3): wrong passwords and wrong API tokens are counted per
account and per client address, and past a few free ones each key must wait before it may try
again, the wait doubling with every further failure (1 s, 2 s, 4 s … at most 15 min). A refused
try is answered ``429 too_many_attempts`` with ``Retry-After`` *before* any password is hashed, so
a flood of guesses costs the server nothing (300 guesses took 132 s of argon2 and slowed
/healthz to 1.18 s median for everyone). A success clears the account's count; an address's
count fades after an hour without failures.

Pure and in memory (one server process decides for itself; a restart forgets): the clock is the
caller's. Bounded: past ``MAX_KEYS`` keys the oldest half is forgotten.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from danlu.core.errors import TooManyAttempts

MAX_KEYS = 100_000


@dataclass
class Throttle:
    free: int = 5  # failures a key may have before it has to wait
    base_ms: int = 1_000
    max_ms: int = 15 * 60_000
    forget_ms: int = 3_600_000  # a key quiet this long starts again from zero
    what: str = "tries"
    _keys: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False)  # key -> (failures, last ms)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _wait_ms(self, key: str, now_ms: int) -> int:
        failures, last = self._keys.get(key, (0, 0))
        if failures <= self.free or now_ms - last >= self.forget_ms:
            return 0
        return max(0, last + min(self.max_ms, self.base_ms << min(failures - self.free - 1, 30)) - now_ms)

    def check(self, keys: Iterable[str], now_ms: int) -> None:
        """Raises ``TooManyAttempts`` (with the seconds to wait) while any of ``keys`` must wait."""
        with self._lock:
            wait = max((self._wait_ms(k, now_ms) for k in keys), default=0)
        if wait > 0:
            seconds = -(-wait // 1000)
            raise TooManyAttempts(
                "too_many_attempts", f"too many wrong {self.what}; try again in {seconds} s", retry_after_s=seconds
            )

    def failed(self, keys: Iterable[str], now_ms: int) -> None:
        with self._lock:
            if len(self._keys) >= MAX_KEYS:
                for k, _ in sorted(self._keys.items(), key=lambda kv: kv[1][1])[: MAX_KEYS // 2]:
                    del self._keys[k]
            for k in keys:
                failures, last = self._keys.get(k, (0, 0))
                if now_ms - last >= self.forget_ms:
                    failures = 0
                self._keys[k] = (failures + 1, now_ms)

    def succeeded(self, keys: Iterable[str]) -> None:
        with self._lock:
            for k in keys:
                self._keys.pop(k, None)
