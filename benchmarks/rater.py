"""The one rater (danlu.billing.rating) at meter scale, pure: no database, no clock.

10,000 allocations of 100 s each (1,000,000 usage seconds) are metered in 10 ticks apiece (tick
marks fall at random milliseconds, as the meter's do), each tick charging ``charge_between``:

* ``tariffs + discount``: a weekday-night / weekday-lunch / weekend tariff set in Asia/Shanghai and a
  10 % discount, the exact path (tariff parts, Fractions, one rounding); the tariff timeline cache is
  cleared first, so its cold start is counted;
* ``flat (reference)``: the same allocations and ticks with no tariff and no discount, the integer
  fast path the live meter has used since issue 1.

Starts are spread over two weeks, plus 5 % of allocations placed across a tariff boundary. Checked
on every run: the ticks of each allocation add up to ``cumulative_cost`` of its whole usage (no
rounding drift), and the exact path with a 0 % discount and no tariff in force equals the flat one.
Prints a table, or JSON with --json; exit code 1 on FAIL.

    python benchmarks/rater.py [--allocations 10000] [--seconds 100] [--ticks 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from datetime import datetime
from datetime import time as clock
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from danlu.billing import rating
from danlu.billing.pricing import Plan, Tariff, tariff_boundaries
from danlu.billing.rating import Rate, billable_seconds, charge_between, cumulative_cost

TARGET_SECONDS_PER_S = 50_000
ZONE = "Asia/Shanghai"
WEEKDAYS = frozenset(range(5))
TARIFFS = (
    Tariff("weekday-night", WEEKDAYS, clock(23), clock(8), Decimal("0.6"), timezone=ZONE),
    Tariff("weekday-lunch", WEEKDAYS, clock(12), clock(13), Decimal("0.9"), timezone=ZONE),
    Tariff("weekend", frozenset({5, 6}), clock(0), clock(0), Decimal("0.7"), timezone=ZONE),
)
DISCOUNT_BP = 1_000  # 10 %
PRICES = [3600, 360, 2500, 295]  # minor units per GPU-hour: 1 fen/s, 0.1 fen/s, and odd ones
T0 = int(datetime(2026, 1, 5, tzinfo=ZoneInfo(ZONE)).timestamp() * 1000)  # a Monday
SPREAD_MS = 14 * 86_400_000


def workload(n: int, seconds: int, ticks: int, seed: int = 0) -> list[tuple[int, int, int, list[int]]]:
    """(price, gpus, started_ms, tick marks) per allocation; the last mark is the allocation's end."""
    rng = random.Random(seed)
    edges = tariff_boundaries(TARIFFS, T0, T0 + SPREAD_MS)
    out = []
    for i in range(n):
        across = i % 20 == 0  # 5 % of allocations straddle a tariff boundary
        start = rng.choice(edges) - rng.randrange(1, seconds * 1000) if across else T0 + rng.randrange(SPREAD_MS)
        end = start + seconds * 1000 + rng.randrange(1000)
        cuts = sorted(start + rng.randrange(1, end - start) for _ in range(ticks - 1))
        out.append((rng.choice(PRICES), rng.choice([1, 1, 2, 4, 8]), start, [*cuts, end]))
    return out


def run(data: list[tuple[int, int, int, list[int]]], tariffs: tuple[Tariff, ...], discount_bp: int) -> dict[str, Any]:
    rates = [Rate(p, g, s, Plan.ON_DEMAND, tariffs, discount_bp) for p, g, s, _ in data]
    rating._day_timeline.cache_clear()
    began = time.perf_counter()
    cpu = time.process_time()
    billed = 0
    ticks = 0
    per_alloc = []
    for rate, (_, _, start, marks) in zip(rates, data, strict=True):
        prev = start
        charged = 0
        for mark in marks:
            charged += charge_between(rate, prev, mark)
            prev = mark
        ticks += len(marks)
        per_alloc.append(charged)
        billed += charged
    wall = time.perf_counter() - began
    cpu = time.process_time() - cpu
    seconds = sum(billable_seconds(s, marks[-1]) for _, _, s, marks in data)
    drift = sum(
        charged != cumulative_cost(rate, billable_seconds(rate.started_ms, marks[-1]))
        for rate, charged, (_, _, _, marks) in zip(rates, per_alloc, data, strict=True)
    )
    split = sum(
        len(rating.segments(r, 0, billable_seconds(r.started_ms, m[-1]))) > 1
        for r, (*_, m) in zip(rates, data, strict=True)
    )
    return {
        "allocations": len(data),
        "ticks": ticks,
        "rated_seconds": seconds,
        "split_allocations": split,
        "billed_minor": billed,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "rated_seconds_per_s": round(seconds / wall),
        "us_per_tick": round(wall / ticks * 1e6, 1),
        "drifting_allocations": drift,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--allocations", type=int, default=10_000)
    parser.add_argument("--seconds", type=int, default=100)
    parser.add_argument("--ticks", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    data = workload(args.allocations, args.seconds, args.ticks)
    rows = [
        {"path": "tariffs + 10% discount", **run(data, TARIFFS, DISCOUNT_BP)},
        {"path": "flat (reference)", **run(data, (), 0)},
    ]
    # the exact path, with nothing in force (a tariff of another plan, no discount), bills like the flat one
    other_plan = (
        Tariff("spot", frozenset(range(7)), clock(0), clock(0), Decimal("0.5"), plans=frozenset({Plan.INTERRUPTIBLE})),
    )
    same = run(data, other_plan, 0)["billed_minor"] == rows[1]["billed_minor"]
    for r in rows:
        r["target"] = f">= {TARGET_SECONDS_PER_S:,} rated s/s, no drift"
        r["ok"] = r["rated_seconds_per_s"] >= TARGET_SECONDS_PER_S and r["drifting_allocations"] == 0 and same
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"load_avg_1m": load, "exact_equals_flat": same, "rows": rows}, indent=2))
        raise SystemExit(0 if all(r["ok"] for r in rows) else 1)
    print(f"load average (1 min): {load:.2f}; exact path without tariffs == flat path: {same}")
    cols = [("allocs", 7), ("ticks", 8), ("rated s", 10), ("split", 6), ("wall s", 7), ("rated s/s", 10)]
    cols += [("µs/tick", 8), ("drift", 6)]
    print(
        f"{'path':<24} " + " ".join(f"{name:>{width}}" for name, width in cols) + f"  >= {TARGET_SECONDS_PER_S:,} s/s"
    )
    for r in rows:
        values = [r["allocations"], r["ticks"], r["rated_seconds"], r["split_allocations"], r["wall_s"]]
        values += [f"{r['rated_seconds_per_s']:,}", r["us_per_tick"], r["drifting_allocations"]]
        cells = " ".join(f"{v:>{width}}" for v, (_, width) in zip(values, cols, strict=True))
        print(f"{r['path']:<24} {cells}  {'OK' if r['ok'] else 'FAIL'}")
    ratio = rows[0]["wall_s"] / rows[1]["wall_s"] if rows[1]["wall_s"] else float("inf")
    print(f"tariffs + discount / flat wall time: {ratio:.1f}×")
    if not all(r["ok"] for r in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
