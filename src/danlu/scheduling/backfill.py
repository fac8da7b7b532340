"""Slurm-style reservations from estimated durations.

A :class:`Timeline` knows, per host, when running allocations are expected to release GPUs
(their estimated end, or the preemption notice deadline) and which future intervals are
reserved for blocked higher-ranked jobs. A job may start now ("backfill") only if it fits now
and, for its whole estimated run, leaves every reservation on that host its GPUs. Estimates
can be wrong: a job that overruns pushes reservations back, as in Slurm; nothing is ever
over-allocated because starts are checked against the real free count first.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from danlu.scheduling.model import Allocation, Parts
from danlu.scheduling.placement import FreeIndex


class Timeline:
    def __init__(self, now_ms: int, index: FreeIndex, running: tuple[Allocation, ...]) -> None:
        self.now = now_ms
        self.index = index
        self.releases: dict[str, list[tuple[int, int]]] = defaultdict(list)
        self.reservations: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        # (model, gpus) -> shortest duration known not to fit now; capacity only shrinks within a
        # round, so any job at least that long with that gang size cannot fit either
        self._no_fit: dict[tuple[str, int], int] = {}
        for alloc in running:
            for host_id, gpus in alloc.placed:
                self.releases[host_id].append((max(alloc.release_ms, now_ms + 1), gpus))

    def add_running(self, host_id: str, end_ms: int, gpus: int) -> None:
        self.releases[host_id].append((max(end_ms, self.now + 1), gpus))

    def reserve(self, host_id: str, start_ms: int, end_ms: int, gpus: int) -> None:
        self.reservations[host_id].append((start_ms, end_ms, gpus))

    def has_reservations(self, host_id: str) -> bool:
        return host_id in self.reservations and bool(self.reservations[host_id])

    def free_at(self, host_id: str, t: int) -> int:
        free = self.index.free[host_id]
        for at, gpus in self.releases.get(host_id, ()):
            if at <= t:
                free += gpus
        for start, end, gpus in self.reservations.get(host_id, ()):
            if start <= t < end:
                free -= gpus
        return free

    def fits(self, host_id: str, gpus: int, start_ms: int, duration_ms: int) -> bool:
        """Whether ``gpus`` are free on the host for all of ``[start_ms, start_ms + duration_ms)``."""
        end = start_ms + duration_ms
        if self.free_at(host_id, start_ms) < gpus:
            return False
        return all(
            self.free_at(host_id, r_start) >= gpus
            for r_start, _, _ in self.reservations.get(host_id, ())
            if start_ms < r_start < end
        )

    def earliest_start(self, host_id: str, gpus: int, duration_ms: int) -> int | None:
        if gpus > self.index.total[host_id]:
            return None
        candidates = {self.now}
        candidates.update(at for at, _ in self.releases.get(host_id, ()))
        candidates.update(end for _, end, _ in self.reservations.get(host_id, ()))
        for t in sorted(candidates):
            if t >= self.now and self.fits(host_id, gpus, t, duration_ms):
                return t
        return None

    def earliest_on_model(self, model: str, gpus: int, duration_ms: int) -> tuple[int, str] | None:
        """(start, host) of the earliest gang slot on any host of ``model``."""
        best: tuple[int, str] | None = None
        for host_id in self.index.hosts_of(model):
            start = self.earliest_start(host_id, gpus, duration_ms)
            if start is not None and (best is None or start < best[0]):
                best = (start, host_id)
                if start == self.now:
                    break
        return best

    def surely_blocked(self, models: list[str], gpus: int, durations_ms: Mapping[str, int]) -> bool:
        """True when :meth:`startable_now` would return None for every one of ``models`` (from
        its two cheap checks alone: a known no-fit for the gang size, or no host with room)."""
        no_fit = self._no_fit
        for model in models:
            bad = no_fit.get((model, gpus))
            if (bad is None or durations_ms[model] < bad) and self.index.largest_free(model) >= gpus:
                return False
        return True

    def startable_now(self, model: str, gpus: int, duration_ms: int) -> str | None:
        """A host of ``model`` where the gang fits now without breaking any reservation."""
        known_bad = self._no_fit.get((model, gpus))
        if known_bad is not None and duration_ms >= known_bad:
            return None
        host = self.index.best_fit(model, gpus)
        if host is None:
            return None
        if not self.has_reservations(host) or self.fits(host, gpus, self.now, duration_ms):
            return host
        # reservations sit on at most reservation_depth hosts, so this scan ends quickly
        for host_id in self.index.hosts_with(model, gpus, limit=self._scan_limit()):
            if not self.has_reservations(host_id) or self.fits(host_id, gpus, self.now, duration_ms):
                return host_id
        self._no_fit[(model, gpus)] = min(duration_ms, known_bad or duration_ms)
        return None

    def spread_now(self, model: str, gpus: int, duration_ms: int) -> Parts | None:
        """Hosts of ``model`` that together hold the gang now, each part leaving every reservation
        its GPUs for the whole run: the hosts with the most free GPUs first, so the gang spans as
        few hosts as possible. None when they do not add up (a spread is only ever asked for when
        no single host has room)."""
        hosts = sorted(self.index.hosts_of(model), key=lambda h: (-self.index.free[h], h))
        if sum(self.index.free[h] for h in hosts) < gpus:
            return None
        parts: list[tuple[str, int]] = []
        need = gpus
        for host_id in hosts:
            n = min(self.index.free[host_id], need)
            while n > 0 and self.has_reservations(host_id) and not self.fits(host_id, n, self.now, duration_ms):
                n -= 1
            if n > 0:
                parts.append((host_id, n))
                need -= n
                if need == 0:
                    return tuple(parts)
        return None

    def _scan_limit(self) -> int:
        return len(self.reservations) + 1
