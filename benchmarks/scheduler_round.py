"""One scheduling round at scale: 10,000 GPUs on 1,250 hosts, 100,000 queued jobs.

Two cluster states per policy: empty (every GPU free) and half busy (5,000 GPUs held by running
allocations, so reservations and backfill checks do real work). Prints a table, or JSON with --json.
Usage: python benchmarks/scheduler_round.py [--json] [--jobs N] [--hosts N]
"""

from __future__ import annotations

import argparse
import json
import random
import time

from danlu.billing.pricing import Plan, PriceBook
from danlu.scheduling.core import schedule
from danlu.scheduling.model import Allocation, ClusterView, Host, JobRequest, Start
from danlu.scheduling.policies import POLICIES

MODELS = ["A100-80GB", "V100", "T4", "L4"]
NOW = 1_767_603_600_000
H = 3_600_000


def build(n_hosts: int, n_jobs: int, busy: bool, seed: int = 0) -> ClusterView:
    rng = random.Random(seed)
    hosts, running = [], []
    for h in range(n_hosts):
        model = MODELS[h % len(MODELS)]
        used = 4 if busy else 0
        if used:
            running.append(
                Allocation(
                    f"r{h}",
                    f"u{h % 50}",
                    f"h{h}",
                    model,
                    used,
                    NOW - H,
                    NOW + rng.randint(1, 48) * H,
                    interruptible=rng.random() < 0.2,
                )
            )
        hosts.append(Host(f"h{h}", model, 8, 8 - used))
    queue = []
    for j in range(n_jobs):
        base = rng.lognormvariate(8.0, 1.0) * 1000
        allowed = rng.sample(MODELS, rng.randint(1, len(MODELS)))
        queue.append(
            JobRequest(
                id=f"q{j}",
                user=f"u{rng.randrange(50)}",
                gpus=rng.choice([1, 1, 2, 4, 8]),
                submit_ms=NOW - rng.randint(0, 48 * H),
                durations_ms={m: int(base * (i + 1)) for i, m in enumerate(allowed)},
                priority=rng.choice([0, 1, 1, 2]),
                interruptible=rng.random() < 0.2,
                seq=j,
            )
        )
    prices = PriceBook("USD", {(m, p): 100 * (i + 1) for i, m in enumerate(MODELS) for p in Plan})
    return ClusterView(
        NOW, tuple(hosts), tuple(queue), tuple(running), prices, usage={f"u{i}": float(i) for i in range(50)}
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--hosts", type=int, default=1_250)
    args = parser.parse_args()
    rows = []
    for busy in (False, True):
        view = build(args.hosts, args.jobs, busy)
        for name, policy in POLICIES.items():
            began = time.perf_counter()
            decisions = schedule(view, policy)
            elapsed = time.perf_counter() - began
            rows.append(
                {
                    "policy": name,
                    "cluster": "half busy" if busy else "empty",
                    "gpus": 8 * args.hosts,
                    "hosts": args.hosts,
                    "queued": args.jobs,
                    "round_s": round(elapsed, 3),
                    "starts": sum(isinstance(d, Start) for d in decisions),
                    "decisions": len(decisions),
                    "target_s": 1.0,
                    "ok": elapsed < 1.0,
                }
            )
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'policy':<11} {'cluster':<10} {'round s':>8} {'starts':>7} {'decisions':>9}  < 1 s")
    for r in rows:
        print(f"{r['policy']:<11} {r['cluster']:<10} {r['round_s']:>8} {r['starts']:>7} {r['decisions']:>9}  {r['ok']}")


if __name__ == "__main__":
    main()
