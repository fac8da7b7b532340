"""A recording backend for billing and race tests, where processes are beside the point. Real
sandboxed processes are exercised by tests/compute, tests/sandbox and tests/api."""

from __future__ import annotations

from collections.abc import Sequence

from danlu.backend import RUNNING, RunSpec, RunState, RunUsage
from danlu.compute.offers import Offer


class RecordingBackend:
    name = "recording"
    starts_before_record = False
    spans_hosts = False

    def __init__(self) -> None:
        self.launched: list[RunSpec] = []
        self.handles: list[str] = []
        self.states: dict[str, RunState] = {}
        self.signals: list[tuple[str, str]] = []  # (handle, "term" | "kill")
        self.started: list[str] = []
        self.released: list[str] = []
        self.discarded: list[str] = []
        self.launching_now: set[str] = set()
        self.logs: dict[str, str] = {}
        self.cpu: dict[str, float] = {}  # run id -> CPU seconds so far (a test advances it)
        self.heartbeats: dict[str, int] = {}  # handle -> its last heartbeat (a Slurm node's runner), if any

    def launch(self, spec: RunSpec) -> str:
        self.launched.append(spec)
        handle = f"h{len(self.launched)}:{spec.run_id}"
        self.handles.append(handle)
        self.states[handle] = RUNNING
        self.launching_now.add(spec.run_id)  # as the local backend: until started, killed or released
        return handle

    def _launched(self, handle: str) -> None:
        self.launching_now.discard(handle.partition(":")[2])

    def start(self, handle: str) -> None:
        self._launched(handle)
        self.started.append(handle)

    def cancel(self, handle: str) -> None:
        return None

    def unavailable(self) -> None:
        return None

    def held_elsewhere(self) -> None:
        return None

    def ref(self, handle: str) -> str:
        return f"recording:{handle}"

    def poll(self, handles: Sequence[str]) -> dict[str, RunState]:
        return {h: self.states.get(h, RunState("lost")) for h in handles}

    def alive_until(self, handles: Sequence[str]) -> dict[str, int]:
        return {h: self.heartbeats[h] for h in handles if h in self.heartbeats}

    def terminate(self, handle: str) -> None:
        self.signals.append((handle, "term"))

    def kill(self, handle: str) -> None:
        self._launched(handle)
        self.signals.append((handle, "kill"))

    def release(self, handle: str) -> None:
        self._launched(handle)
        self.released.append(handle)

    def discard(self, run_id: str) -> None:
        self.discarded.append(run_id)

    def launching(self, run_id: str) -> bool:
        return run_id in self.launching_now

    def read_output(self, log_key: str, offset: int, limit: int = 1 << 20) -> tuple[str, int]:
        data = self.logs.get(log_key, "").encode()[offset : offset + limit]
        return data.decode(), offset + len(data)

    def usage(self, handles: Sequence[str]) -> dict[str, RunUsage]:
        return {
            h: RunUsage(self.cpu.get(h.partition(":")[2], 0.0), 64 << 20)
            for h in handles
            if self.states.get(h, RunState("lost")).kind == "running"
        }

    # -- test helpers ------------------------------------------------------------------------
    def last(self) -> str:
        return self.handles[-1]

    def alive(self) -> list[str]:
        return [h for h in self.handles if self.states[h].kind == "running"]

    def die(self, handle: str, code: int | None = None, at_ms: int | None = None) -> None:
        """The run ends: with an exit status (``code``, at ``at_ms``) or lost without one."""
        self.states[handle] = RunState("exited", code, at_ms) if code is not None else RunState("lost")


def platform_offer(
    gpu_model: str, price_minor: int, currency: str, free: int, total: int, interruptible_minor: int | None = None
) -> Offer:
    """One of this platform's offers as ``danlu.compute.offers.list_offers`` returns it, for the advisor."""
    return Offer(
        gpu_model,
        80,
        free,
        total,
        total,
        price_minor,
        currency,
        True,
        interruptible_price_per_hour_minor=interruptible_minor,
    )
