"""The background control loop: reconcile processes every tick, meter on an interval, and meter
early when a user's balance is predicted to run out (or when a rental wakes the loop)."""

from __future__ import annotations

import logging
import threading

from danlu.compute.reconcile import meter_all, reconcile
from danlu.context import Platform
from danlu.scheduling.live import schedule_round

log = logging.getLogger(__name__)


class ControlLoop:
    def __init__(self, platform: Platform) -> None:
        self.p = platform
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.next_meter_ms = 0
        self.ticks = 0

    def wake(self) -> None:
        """Run a tick now (a job was submitted, GPUs may have changed hands). It does not force a
        meter pass: a new rental is covered for ``min_prepaid_seconds``, longer than the meter
        interval (checked in Settings), so the next regular pass sees it before it can run dry."""
        self._wake.set()

    def run_once(self) -> None:
        reconcile(self.p)
        schedule_round(self.p)
        now = self.p.clock.now_ms()
        if now >= self.next_meter_ms:
            report = meter_all(self.p)
            interval_ms = int(self.p.settings.meter_interval_s * 1000)
            nxt = now + interval_ms
            if report.next_exhaustion_ms is not None:
                nxt = min(nxt, report.next_exhaustion_ms)
            self.next_meter_ms = nxt
        self.ticks += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # keep the loop alive; the next tick retries from the database
                log.exception("control loop tick failed")
            self._wake.wait(self.p.settings.tick_interval_s)
            self._wake.clear()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="danlu-control-loop", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
