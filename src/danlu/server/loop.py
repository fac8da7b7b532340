"""The background control loop: reconcile processes every tick, meter on an interval, and meter
early when a user's balance is predicted to run out (or when a rental wakes the loop).

Only the server holding the ``control-loop`` lease does this work (danlu.server.lease), and only
one server runs on a data folder. Each phase of a tick is guarded on its own: a failure in one
(logged) never stops the others. While a stop is waiting for its process to end, the loop ticks
every 0.1 s, so the GPUs are free for the next renter within moments of the process ending."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from danlu.billing.invoices import finalize_due
from danlu.compute.reconcile import meter_all, reconcile
from danlu.compute.schedules import run_due
from danlu.context import Platform
from danlu.notify import alerts
from danlu.notify.webhooks import deliver_due, enqueue
from danlu.scheduling.live import schedule_round
from danlu.server.lease import DataDirLock, Lease, holder_for
from danlu.telemetry import efficiency
from danlu.telemetry.idle import enforce
from danlu.telemetry.sampler import Sampler
from danlu.telemetry.store import downsample

T = TypeVar("T")
FAST_TICK_S = 0.1  # while a stopped instance's process is still ending

log = logging.getLogger(__name__)


class ControlLoop:
    def __init__(self, platform: Platform, dir_lock: DataDirLock | None = None) -> None:
        self.p = platform
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.next_meter_ms = 0
        self.next_sample_ms = 0
        self.next_fold_ms = 0
        self.next_alerts_ms = 0
        self.sampler = Sampler(platform)
        self.ticks = 0
        self.leading = False  # this server holds the lease: it alone sends webhooks
        self._sender: threading.Thread | None = None
        self.waiting_on_stops = 0
        platform.wake_loop = self.wake
        self.dir_lock = dir_lock or DataDirLock(platform.settings.data_dir)
        ttl_ms = int(max(10.0, 5 * platform.settings.tick_interval_s) * 1000)
        self.lease = Lease(
            platform.db, platform.clock, "control-loop", holder_for(platform.settings.data_dir), ttl_ms
        )

    def wake(self) -> None:
        """Run a tick now (a job was submitted, GPUs may have changed hands). It does not force a
        meter pass: a new rental is covered for ``min_prepaid_seconds``, longer than the meter
        interval (checked in Settings), so the next regular pass sees it before it can run dry."""
        self._wake.set()

    def run_once(self) -> None:
        self.leading = bool(self._phase("lease", self.lease.acquire))
        if not self.leading:
            return  # another server on this database does the background work
        polled_ms = self.p.clock.now_ms()  # before reconcile polls: what is alive now ends later
        tick = self._phase("reconcile", lambda: reconcile(self.p))
        self.waiting_on_stops = tick.stopping if tick else 0
        self._phase("schedule", lambda: schedule_round(self.p))
        self._phase("timetables", lambda: run_due(self.p))  # instances' start/stop schedules
        self._telemetry()
        self._phase("webhooks", lambda: enqueue(self.p))
        now = self.p.clock.now_ms()
        if now >= self.next_meter_ms:
            report = self._phase("meter", lambda: meter_all(self.p, until_ms=polled_ms))
            self._phase("invoices", lambda: finalize_due(self.p, now))  # months past their grace window
            if now >= self.next_alerts_ms:  # low balance, vouchers expiring: once a minute is soon enough
                self._phase("alerts", lambda: alerts.run(self.p))
                self.next_alerts_ms = now + 60_000
            interval_ms = int(self.p.settings.meter_interval_s * 1000)
            nxt = polled_ms + interval_ms  # from what it billed to: a clock that jumped mid-tick meters again
            if report is not None and report.next_exhaustion_ms is not None:
                nxt = min(nxt, report.next_exhaustion_ms)
            self.next_meter_ms = nxt
        self.ticks += 1

    def _telemetry(self) -> None:
        """Sample every sample interval (new runs are primed every tick), fold old samples every
        minute, and stop idle or over-long runs every tick on the samples so far (docs/telemetry.md)."""
        now = self.p.clock.now_ms()
        period_ms = int(self.p.settings.sample_interval_s * 1000)
        if now >= self.next_sample_ms:
            self._phase("sample", self.sampler.sample)
            self.next_sample_ms = now + period_ms
        else:
            self._phase("prime", self.sampler.prime)
        self._phase("idle", lambda: enforce(self.p, period_ms))
        if now >= self.next_fold_ms:
            self._phase("retention", lambda: downsample(self.p, self.p.settings.retention))
            self._phase("hints", lambda: efficiency.emit(self.p))  # low GPU use with a busy process
            self.next_fold_ms = now + 60_000

    @staticmethod
    def _phase(name: str, work: Callable[[], T]) -> T | None:
        try:
            return work()
        except Exception:  # keep the loop alive; the next tick retries from the database
            log.exception("control loop: %s failed; retrying next tick", name)
            return None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            tick = self.p.settings.tick_interval_s
            self._wake.wait(min(FAST_TICK_S, tick) if self.waiting_on_stops else tick)
            self._wake.clear()

    def _send(self) -> None:
        """Webhook deliveries, on their own thread: a slow receiver never delays a tick."""
        while not self._stop.is_set():
            sent = self._phase("webhook delivery", lambda: deliver_due(self.p)) if self.leading else None
            if not sent or sum(sent) == 0:
                self._stop.wait(1.0)

    def start(self) -> None:
        """Refuses (Conflict ``data_dir_in_use``) if another server runs on this data folder."""
        self.dir_lock.acquire()
        self._thread = threading.Thread(target=self._run, name="danlu-control-loop", daemon=True)
        self._thread.start()
        self._sender = threading.Thread(target=self._send, name="danlu-webhooks", daemon=True)
        self._sender.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._sender is not None:
            self._sender.join(timeout=10)
        self._phase("lease release", self.lease.release)
        self.dir_lock.release()
