"""The background control loop: its phases, in order, with how often each runs, are one table
(``PHASES``): reconcile processes every tick, meter on an interval, and meter early when a user's
balance is predicted to run out (or when a rental wakes the loop).

Only the server holding the ``control-loop`` lease does this work (danlu.server.lease), and only
one server runs on a data folder. Each phase of a tick is guarded on its own: a failure in one
(logged) never stops the others. While a stop is waiting for its process to end, the loop ticks
every 0.1 s, so the GPUs are free for the next renter within moments of the process ending."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import TypeVar

from danlu.billing.invoices import finalize_due
from danlu.compute import snapshots
from danlu.compute.reconcile import MeterReport, TickReport, meter_all, reconcile
from danlu.compute.schedules import run_due
from danlu.compute.storage import measure_stored
from danlu.context import Platform
from danlu.db.models import CONTROL_LOOP_LEASE
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


class Cadence(StrEnum):
    """How often a phase runs; each tick decides once, at its start, which cadences are due."""

    TICK = "every tick"
    SAMPLE = "every sample interval (--sample-interval)"
    BETWEEN_SAMPLES = "every tick that does not sample"
    MINUTE = "every minute"
    METER = "every meter pass (--meter-interval, or sooner when a balance is about to run out)"
    ALERTS = "on a meter pass, at most once a minute"


@dataclass
class Tick:
    """What one tick's phases share: when it started (before ``reconcile`` polled anything, so a run
    that ends during the tick is never billed past its exit) and what earlier phases found."""

    polled_ms: int
    sample_period_ms: int
    reconciled: TickReport | None = None
    metered: MeterReport | None = None


@dataclass(frozen=True)
class Phase:
    name: str
    cadence: Cadence
    run: Callable[[ControlLoop, Tick], object]
    what: str


class ControlLoop:
    def __init__(self, platform: Platform, dir_lock: DataDirLock | None = None) -> None:
        self.p = platform
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        # When each cadence is next due (epoch ms); TICK and BETWEEN_SAMPLES are decided from these.
        self.next_ms: dict[Cadence, int] = {Cadence.SAMPLE: 0, Cadence.MINUTE: 0, Cadence.METER: 0, Cadence.ALERTS: 0}
        self.sampler = Sampler(platform)
        self.ticks = 0
        self.leading = False  # this server holds the lease: it alone sends webhooks
        self._sender: threading.Thread | None = None
        self.waiting_on_stops = 0
        platform.wake_loop = self.wake
        self.dir_lock = dir_lock or DataDirLock(platform.settings.data_dir)
        ttl_ms = int(max(10.0, 5 * platform.settings.tick_interval_s) * 1000)
        self.lease = Lease(
            platform.db, platform.clock, CONTROL_LOOP_LEASE, holder_for(platform.settings.data_dir), ttl_ms
        )

    def wake(self) -> None:
        """Run a tick now (a job was submitted, GPUs may have changed hands). It does not force a
        meter pass: a new rental is covered for ``min_prepaid_seconds``, longer than the meter
        interval (checked in Settings), so the next regular pass sees it before it can run dry."""
        self._wake.set()

    def due(self, now_ms: int) -> set[Cadence]:
        sample = now_ms >= self.next_ms[Cadence.SAMPLE]
        meter = now_ms >= self.next_ms[Cadence.METER]
        due = {Cadence.TICK, Cadence.SAMPLE if sample else Cadence.BETWEEN_SAMPLES}
        if now_ms >= self.next_ms[Cadence.MINUTE]:
            due.add(Cadence.MINUTE)
        if meter:
            due.add(Cadence.METER)
            if now_ms >= self.next_ms[Cadence.ALERTS]:
                due.add(Cadence.ALERTS)
        return due

    def run_once(self) -> None:
        self.leading = bool(self._phase("lease", self.lease.acquire))
        if not self.leading:
            return  # another server on this database does the background work
        s = self.p.settings
        t = Tick(polled_ms=self.p.clock.now_ms(), sample_period_ms=int(s.sample_interval_s * 1000))
        due = self.due(t.polled_ms)
        for phase in PHASES:
            if phase.cadence in due:
                self._phase(phase.name, partial(phase.run, self, t))
        self.waiting_on_stops = t.reconciled.stopping if t.reconciled else 0
        if Cadence.SAMPLE in due:
            self.next_ms[Cadence.SAMPLE] = t.polled_ms + t.sample_period_ms
        if Cadence.MINUTE in due:
            self.next_ms[Cadence.MINUTE] = t.polled_ms + 60_000
        if Cadence.ALERTS in due:
            self.next_ms[Cadence.ALERTS] = t.polled_ms + 60_000
        if Cadence.METER in due:
            nxt = t.polled_ms + int(s.meter_interval_s * 1000)  # from what it billed to: a jumped clock meters again
            if t.metered is not None and t.metered.next_exhaustion_ms is not None:
                nxt = min(nxt, t.metered.next_exhaustion_ms)
            self.next_ms[Cadence.METER] = nxt
        self.ticks += 1

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

    def start(self, first_tick: bool = False) -> None:
        """Refuses (Conflict ``data_dir_in_use``) if another server runs on this data folder.

        ``first_tick``: run one tick before returning (`danlu server` does, before it answers a request): a
        restarted server judges the runs it inherited first. A server killed between recording a run and
        letting its command go leaves it held back for ever; until a reconcile pass calls it never started
        (failed, not billed), a renter's stop or removal billed it up to that moment (the kill drill in CI:
        "allocation 17: billed 5 s but its command never ran", removed before the new server's first tick)."""
        self.dir_lock.acquire()
        if first_tick:
            self.run_once()
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


