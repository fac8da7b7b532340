"""Latency of a full advisor ranking (every GPU model × count × catalog row × plan), in-process and
through the real `danlu advise` command (process start included). Target: under 300 ms.

    python benchmarks/advisor_latency.py [--runs 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import date
from decimal import Decimal

from danlu.advisor import service
from danlu.advisor.plans import PlatformPlans
from danlu.advisor.workload import build_workload
from danlu.catalog.prices import price_catalog
from danlu.compute.offers import Offer

CONTRACT = [
    "advise",
    "--params",
    "7e9",
    "--task",
    "finetune",
    "--precision",
    "bf16",
    "--optimizer",
    "adamw",
    "--tokens",
    "1e9",
    "--json",
]


def _ms(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {"median_ms": round(statistics.median(s) * 1000, 1), "max_ms": round(s[-1] * 1000, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    w = build_workload(params=7e9, tokens=1e9)
    offers = [Offer(m, 80, 8, 8, 8, 2000, "CNY", True, 900) for m in ("H100-80GB", "A100-80GB", "RTX-4090", "T4")]
    plans = PlatformPlans(
        offpeak_discount_pct=Decimal(40),
        terms={"package-day": 1000, "package-week": 2000, "package-month": 3000, "reserved-12m": 4500},
    )
    price_catalog()  # the catalog is cached after first use, as in a server
    in_proc, n_opts = [], 0
    for _ in range(args.runs):
        t = time.perf_counter()
        n_opts = len(service.advise(w, today=date(2026, 12, 2), platform_offers=offers, platform_plans=plans).options)
        in_proc.append(time.perf_counter() - t)
    env = {k: v for k, v in os.environ.items() if k != "DANLU_URL"}
    cli = []
    for _ in range(max(3, args.runs // 4)):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "danlu.cli.main", *CONTRACT], env=env, check=True, capture_output=True)
        cli.append(time.perf_counter() - t)
    advisor_only = []
    code = (
        "import danlu.cli.advisor_cmds; from datetime import date; from danlu.advisor import service; "
        "from danlu.advisor.workload import build_workload; "
        "service.advise(build_workload(params=7e9, tokens=1e9), today=date(2026, 12, 2))"
    )
    for _ in range(max(3, args.runs // 4)):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
        advisor_only.append(time.perf_counter() - t)
    report = {
        "catalog_rows": len(price_catalog().rows),
        "options_ranked": n_opts,
        "target_ms": 300,
        "in_process_full_ranking": _ms(in_proc),
        "fresh_process_advisor_modules_only": _ms(advisor_only),
        "cli_danlu_advise_end_to_end": _ms(cli),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{report['catalog_rows']} catalog rows, {n_opts} options ranked; target < 300 ms")
    print(f"{'measurement':<40}{'median ms':>10}{'max ms':>10}")
    for key in ("in_process_full_ranking", "fresh_process_advisor_modules_only", "cli_danlu_advise_end_to_end"):
        r = report[key]
        print(f"{key:<40}{r['median_ms']:>10}{r['max_ms']:>10}")  # type: ignore[index]
    return 0


if __name__ == "__main__":
    sys.exit(main())
