"""What Slurm's commands print, read: ``squeue``, ``sacct``, ``scontrol show job``, ``sinfo`` GRES, and
the verdict on a run from its job record (``judge``); a gang's per-node file names and summed usage; the
``--slurm-gpu-model`` pairs. Pure: the Slurm backend (danlu.compute.backends.slurm) runs the commands and
hands their output here."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from danlu.backend import RUNNING, RunState, RunUsage
from danlu.core.errors import InvalidInput

JOB_PREFIX = "danlu-"
SQUEUE_FORMAT = "%i|%j|%T|%S|%e|%r|%N|%P|%b"
# Slurm job states (squeue %T) → how a run stands. COMPLETING: the job has ended but Slurm is still
# cleaning its processes up; its GPUs are not free yet, so it counts as running until it is gone.
RUNNING_STATES = {"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "SIGNALING", "STAGE_OUT", "RESIZING"}
EXITED_STATES = {"COMPLETED", "FAILED", "OUT_OF_MEMORY", "TIMEOUT", "DEADLINE", "CANCELLED"}
LOST_STATES = {"NODE_FAIL", "BOOT_FAIL", "PREEMPTED", "REVOKED", "SPECIAL_EXIT", "STOPPED"}


class SlurmUnreachable(Exception):
    """The controller did not answer (or a Slurm command is missing)."""


@dataclass(frozen=True)
class JobRecord:
    """One job as squeue/sacct report it. Times are epoch seconds (None: not yet / unknown)."""

    job_id: str
    name: str
    state: str
    start_s: int | None
    end_s: int | None
    reason: str = ""
    node: str = ""
    exit_code: int | None = None
    partition: str = ""
    gres: str = ""  # what it asked per node (squeue %b), e.g. gres:gpu:a100:2


def _epoch(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def parse_squeue(out: str) -> dict[str, JobRecord]:
    """``squeue -h -t all -o SQUEUE_FORMAT`` (with ``SLURM_TIME_FORMAT=%s``) → job id → record."""
    jobs: dict[str, JobRecord] = {}
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) < 7:
            continue
        job_id, name, state, start, end, reason, node = parts[:7]
        partition = parts[7] if len(parts) > 7 else ""
        gres = parts[8] if len(parts) > 8 else ""
        jobs[job_id.strip()] = JobRecord(
            job_id.strip(),
            name,
            state.strip().split()[0],
            _epoch(start),
            _epoch(end),
            reason,
            node,
            partition=partition,
            gres=gres,
        )
    return jobs


def parse_sacct(out: str) -> dict[str, JobRecord]:
    """``sacct -X -n -P -o JobIDRaw,JobName,State,Start,End,ExitCode`` → job id → record."""
    jobs: dict[str, JobRecord] = {}
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) < 6:
            continue
        job_id, name, state, start, end, code = parts[:6]
        jobs[job_id] = JobRecord(job_id, name, state.split()[0], _epoch(start), _epoch(end), exit_code=_exit_code(code))
    return jobs


def _exit_code(text: str) -> int | None:
    """Slurm's ``CODE:SIGNAL``: a signal's death reads as 128 + signal, like a shell's ``$?``."""
    code, _, sig = text.strip().partition(":")
    if not code.isdigit():
        return None
    return 128 + int(sig) if sig.isdigit() and int(sig) and not int(code) else int(code)


def parse_exit_codes(out: str) -> dict[str, int | None]:
    """``scontrol show job -o ID…`` → job id → exit code."""
    codes: dict[str, int | None] = {}
    for line in out.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "JobId" in fields:
            codes[fields["JobId"]] = _exit_code(fields.get("ExitCode", ""))
    return codes


def gres_gpus(text: str) -> list[tuple[str, int]]:
    """GPUs a job asked per node (squeue %b: ``gres:gpu:a100:2``, ``gres/gpu:2``, several
    comma-separated) as (GRES type, count); no GPU GRES: []."""
    out: list[tuple[str, int]] = []
    for item in text.split(","):
        item = item.strip().removeprefix("gres:").removeprefix("gres/").replace("=", ":")
        parts = item.split(":")
        if parts[0] != "gpu" or len(parts) < 2 or not parts[-1].isdigit():
            continue
        out.append((parts[1] if len(parts) == 3 else "", int(parts[-1])))
    return out


def held_by_others(jobs: Iterable[JobRecord], models: dict[str, str]) -> dict[tuple[str, str], int]:
    """(node, catalog model) -> GPUs that running jobs not named like danlu runs hold (pure).
    ``models``: GRES type -> catalog model; a job naming no type counts against the node's only type."""
    held: dict[tuple[str, str], int] = {}
    for job in jobs:
        if job.name.startswith(JOB_PREFIX) or job.state not in RUNNING_STATES or not job.node or "," in job.node:
            continue  # danlu's own, not holding GPUs now, or on several nodes (not split here)
        for gres_type, count in gres_gpus(job.gres):
            model = models.get(gres_type) or (next(iter(models.values())) if len(models) == 1 else None)
            if model is not None:
                held[(job.node, model)] = held.get((job.node, model), 0) + count
    return held


NODE_EXCEPTION = re.compile(r"^[A-Za-z_.]*(Error|Exception)\b.*:")  # the last line of a Python traceback


