"""Telemetry and idle auto-stop (issue 10), three measurements in one run:

1. **Sampling overhead**: 100 instances of 8 simulated GPUs each (800 GPUs), every one a real
   ``sleep`` process rented through ``danlu.compute.instances.rent`` on the local backend (sandboxed
   as ``danlu server`` runs them, network ``none``), on SQLite. One sample pass (``Sampler.sample``:
   the backend's CPU and memory of every run, 900 rows written) and one idle pass (``idle.enforce``
   over the samples kept), repeated; CPU time (``time.thread_time``) per pass as % of one core at the
   default 5 s period. Beside it, the reference: one bare ``psutil`` scan of the same process trees
   (what any agent pays to read them), and the metering pass over the same instances.
2. **Idle-stop reaction**: randomized trials on a fake clock (window 10 s to 2 h, period 1 to 30 s, a
   busy prefix of random length, threshold 1 to 20 %), through the real sampler, store and ``enforce``
   against a backend whose CPU counters the trial drives: the stop must come at the first sample at
   or after the end of the idle window, i.e. within one period of it.
3. **Idle GPU-hours in a synthetic day**: 100 notebook renters (seeded: sessions of work bursts and
   pauses, some left open overnight), replayed at 60 s samples through the pure verdict
   (``idle.idle_reason``) with and without the default 20 min idle stop: GPU-hours billed while idle.

    python benchmarks/telemetry.py [--instances 100] [--gpus 8] [--passes 10] [--trials 50]
                                   [--renters 100] [--seed 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import select

from danlu.accounts.service import create_user
from danlu.billing import service as billing
from danlu.compute import instances as svc
from danlu.compute.gpus import parse_simulated_spec
from danlu.compute.limits import RunLimits
from danlu.compute.reconcile import meter_all, reconcile
from danlu.compute.sandbox.probe import make_local_backend, sandbox_dir_for
from danlu.context import Platform, Settings
from danlu.core.clock import FakeClock, SystemClock
from danlu.db.engine import open_database
from danlu.db.models import Instance
from danlu.server.bootstrap import bootstrap
from danlu.telemetry.idle import enforce, idle_reason
from danlu.telemetry.sampler import Sampler

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.fakes import RecordingBackend

PERIOD_S = 5.0
DEFAULT_WINDOW_S = 1200  # danlu server --idle-stop-default 20m


# ------------------------------------------------------------------ 1. sampling overhead


@dataclass
class Overhead:
    instances: int
    gpus: int
    rows_per_pass: int
    sample_ms: float
    idle_ms: float
    psutil_scan_ms: float
    meter_ms: float
    pct_of_core: float  # (sample + idle) per 5 s period
    psutil_pct_of_core: float
    target_pct: float = 5.0


def _cpu_ms(work: Any, passes: int) -> float:
    best = []
    for _ in range(passes):
        t = time.thread_time()
        work()
        best.append((time.thread_time() - t) * 1000)
    best.sort()
    return best[len(best) // 2]  # the median pass


def overhead(n: int, gpus_per: int, passes: int) -> Overhead:
    data = Path(tempfile.mkdtemp(prefix="danlu-bench-telemetry-"))
    try:
        db = open_database(f"sqlite:///{data / 'danlu.db'}")
        clock = SystemClock()
        backend, status = make_local_backend(data, network="none")
        sdir = sandbox_dir_for(data, status)
        total = n * gpus_per
        spec = ",".join(f"A100-80GB:{min(64, total - k)}" for k in range(0, total, 64))
        bootstrap(
            db, data, "CNY", parse_simulated_spec(spec, "local"), clock.now_ms(), sandbox=status, sandbox_dir=sdir
        )
        p = Platform(
            db=db, clock=clock, backend=backend, settings=Settings(data_dir=data, sandbox_dir=sdir), sandbox=status
        )
        billing.set_price(p, "A100-80GB", "36.00")
        with p.db.write() as s:
            user, _ = create_user(s, "renter", clock.now_ms())
            s.expunge(user)
        billing.admin_topup(p, "renter", "10000000.00", None)
        for i in range(n):
            svc.rent(p, user, "A100-80GB", gpus_per, ["sleep", "600"], name=f"b{i}", limits=RunLimits(1800, 50, None))
        sampler = Sampler(p)
        sampler.prime()
        time.sleep(1)
        rows = sampler.sample().rows
        sample_ms = _cpu_ms(sampler.sample, passes)
        idle_ms = _cpu_ms(lambda: enforce(p, int(PERIOD_S * 1000)), passes)
        with p.db.read() as s:
            handles = [h for (h,) in s.execute(select(Instance.run_handle)) if h]

        def scan() -> None:  # the floor: read every process's CPU times once
            for proc in psutil.process_iter(["cpu_times", "memory_info"]):
                _ = proc.info

        psutil_ms = _cpu_ms(scan, passes)
        meter_ms = _cpu_ms(lambda: meter_all(p), passes)
        for h in handles:
            backend.kill(h)
        backend.poll(handles)
        for h in handles:
            backend.release(h)
        db.engine.dispose()
        period_ms = PERIOD_S * 1000
        return Overhead(
            n, total, rows, round(sample_ms, 2), round(idle_ms, 2), round(psutil_ms, 2), round(meter_ms, 2),
            round(100 * (sample_ms + idle_ms) / period_ms, 3), round(100 * psutil_ms / period_ms, 3),
        )  # fmt: skip
    finally:
        shutil.rmtree(data, ignore_errors=True)


# ------------------------------------------------------------------ 2. reaction trials


@dataclass
class Reaction:
    trials: int
    within_one_period: int
    early: int
    late: int
    worst_delay_periods: float
    pct_within: float
    target_pct: float = 100.0


def reaction(trials: int, seed: int) -> Reaction:
    rng = random.Random(seed)
    data = Path(tempfile.mkdtemp(prefix="danlu-bench-reaction-"))
    try:
        clock = FakeClock()
        db = open_database(f"sqlite:///{data / 'danlu.db'}")
        _, status = make_local_backend(data, network="none")
        bootstrap(db, data, "CNY", parse_simulated_spec("A100-80GB:8", "local"), clock.now_ms(), sandbox=status)
        fake = RecordingBackend()
        p = Platform(db=db, clock=clock, backend=fake, settings=Settings(data_dir=data), sandbox=status)  # type: ignore[arg-type]
        billing.set_price(p, "A100-80GB", "36.00")
        with p.db.write() as s:
            user, _ = create_user(s, "renter", clock.now_ms())
            s.expunge(user)
        billing.admin_topup(p, "renter", "10000000.00", None)
        ok = early = late = 0
        worst = 0.0
        for _ in range(trials):
            window_s = rng.randint(10, 7200)
            period_s = rng.randint(1, 30)
            threshold_pm = rng.randint(10, 200)
            busy_periods = rng.randint(0, 40)
            gpus = rng.randint(1, 4)
            inst = svc.rent(p, user, "A100-80GB", gpus, ["notebook"], limits=RunLimits(window_s, threshold_pm, None)).id
            sampler = Sampler(p)
            sampler.prime()
            last_busy_ms = clock.now_ms()
            stopped_at = None
            for k in range(1, busy_periods + (window_s // period_s) + 5):
                clock.advance(seconds=period_s)
                if k <= busy_periods:
                    fake.cpu[inst] = fake.cpu.get(inst, 0.0) + 1000.0
                    last_busy_ms = clock.now_ms()
                sampler.sample()
                if inst in enforce(p, period_s * 1000):
                    stopped_at = clock.now_ms()
                    break
            # Idle from the last busy sample on (or from the start): the window ends window_s later.
            due = last_busy_ms + window_s * 1000
            if stopped_at is None or stopped_at > due + period_s * 1000:
                late += 1
            elif stopped_at < due:
                early += 1
            else:
                ok += 1
            if stopped_at is not None:
                worst = max(worst, (stopped_at - due) / (period_s * 1000))
            for h in fake.alive():
                fake.die(h, 0, clock.now_ms())
            reconcile(p)
            clock.advance(seconds=60)
        db.engine.dispose()
        return Reaction(trials, ok, early, late, round(worst, 3), round(100 * ok / trials, 1))
    finally:
        shutil.rmtree(data, ignore_errors=True)


# ------------------------------------------------------------------ 3. a synthetic day


@dataclass
class Day:
    renters: int
    gpu_hours_billed_without: float
    idle_gpu_hours_without: float
    gpu_hours_billed_with: float
    idle_gpu_hours_with: float
    idle_reduction_pct: float
    busy_gpu_hours: float
    target_reduction_pct: float = 80.0


def synthetic_day(renters: int, seed: int, window_s: int = DEFAULT_WINDOW_S) -> Day:
    """Each renter opens a notebook (1-2 GPUs) a few times a day; a session is bursts of work (5-60 min)
    separated by pauses (1-90 min, long-tailed), and ends with the notebook left open until the renter
    comes back for the next session or, for the last one, for the rest of the day (30 % of renters
    forget it overnight). Without auto-stop the whole open time is billed; with it, a session is
    stopped after ``window_s`` idle and a renter who comes back restarts it (billed from then)."""
    rng = random.Random(seed)
    step = 60
    day = 86_400
    billed_without = idle_without = billed_with = idle_with = busy_total = 0.0
    for _ in range(renters):
        gpus = rng.choice((1, 1, 1, 2))
        busy = [False] * (day // step)
        open_ = [False] * (day // step)
        t = rng.randint(7 * 3600, 11 * 3600)
        sessions = rng.randint(1, 3)
        for sidx in range(sessions):
            end_of_session = min(day, t + rng.randint(1, 4) * 3600)
            while t < end_of_session:
                burst = rng.randint(5, 60) * 60
                for k in range(t // step, min(day, t + burst) // step):
                    busy[k] = open_[k] = True
                t += burst
                pause = int(min(5400, rng.paretovariate(1.5) * 60))
                for k in range(t // step, min(day, t + pause) // step):
                    open_[k] = True
                t += pause
            last = sidx == sessions - 1
            leave_open_until = day if (last and rng.random() < 0.3) else min(day, t + rng.randint(10, 180) * 60)
            for k in range(t // step, leave_open_until // step):
                open_[k] = True
            t = leave_open_until + rng.randint(30, 240) * 60
            if t >= day:
                break
        # Without auto-stop: every open minute is billed.
        n_open = sum(open_)
        n_busy = sum(busy)
        billed_without += n_open * step * gpus / 3600
        idle_without += (n_open - n_busy) * step * gpus / 3600
        busy_total += n_busy * step * gpus / 3600
        # With auto-stop: the verdict over the samples since the run (re)started.
        running = stopped = False  # stopped: by the policy, until the renter works again
        since = 0
        samples: list[tuple[int, int]] = []
        for k in range(day // step):
            now = (k + 1) * step * 1000
            if not open_[k]:
                running = stopped = False
                continue
            if not running:
                if stopped and not busy[k]:
                    continue
                running, stopped, since, samples = True, False, now - step * 1000, []
            samples.append((now, 900 if busy[k] else 0))
            billed_with += step * gpus / 3600
            if not busy[k]:
                idle_with += step * gpus / 3600
            why = idle_reason(
                samples[-(window_s // step + 2) :],
                window_ms=window_s * 1000,
                threshold_pm=50,
                running_since_ms=since,
                now_ms=now,
                period_ms=step * 1000,
            )
            if why:
                running, stopped = False, True
    reduction = 100 * (1 - idle_with / idle_without) if idle_without else 0.0
    return Day(
        renters, round(billed_without, 1), round(idle_without, 1), round(billed_with, 1), round(idle_with, 1),
        round(reduction, 1), round(busy_total, 1),
    )  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instances", type=int, default=100)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--passes", type=int, default=10)
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--renters", type=int, default=100)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    o = overhead(a.instances, a.gpus, a.passes)
    r = reaction(a.trials, a.seed)
    d = synthetic_day(a.renters, a.seed, DEFAULT_WINDOW_S)
    windows = {w // 60: synthetic_day(a.renters, a.seed, w) for w in (600, 900, 1200, 3600)}
    ok = o.pct_of_core < o.target_pct and r.pct_within == 100.0 and d.idle_reduction_pct >= d.target_reduction_pct
    out = {
        "overhead": asdict(o),
        "reaction": asdict(r),
        "day": asdict(d),
        "day_other_windows": {f"{m}m": asdict(x) for m, x in windows.items()},
        "load": os.getloadavg(),
        "pass": ok,
    }
    if a.json:
        print(json.dumps(out, indent=2))
        return 0 if ok else 1
    print(f"load average {os.getloadavg()[0]:.2f}\n")
    print(f"1. sampling {o.instances} instances x {a.gpus} GPUs ({o.rows_per_pass} rows per pass), CPU per pass:")
    print(f"   {'pass':<36}{'ms':>10}{'% of a core at 5 s':>22}")
    print(f"   {'sample (ours)':<36}{o.sample_ms:>10.2f}{100 * o.sample_ms / 5000:>22.3f}")
    print(f"   {'idle verdicts + enforce (ours)':<36}{o.idle_ms:>10.2f}{100 * o.idle_ms / 5000:>22.3f}")
    print(f"   {'ours together':<36}{o.sample_ms + o.idle_ms:>10.2f}{o.pct_of_core:>22.3f}   target < 5 %")
    print(f"   {'reference: bare psutil scan':<36}{o.psutil_scan_ms:>10.2f}{o.psutil_pct_of_core:>22.3f}")
    print(f"   {'reference: one meter pass':<36}{o.meter_ms:>10.2f}")
    ratio = (o.sample_ms + o.idle_ms) / o.psutil_scan_ms if o.psutil_scan_ms else float("nan")
    print(f"   ours / bare scan: {ratio:.2f}x\n")
    print(f"2. idle-stop reaction, {r.trials} randomized trials: {r.within_one_period} within one period "
          f"({r.pct_within} %), {r.early} early, {r.late} late; worst {r.worst_delay_periods} periods after "
          "the window   target 100 %\n")  # fmt: skip
    print(f"3. a synthetic day of {d.renters} notebook renters (GPU-hours):")
    print(f"   {'':<22}{'billed':>10}{'billed idle':>14}")
    print(f"   {'without auto-stop':<22}{d.gpu_hours_billed_without:>10.1f}{d.idle_gpu_hours_without:>14.1f}")
    label = f"with --idle-stop {DEFAULT_WINDOW_S // 60}m"
    print(f"   {label:<22}{d.gpu_hours_billed_with:>10.1f}{d.idle_gpu_hours_with:>14.1f}"
          f"   {d.idle_reduction_pct} % less idle (the server's default)   target >= 80 %")  # fmt: skip
    for m, x in sorted(windows.items()):
        label = f"with --idle-stop {m}m"
        row = f"   {label:<22}{x.gpu_hours_billed_with:>10.1f}{x.idle_gpu_hours_with:>14.1f}"
        print(f"{row}   {x.idle_reduction_pct} % less idle")
    print(f"   busy GPU-hours: {d.busy_gpu_hours} (the same in every row)")
    print("\nPASS" if ok else "\nFAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
