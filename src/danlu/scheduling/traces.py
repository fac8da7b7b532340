"""Trace readers (Gavel 10-column, Shockwave 11/12-column, Tiresias CSV) and a synthetic trace generator.

A :class:`TraceJob` describes work, not time on a particular GPU: either ``steps`` of a known
``job_type`` (durations come from the throughput table) or a ``duration_s`` measured on some
``reference_model`` (durations scale by specs).
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from pathlib import Path

from danlu.core.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class TraceJob:
    id: str
    arrival_s: float
    gpus: int
    job_type: str = ""
    steps: float = 0.0
    duration_s: float = 0.0
    user: str = "default"
    priority: int = 1
    deadline_s: float | None = None  # absolute, trace time
    interruptible: bool = False
    allowed_models: tuple[str, ...] = ()
    # Shockwave's batch-size mode (static | accordion | gns): a dynamic one runs at its initial
    # batch size here (the throughput table's row) until elastic batch sizes are modelled
    batch_mode: str = "static"


BATCH_MODES = ("static", "accordion", "gns")


def read_gavel(path: Path) -> list[TraceJob]:
    """Gavel's 10 tab-separated columns: job_type, command, working_dir, num_steps_arg,
    needs_data_dir, total_steps, scale_factor, priority_weight, SLO (-1 none; else a multiple of the
    job's isolated duration is not known here, so a positive SLO is read as seconds after arrival),
    arrival_time (s). Shockwave's traces (uw-mad-dash/shockwave, scheduler/utils.py parse_trace) add
    ``mode`` (the batch-size mode) after scale_factor (11 columns) and ``duration`` (s, on the
    generator's reference GPU) before arrival_time (12 columns, its dynamic-batch traces); there a
    positive SLO is a multiple of that duration, as Shockwave reads it."""
    jobs = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) not in (10, 11, 12):
            raise InvalidInput(
                "bad_trace",
                f"{path}:{n + 1}: expected 10 tab-separated columns (Gavel) or 11/12 (Shockwave), got {len(cols)}",
            )
        mode = "static"
        duration = 0.0
        if len(cols) >= 11:
            mode = cols.pop(7)
            if mode not in BATCH_MODES:
                raise InvalidInput(
                    "bad_trace", f"{path}:{n + 1}: batch-size mode {mode!r} is not one of {', '.join(BATCH_MODES)}"
                )
        try:
            if len(cols) == 11:
                duration = float(cols.pop(9))
            arrival = float(cols[9])
            slo = float(cols[8])
            if slo > 0 and duration > 0:  # Shockwave's SLO is a multiple of the job's duration
                slo *= duration
            jobs.append(
                TraceJob(
                    id=f"j{n}",
                    arrival_s=arrival,
                    gpus=int(cols[6]),
                    job_type=cols[0],
                    steps=float(cols[5]),
                    duration_s=max(0.0, duration),
                    priority=max(0, min(2, round(float(cols[7])))),
                    deadline_s=arrival + slo if slo > 0 else None,
                    batch_mode=mode,
                )
            )
        except ValueError as exc:
            raise InvalidInput("bad_trace", f"{path}:{n + 1}: {exc}") from None
    return jobs


def read_tiresias(path: Path) -> list[TraceJob]:
    """``job_id,num_gpu,submit_time,iterations,model_name,duration,interval`` (+ optional user)."""
    jobs = []
    with path.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            try:
                jobs.append(
                    TraceJob(
                        id=f"t{row['job_id']}",
                        arrival_s=float(row["submit_time"]),
                        gpus=int(row["num_gpu"]),
                        job_type=row.get("model_name", ""),
                        duration_s=float(row["duration"]),
                        user=row.get("user") or "default",
                    )
                )
            except (KeyError, ValueError) as exc:
                raise InvalidInput("bad_trace", f"{path}: row {row!r}: {exc}") from None
    return jobs


def read_trace(path: Path) -> list[TraceJob]:
    """Pick the reader from the content: a CSV header with ``num_gpu`` is Tiresias, else Gavel."""
    first = path.read_text(encoding="utf-8").split("\n", 1)[0]
    if "num_gpu" in first and "," in first:
        return read_tiresias(path)
    return read_gavel(path)


def synthetic(n: int, gpus_total: int, seed: int = 0, load: float = 0.9, users: int = 20) -> list[TraceJob]:
    """Poisson arrivals, log-normal durations (median 30 min) on a reference GPU, 1-8 GPUs,
    sized so that offered load is about ``load`` x the cluster; some priorities, deadlines,
    interruptible jobs and type constraints, to exercise every path of the scheduler."""
    rng = random.Random(seed)
    sizes = [1, 1, 1, 1, 2, 2, 4, 8]
    mean_gpu_s = sum(sizes) / len(sizes) * 1800 * 1.65  # E[lognormal(ln 1800, 1)] ~ 1.65 x median
    rate = load * gpus_total / mean_gpu_s
    t = 0.0
    jobs = []
    for i in range(n):
        t += rng.expovariate(rate)
        duration = min(rng.lognormvariate(7.5, 1.0), 14 * 86_400)
        gpus = rng.choice(sizes)
        roll = rng.random()
        jobs.append(
            TraceJob(
                id=f"s{i}",
                arrival_s=t,
                gpus=gpus,
                duration_s=duration,
                user=f"u{rng.randrange(users)}",
                priority=2 if roll < 0.05 else (0 if roll > 0.85 else 1),
                deadline_s=t + duration * 6 if rng.random() < 0.1 else None,
                interruptible=rng.random() < 0.2,
            )
        )
    return jobs
