"""When a person last used each instance, as this server saw it: a keystroke or stdin byte in a
session (danlu.access), a request that changes something or a WebSocket message through one of its
ports. Idle auto-stop counts it as use (telemetry.idle: the idle window must be free of it too), so a
person typing is never stopped, while a terminal or a notebook tab left open with nothing sent is
not activity. In memory: a server restart forgets it (the window then starts from the GPUs alone)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

KEYSTROKES = "keystrokes"  # input in a session (exec, shell)
PORT_TRAFFIC = "port traffic"  # through a published port


@dataclass(frozen=True)
class Seen:
    at_ms: int
    kind: str


class Activity:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, Seen] = {}

    def touch(self, instance_id: str, now_ms: int, kind: str) -> None:
        with self._lock:
            seen = self._last.get(instance_id)
            if seen is None or now_ms >= seen.at_ms:
                self._last[instance_id] = Seen(now_ms, kind)

    def last(self, instance_id: str) -> Seen | None:
        with self._lock:
            return self._last.get(instance_id)

    def last_ms(self, instance_id: str) -> int:
        seen = self.last(instance_id)
        return seen.at_ms if seen is not None else 0