def judge(job: JobRecord | None, seen_started: bool) -> RunState:
    """How a run stands by its job's record (pure). ``None``: Slurm no longer knows the job."""
    if job is None:
        return RunState("lost", reason="Slurm no longer knows its job (purged, or the controller lost its state)")
    if job.state in RUNNING_STATES:
        return RUNNING
    ended_ms = job.end_s * 1000 if job.end_s is not None else None
    if job.state == "PENDING":
        if not seen_started and job.reason in ("JobHeldUser", "JobHeldAdmin"):
            return RunState("never_started", reason="the server stopped before Slurm was told to start it")
        return RunState("lost", reason=f"Slurm put its job {job.job_id} back in its queue ({job.reason})")
    if job.state in EXITED_STATES and ended_ms is not None:
        if job.state == "CANCELLED":
            why = f"Slurm job {job.job_id} was cancelled"
        elif job.state in ("TIMEOUT", "DEADLINE"):
            why = f"Slurm job {job.job_id} reached its time limit"
        elif job.state == "OUT_OF_MEMORY":
            why = f"Slurm job {job.job_id} ran out of memory"
        else:
            why = ""
        return RunState("exited", code=job.exit_code, ended_ms=ended_ms, reason=why)
    where = f" on {job.node}" if job.node else ""
    return RunState("lost", ended_ms=ended_ms, reason=f"Slurm job {job.job_id} ended {job.state}{where}")


@dataclass(frozen=True)
class SlurmGpus:
    node: str
    gres_type: str
    count: int


SINFO_NODES_FORMAT = "%N|%T|%G"
# sinfo's %T: a base state, "+FLAG"s, and one trailing character for what the controller knows of
# the node (* not responding, ~ powered off, # powering up, ! powering down, % powering off,
# $ maintenance reservation, @ reboot pending, ^ reboot issued). A new run starts only on these.
USABLE_STATES = frozenset({"idle", "mixed", "allocated", "completing"})
USABLE_FLAGS = frozenset({"completing", "planned"})
UNUSABLE_MARKS = "*~#!%$@^"


def node_usable(state: str) -> bool:
    """Whether a node in this sinfo ``%T`` state can start a new run (pure): not drained or
    draining, down, failing, in maintenance, rebooting, powered off or silent."""
    s = state.strip().lower()
    if not s or s[-1] in UNUSABLE_MARKS:
        return False
    base, *flags = s.split("+")
    return base in USABLE_STATES and all(f in USABLE_FLAGS for f in flags)


def unusable_gpus(out: str) -> dict[tuple[str, str], int]:
    """``sinfo -h -N -o '%N|%T|%G'`` → (node, GRES type) → the GPUs of every node a new run cannot
    start on (pure). A node listed once per partition is counted once."""
    lines = []
    for line in out.splitlines():
        node, _, rest = line.partition("|")
        state, _, gres = rest.partition("|")
        if node.strip() and not node_usable(state):
            lines.append(f"{node}|{gres}")
    return {(g.node, g.gres_type): g.count for g in parse_sinfo_gres("\n".join(lines))}


def parse_sinfo_gres(out: str) -> list[SlurmGpus]:
    """``sinfo -h -N -o '%N|%G'`` → every node's GPU GRES (``gpu:a100:4``, ``gpu:a100:4(S:0)``,
    several types comma-separated). A node listed once per partition is counted once."""
    found: dict[tuple[str, str], int] = {}
    for line in out.splitlines():
        node, _, gres = line.partition("|")
        for item in gres.split(","):
            parts = item.split("(")[0].strip().split(":")
            if parts[0] != "gpu" or len(parts) < 2:
                continue
            gres_type = parts[1] if len(parts) == 3 else ""
            count = parts[-1]
            if count.isdigit():
                found[(node.strip(), gres_type)] = int(count)
    return [SlurmGpus(node, t, n) for (node, t), n in sorted(found.items())]


def rank_run_id(run_id: str, rank: int) -> str:
    """The name a gang's node ``rank`` keeps its files (and its local run) under: the run's own for rank 0."""
    return run_id if rank == 0 else f"{run_id}-node{rank}"


def ranks(h: dict[str, Any]) -> list[dict[str, Any]]:
    """The handle as each of its nodes' runners names its files (one, unless a gang)."""
    return [{**h, "run": rank_run_id(str(h["run"]), r)} for r in range(len(h.get("nodes") or [None]))]


def sum_usage(readings: Sequence[RunUsage]) -> RunUsage:
    fields = RunUsage.__dataclass_fields__
    total: dict[str, Any] = {}
    for name in fields:
        values = [getattr(u, name) for u in readings if getattr(u, name) is not None]
        # the workspace is one folder all nodes measure: its size once, not once per node
        total[name] = (max if name == "disk_bytes" else sum)(values) if values else None
    return RunUsage(**total)


def parse_gpu_models(pairs: Sequence[str]) -> dict[str, str]:
    """``--slurm-gpu-model a100=A100-80GB`` (repeatable) → GRES type → catalog model name."""
    from danlu.catalog.gpu_models import resolve_model

    out: dict[str, str] = {}
    for pair in pairs:
        gres_type, sep, model = pair.partition("=")
        if not sep or not gres_type.strip() or not model.strip():
            raise InvalidInput(
                "invalid_slurm_gpu_model", f"--slurm-gpu-model takes TYPE=MODEL, e.g. a100=A100-80GB; got {pair!r}"
            )
        out[gres_type.strip()] = resolve_model(model.strip()).name
    return out
