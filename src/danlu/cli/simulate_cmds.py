"""``danlu simulate``: replay a job trace through the scheduler engine on a virtual clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from danlu.cli.output import JsonOpt, console, fail, print_json, print_table
from danlu.core.errors import DanluError
from danlu.scheduling.scenario import Scenario, load_scenario
from danlu.scheduling.simulator import SimSetup, simulate, summarize, to_requests
from danlu.scheduling.traces import read_trace

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
    ("sched_cpu_ms_per_decision", "sched ms/decision"),
    ("source", "source"),
]


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
    estimate_missing: bool = False,
) -> list[dict[str, Any]]:
    prices = scenario.prices if tariffs else scenario.prices.without_tariffs()
    setup = SimSetup(scenario.hosts, prices, scenario.start_ms, scenario.throughputs, scenario.models[-1])
    requests = to_requests(setup, read_trace(trace), interruptible=interruptible, estimate_missing=estimate_missing)
    assumptions = [f"tariff {t.name!r} is a synthetic assumption" for t in prices.tariffs if t.synthetic]
    rows = []
    for name in policies:
        engine = simulate(
            setup,
            requests,
            name,
            notice_ms=notice_s * 1000,
            round_ms=None if round_s is None else max(1, round_s) * 1000,
            restart_overhead_ms=restart_overhead_s * 1000,
            seed=seed,
        )
        row = summarize(engine, setup, name)
        row["trace"] = trace.stem
        row["plan"] = "interruptible" if interruptible else "on-demand"
        row["tariffs"] = [t.name for t in prices.tariffs]
        row["assumptions"] = assumptions
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


def register(app: typer.Typer) -> None:
    @app.command("simulate")
    def simulate_cmd(
        scenario: Path = typer.Option(..., "--scenario", help="Scenario JSON (cluster, prices, tariffs)."),
        trace: Path = typer.Option(..., "--trace", help="Trace file: Gavel 10-column or Tiresias CSV."),
        policies: str = typer.Option("fifo,backfill,danlu,danlu-cost", "--policies", help="Comma-separated."),
        tariffs: bool = typer.Option(True, "--tariffs/--no-tariffs", help="Apply the scenario's tariffs."),
        interruptible: bool = typer.Option(
            False, "--interruptible", help="Submit every job as interruptible (spot price)."
        ),
        notice_s: int = typer.Option(60, "--notice-s", help="Preemption notice in seconds."),
        round_s: int | None = typer.Option(
            None, "--round-s", help="Scheduling interval in virtual seconds (default: fifo 360 like Gavel, others 60)."
        ),
        restart_overhead_s: int = typer.Option(
            30, "--restart-overhead-s", help="Work lost on each resume from a checkpoint (migration, preemption)."
        ),
        seed: int = typer.Option(0, "--seed", help="Seed of the random GPU-type pick of fifo/backfill."),
        estimate_missing: bool = typer.Option(
            False,
            "--estimate-missing",
            help="A job with no measured throughput for its GPU count: scale the nearest count (flagged).",
        ),
        as_json: bool = JsonOpt,
    ) -> None:
        """Replay a trace through each policy and print one row per policy (and Gavel's reference)."""
        try:
            loaded = load_scenario(scenario)
            names = [p.strip() for p in policies.split(",") if p.strip()]
            rows = run_simulation(
                loaded,
                trace,
                names,
                tariffs=tariffs,
                interruptible=interruptible,
                notice_s=notice_s,
                round_s=round_s,
                restart_overhead_s=restart_overhead_s,
                seed=seed,
                estimate_missing=estimate_missing,
            )
        except DanluError as exc:
            fail(exc.message, exc.code)
        except OSError as exc:
            fail(f"cannot read input: {exc}", "bad_input")
        if as_json:
            print_json(rows)
            return
        for row in rows:
            row["source"] = "danlu"
        title = f"{loaded.name} / {trace.stem} ({rows[0]['plan'] if rows else ''}, costs in {loaded.currency})"
        print_table(rows + reference_rows(loaded, trace), COLUMNS, title=title)
        for note in rows[0]["assumptions"] if rows else []:
            console.print(f"note: {note} (no public time-of-day GPU price series exists)")
        if rows and rows[0]["jobs_unplaceable"]:
            ids = ", ".join(rows[0]["unplaceable"][:10])
            console.print(
                f"note: {rows[0]['jobs_unplaceable']} job(s) no host can ever hold (a gang wider than any host of "
                f"their types, or no type they run on) were not queued: {ids}; averages cover finished jobs only"
            )
        if rows and rows[0]["jobs_estimated"]:
            console.print(
                f"note: {rows[0]['jobs_estimated']} job(s) had no measured throughput for their GPU count; their "
                "durations scale the nearest measured count linearly (--estimate-missing), an optimistic estimate"
            )
