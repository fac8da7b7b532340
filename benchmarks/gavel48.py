"""gavel48 beside Gavel's own simulator: fifo over 10 seeds with its spread, danlu and danlu-cost
(gangs may span hosts of one type, at the table's measured spread speeds: the simulator's default).

fifo is the peer-style baseline every saving is measured against (issue 11, item 8), so it is
reported over seeds 0-9 (its random GPU-type pick, Gavel's ``rng.choice``), as mean [min-max],
beside Gavel's published result for the same trace and cluster (shared/data/gavel/
reference_results_gavel_sim_local.csv). danlu's targets: max_min_fairness avg JCT <= 3.69 h,
minimize_makespan makespan <= 19.35 h; with ``--elastic`` jobs (each trace job may run at any
measured count from 1 GPU to twice its own; issue 30 item 2) a further >= 15 % lower average JCT
than danlu's on each trace. Needs the shared data folder (../shared/data).

    python benchmarks/gavel48.py [--seeds 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from danlu.scheduling.replay import reference_rows, run_simulation
from danlu.scheduling.scenario import load_scenario

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TRACES = ("max_min_fairness", "minimize_makespan")
DANLU_KEYS = ("avg_jct_h", "makespan_h", "utilization", "cost", "migrations", "preemptions")
ELASTIC_KEYS = ("avg_jct_h", "makespan_h", "utilization", "cost", "resizes", "elastic")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    scenario = load_scenario(DATA / "scenarios" / "gavel48.json")
    out: dict[str, Any] = {}
    for name in TRACES:
        trace = DATA / "gavel" / "traces" / f"{name}.trace"
        ref = {r["policy"]: r for r in reference_rows(scenario, trace)}
        fifo = [
            run_simulation(scenario, trace, ["fifo"], tariffs=False, interruptible=False, notice_s=60, seed=seed)[0]
            for seed in range(args.seeds)
        ]
        ours = run_simulation(scenario, trace, ["danlu", "danlu-cost"], tariffs=False, interruptible=False, notice_s=60)
        elastic = run_simulation(
            scenario, trace, ["danlu", "danlu-cost"], tariffs=False, interruptible=False, notice_s=60, elastic=True
        )
        jct = [r["avg_jct_h"] for r in fifo]
        span = [r["makespan_h"] for r in fifo]
        out[name] = {
            "fifo": {
                "avg_jct_h": {"mean": statistics.mean(jct), "min": min(jct), "max": max(jct)},
                "makespan_h": {"mean": statistics.mean(span), "min": min(span), "max": max(span)},
                "utilization_mean": statistics.mean(r["utilization"] for r in fifo),
            },
            "gavel_fifo": {k: float(ref["fifo"][k]) for k in ("avg_jct_h", "makespan_h", "utilization")},
            "danlu": {k: ours[0][k] for k in DANLU_KEYS},
            "danlu-cost": {k: ours[1][k] for k in ("avg_jct_h", "makespan_h", "utilization", "cost")},
            "elastic": {row["policy"]: {k: row[k] for k in ELASTIC_KEYS} for row in elastic},
        }
        out[name]["elastic_jct_ratio"] = out[name]["elastic"]["danlu"]["avg_jct_h"] / out[name]["danlu"]["avg_jct_h"]
    verdicts = {
        "danlu_avg_jct_max_min_fairness_le_3.69": out["max_min_fairness"]["danlu"]["avg_jct_h"] <= 3.69,
        "danlu_makespan_minimize_makespan_le_19.35": round(out["minimize_makespan"]["danlu"]["makespan_h"], 2) <= 19.35,
    }
    elastic_verdicts = {f"elastic_avg_jct_{name}_le_0.85x": out[name]["elastic_jct_ratio"] <= 0.85 for name in TRACES}
    if args.json:
        print(
            json.dumps(
                {"seeds": args.seeds, "traces": out, "verdicts": verdicts, "elastic_verdicts": elastic_verdicts},
                indent=2,
            )
        )
        return
    print(f"gavel48 (8 V100, 16 P100, 24 K80), fifo over seeds 0-{args.seeds - 1}: mean [min-max]")
    print("| trace | measure | our fifo | Gavel's fifo | ours / Gavel's | danlu | danlu-cost |")
    print("|---|---|---|---|---|---|---|")
    for name, r in out.items():
        for key in ("avg_jct_h", "makespan_h"):
            f = r["fifo"][key]
            g = r["gavel_fifo"][key]
            print(
                f"| {name} | {key} | {f['mean']:.2f} [{f['min']:.2f}–{f['max']:.2f}] | {g:.2f} | "
                f"{f['mean'] / g:.2f} | {r['danlu'][key]:.3f} | {r['danlu-cost'][key]:.3f} |"
            )
        print(
            f"| {name} | utilization | {r['fifo']['utilization_mean']:.3f} | {r['gavel_fifo']['utilization']:.3f} | "
            f"{r['fifo']['utilization_mean'] / r['gavel_fifo']['utilization']:.2f} | {r['danlu']['utilization']:.3f} | "
            f"{r['danlu-cost']['utilization']:.3f} |"
        )
    print()
    print("elastic jobs (--elastic: each job may run at any measured count from 1 GPU to twice its own)")
    print("| trace | policy | avg JCT h: fixed → elastic | × | makespan h: fixed → elastic | cost | resizes |")
    print("|---|---|---|---|---|---|---|")
    for name, r in out.items():
        for policy in ("danlu", "danlu-cost"):
            e = r["elastic"][policy]
            f = r[policy]
            cost = f"{f['cost']} → {e['cost']}"
            print(
                f"| {name} | {policy} | {f['avg_jct_h']:.3f} → {e['avg_jct_h']:.3f} | "
                f"{e['avg_jct_h'] / f['avg_jct_h']:.3f} | {f['makespan_h']:.2f} → {e['makespan_h']:.2f} | {cost} | "
                f"{e['resizes']} |"
            )
    for k, v in {**verdicts, **elastic_verdicts}.items():
        print(f"{k}: {'MET' if v else 'MISSED'}")


if __name__ == "__main__":
    main()