def _reconcile(loop: ControlLoop, t: Tick) -> object:
    t.reconciled = reconcile(loop.p)
    return t.reconciled


def _meter(loop: ControlLoop, t: Tick) -> object:
    t.metered = meter_all(loop.p, until_ms=t.polled_ms)
    return t.metered


# The control loop, in the order each tick runs it. Every phase is guarded on its own: one that fails
# is logged and the others still run; the next tick retries from the database.
PHASES: tuple[Phase, ...] = (
    Phase("reconcile", Cadence.TICK, _reconcile, "poll every run; finish ended ones; kill stops past their grace"),
    Phase("schedule", Cadence.TICK, lambda loop, t: schedule_round(loop.p), "settle job runs, then start/preempt jobs"),
    Phase("timetables", Cadence.TICK, lambda loop, t: run_due(loop.p), "instances' start/stop schedules"),
    Phase("sample", Cadence.SAMPLE, lambda loop, t: loop.sampler.sample(), "GPU, CPU and memory of every run"),
    Phase("prime", Cadence.BETWEEN_SAMPLES, lambda loop, t: loop.sampler.prime(), "CPU counters of new runs"),
    Phase(
        "idle", Cadence.TICK, lambda loop, t: enforce(loop.p, t.sample_period_ms), "idle auto-stop, maximum duration"
    ),
    Phase("storage", Cadence.TICK, lambda loop, t: measure_stored(loop.p), "measure workspaces stopped since the "
          "last tick (outside any transaction) and bill their storage from the stop"),
    Phase("snapshots", Cadence.MINUTE, lambda loop, t: (snapshots.before_release(loop.p), snapshots.retention(loop.p)),
          "snapshot workspaces due for release, then release them (--snapshot-before-release); warn of and remove "
          "snapshots at the end of their retention"),
    Phase("retention", Cadence.MINUTE, lambda loop, t: downsample(loop.p, loop.p.settings.retention), "fold samples"),
    Phase("hints", Cadence.MINUTE, lambda loop, t: efficiency.emit(loop.p), "low GPU use with a busy process"),
    Phase("webhooks", Cadence.TICK, lambda loop, t: enqueue(loop.p), "a delivery row per new event and webhook"),
    Phase("meter", Cadence.METER, _meter, "expire due vouchers (metering their payers to the expiry), then meter "
          "every billing account, end holds past their term, stop capped instances, stored-workspace retention"),
    Phase("invoices", Cadence.METER, lambda loop, t: finalize_due(loop.p, loop.p.clock.now_ms()), "months past grace"),
    Phase("alerts", Cadence.ALERTS, lambda loop, t: alerts.run(loop.p), "low balance, vouchers expiring"),
)  # fmt: skip
