"""Replaying a job trace through the scheduler engine on a virtual clock, for ``danlu simulate`` and the
console's simulator page alike: the built-in demo, one summary row per policy, Gavel's reference rows."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from danlu.core.errors import InvalidInput
from danlu.scheduling.scenario import Scenario
from danlu.scheduling.simulator import Missing, SimSetup, simulate, summarize, to_requests
from danlu.scheduling.traces import read_trace


class Progress(Protocol):
    """Told as each policy starts replaying and as its jobs finish (a shell's live status line)."""

    def begin(self, policy: str, index: int) -> None: ...
    def update(self, done: int, total: int, now_ms: int) -> None: ...


DEMO_SCENARIO = "demo16.json"  # in danlu/scheduling/demo/, with its trace, throughputs and sources

COLUMNS = [
    ("policy", "policy"),
    ("jobs_completed", "done"),
    ("jobs_unfinished", "not done"),
    ("avg_jct_h", "avg JCT h"),
    ("p95_queue_delay_h", "p95 wait h"),
    ("makespan_h", "makespan h"),
    ("utilization", "util"),
    ("cost", "cost"),
    ("cost_per_completed_job", "cost/job"),
    ("deadline_misses", "deadline misses"),
    ("preemptions", "preemptions"),
    ("migrations", "migrations"),
    ("resizes", "resizes"),
    ("sched_cpu_ms_per_decision", "sched ms/decision"),
    ("source", "source"),
]


def demo_dir() -> Path:
    """The built-in demo's folder (package data: a scenario, a 40-job Gavel trace, throughputs)."""
    root = resources.files("danlu.scheduling").joinpath("demo")
    if not isinstance(root, Path) or not root.joinpath(DEMO_SCENARIO).is_file():
        raise InvalidInput("no_demo", "this installation of danlu has no demo scenario; pass --scenario and --trace")
    return root


def run_simulation(
    scenario: Scenario,
    trace: Path,
    policies: list[str],
    *,
    tariffs: bool,
    interruptible: bool,
    notice_s: int,
    round_s: int | None = None,
    restart_overhead_s: int = 30,
    seed: int = 0,
    missing: Missing = "estimate",
    spread: bool = True,
    elastic: bool = False,
    status: Progress | None = None,
) -> list[dict[str, Any]]:
    prices = scenario.prices if tariffs else scenario.prices.without_tariffs()
    setup = SimSetup(
        scenario.hosts, prices, scenario.start_ms, scenario.throughputs, scenario.models[-1], scenario.spread_slowdown
    )
    trace_jobs = read_trace(trace)
    requests = to_requests(
        setup, trace_jobs, interruptible=interruptible, missing=missing, spread=spread, elastic=elastic
    )
    kept = {r.id for r in requests}
    skipped = [tj.id for tj in trace_jobs if tj.id not in kept]
    dynamic = sum(1 for tj in trace_jobs if tj.batch_mode != "static" and tj.id in kept)
    assumptions = [f"tariff {t.name!r} is a synthetic assumption" for t in prices.tariffs if t.synthetic]
    rows = []
    for n, name in enumerate(policies, 1):
        if status is not None:
            status.begin(name, n)
        engine = simulate(
            setup,
            requests,
            name,
            notice_ms=notice_s * 1000,
            round_ms=None if round_s is None else max(1, round_s) * 1000,
            restart_overhead_ms=restart_overhead_s * 1000,
            seed=seed,
            progress=status.update if status is not None else None,
        )
        row = summarize(engine, setup, name)
        row["trace"] = trace.stem
        row["plan"] = "interruptible" if interruptible else "on-demand"
        row["tariffs"] = [t.name for t in prices.tariffs]
        row["assumptions"] = assumptions
        row["jobs"] = len(trace_jobs)  # replayed, unplaceable and skipped
        row["jobs_skipped"] = len(skipped)
        row["skipped"] = skipped
        row["jobs_dynamic_batch"] = dynamic  # read at their initial batch size (traces.TraceJob.batch_mode)
        row["spread"] = spread
        row["elastic"] = sum(1 for r in requests if r.counts_ms) if elastic else 0  # jobs offered a range
        rows.append(row)
    return rows


def reference_rows(scenario: Scenario, trace: Path) -> list[dict[str, Any]]:
    return [
        {
            "policy": r["policy"],
            "jobs_completed": r["jobs_completed"],
            "avg_jct_h": r["avg_jct_h"],
            "makespan_h": r["makespan_h"],
            "utilization": r["utilization"],
            "source": "gavel-ref",
        }
        for r in scenario.reference
        if r.get("trace") == trace.stem
    ]
