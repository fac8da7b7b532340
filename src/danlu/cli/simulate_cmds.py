"""``danlu simulate``: replay a job trace through the scheduler engine on a virtual clock."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

import typer

from danlu.cli.output import JsonOpt, console, err_console, fail, print_json, print_table
from danlu.core.errors import DanluError
from danlu.scheduling import simulator
from danlu.scheduling.replay import COLUMNS, DEMO_SCENARIO, demo_dir, reference_rows, run_simulation
from danlu.scheduling.scenario import load_scenario
from danlu.scheduling.simulator import MISSING_CHOICES


class StatusLine:
    """A live line on ``stream`` (a terminal) while a policy replays: jobs done of all, simulated
    hours. Redrawn at most every ``every_s`` of wall time; :meth:`clear` erases it."""

    def __init__(self, stream: TextIO, start_ms: int, policies: int, every_s: float = 0.1) -> None:
        self.stream, self.start_ms, self.policies, self.every_s = stream, start_ms, policies, every_s
        self.policy, self.index, self._drawn_at = "", 0, float("-inf")

    def begin(self, policy: str, index: int) -> None:
        self.policy, self.index, self._drawn_at = policy, index, float("-inf")

    def update(self, done: int, total: int, now_ms: int) -> None:
        now = time.monotonic()
        if now - self._drawn_at < self.every_s and done < total:
            return
        self._drawn_at = now
        hours = (now_ms - self.start_ms) / simulator.MS_PER_H
        self.stream.write(
            f"\r\x1b[Ksimulating {self.policy} ({self.index}/{self.policies}): "
            f"{done}/{total} jobs done, {hours:.1f} h simulated"
        )
        self.stream.flush()

    def clear(self) -> None:
        self.stream.write("\r\x1b[K")
        self.stream.flush()


def register(app: typer.Typer) -> None:
    @app.command("simulate")
    def simulate_cmd(
        scenario: Path | None = typer.Option(
            None, "--scenario", help="Scenario JSON (cluster, prices, tariffs). Without it and --trace: the demo."
        ),
        trace: Path | None = typer.Option(
            None, "--trace", help="Trace file: Gavel 10-column or Tiresias CSV (default: the scenario's first)."
        ),
        demo: bool = typer.Option(
            False, "--demo", help="The built-in demo: 16 GPUs of 3 types, the first 40 jobs of a Gavel trace."
        ),
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
        missing: str = typer.Option(
            "estimate",
            "--missing",
            help="A trace job with no measured throughput for its GPU count: estimate (scale the nearest "
            "measured count, flagged), skip (counted) or refuse.",
        ),
        spread: bool = typer.Option(
            True,
            "--spread/--one-host",
            help="Multi-GPU gangs may span hosts of one GPU type (at the table's measured spread throughput, "
            "else the scenario's spread_slowdown); --one-host keeps every gang on one host.",
        ),
        elastic: bool = typer.Option(
            False,
            "--elastic",
            help="Elastic jobs: each trace job may run at any GPU count the throughput table measures for its "
            "job type, from 1 to twice its own; the scheduler picks the count, grows jobs into idle GPUs and "
            "shrinks them so waiting jobs start (resizes column).",
        ),
        as_json: bool = JsonOpt,
    ) -> None:
        """Replay a trace through each policy and print one row per policy (and Gavel's reference)."""
        use_demo = demo or (scenario is None and trace is None)
        if demo and (scenario is not None or trace is not None):
            fail("--demo runs the built-in scenario and trace: give it no --scenario or --trace", "bad_input")
        if scenario is None and trace is not None:
            fail("--trace needs --scenario (the cluster, prices and throughputs to replay it on)", "bad_input")
        if missing not in MISSING_CHOICES:
            fail(f"--missing takes one of {', '.join(MISSING_CHOICES)}, not {missing!r}", "bad_input")
        status: StatusLine | None = None
        try:
            loaded = load_scenario(demo_dir() / DEMO_SCENARIO if use_demo or scenario is None else scenario)
            if trace is None:
                if not loaded.trace_paths:
                    fail(f"scenario {loaded.name} names no trace: pass --trace", "bad_input")
                trace = loaded.trace_paths[0]
            if use_demo:
                (err_console if as_json else console).print(
                    f"demo: the built-in scenario {loaded.name} ({loaded.total_gpus} GPUs: "
                    f"{', '.join(loaded.models)}) and trace {trace.stem}; for your own: --scenario FILE --trace FILE",
                    markup=False,
                    highlight=False,
                )
            names = [p.strip() for p in policies.split(",") if p.strip()]
            if not as_json and sys.stderr.isatty():  # a live line for a person watching, never in a pipe or log
                status = StatusLine(sys.stderr, loaded.start_ms, len(names))
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
                missing=missing,
                spread=spread,
                elastic=elastic,
                status=status,
            )
        except DanluError as exc:
            fail(exc.message, exc.code)
        except OSError as exc:
            fail(f"cannot read input: {exc}", "bad_input")
        finally:
            if status is not None:
                status.clear()
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
                "durations scale the nearest measured count linearly (--missing estimate), an optimistic estimate"
            )
        if rows and rows[0]["jobs_skipped"]:
            ids = ", ".join(rows[0]["skipped"][:10])
            console.print(
                f"note: {rows[0]['jobs_skipped']} job(s) had no measured throughput (none to scale, or --missing "
                f"skip) and were not replayed: {ids}"
            )
        if rows and rows[0]["jobs_dynamic_batch"]:
            console.print(
                f"note: {rows[0]['jobs_dynamic_batch']} job(s) change their batch size as they train (accordion, "
                "gns); they are replayed at their initial batch size"
            )
        if rows and rows[0]["elastic"]:
            console.print(
                f"note: {rows[0]['elastic']} job(s) ran elastic (--elastic): at any GPU count the table measures for "
                "their job type from 1 to twice their own, resized with notice (resizes column); the others "
                "have one measured count"
            )
