"""Replay a synthetic trace (default 100,000 jobs) through the engine on a virtual clock.

Cluster: 1,024 GPUs on 128 hosts of four GPU models; Poisson arrivals at ~90 % offered load,
log-normal durations, priorities, deadlines, interruptible jobs and several users (see
danlu.scheduling.traces.synthetic). Target: under 5 minutes of wall time per replay.
Usage: python benchmarks/simulate_replay.py [--json] [--jobs N] [--policies fifo,danlu]
"""

from __future__ import annotations

import argparse
import json
import time

from danlu.billing.pricing import Plan, PriceBook
from danlu.scheduling.model import Host
from danlu.scheduling.simulator import SimSetup, simulate, summarize, to_requests
from danlu.scheduling.speed import ThroughputTable
from danlu.scheduling.traces import synthetic

START = 1_767_603_600_000
POOLS = [("A100-80GB", 32, 180, 90), ("V100", 32, 120, 40), ("T4", 32, 35, 12), ("L4", 32, 60, 25)]


def setup() -> SimSetup:
    hosts = tuple(Host(f"{m}-{i}", m, 8, 8) for m, n, _, _ in POOLS for i in range(n))
    prices = {(m, Plan.ON_DEMAND): od for m, _, od, _ in POOLS}
    prices |= {(m, Plan.INTERRUPTIBLE): spot for m, _, _, spot in POOLS}
    return SimSetup(hosts, PriceBook("USD", prices), START, ThroughputTable(), "V100")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--policies", default="fifo,backfill,danlu,danlu-cost")
    args = parser.parse_args()
    s = setup()
    trace = synthetic(args.jobs, sum(h.total_gpus for h in s.hosts), seed=1)
    requests = to_requests(s, trace)
    rows = []
    for name in args.policies.split(","):
        began, began_cpu = time.perf_counter(), time.process_time()
        engine = simulate(s, requests, name)
        wall, cpu = time.perf_counter() - began, time.process_time() - began_cpu
        row = summarize(engine, s, name)
        # cpu_s too: on a shared machine wall time includes other people's work
        row |= {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "target_s": 300, "ok": wall < 300}
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    keys = [
        "policy",
        "jobs",
        "jobs_completed",
        "avg_jct_h",
        "p95_queue_delay_h",
        "utilization",
        "cost",
        "preemptions",
        "rounds",
        "sched_cpu_ms_per_round",
        "wall_s",
        "cpu_s",
        "ok",
    ]
    print(" ".join(f"{k:>14}" for k in keys))
    for r in rows:
        print(" ".join(f"{r[k]!s:>14}" for k in keys))


if __name__ == "__main__":
    main()
