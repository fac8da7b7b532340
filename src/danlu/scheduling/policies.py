"""The policy registry: each policy is a small set of switches over one list scheduler.

* ``fifo``: a model of Gavel's FIFO (scheduler/policies/fifo.py, mode 'base'): arrival order,
  the head of the queue blocks everyone; a uniformly random GPU type among those with room for
  the gang (seeded, reproducible per job); the job keeps that type until it ends; no backfill,
  no preemption; Gavel's 360 s round in the simulator.
* ``backfill``: priority then arrival; any free type; Slurm-style reservations + backfill.
* ``danlu``: priority, then deadline urgency, then fair-share-weighted shortest GPU-time first
  with aging; GPU type by earliest estimated finish, the cheapest within a small slack;
  backfill; preemption of interruptible / lower-priority work with notice; off-peak deferral
  only for jobs whose deadline still holds; migration of running jobs to a faster free type when
  it finishes them sooner by more than the restart overhead (and so a job may start on a slower
  free type rather than wait for a faster one).
* ``danlu-cost``: as ``danlu`` but the type with the lowest cost per job (cost per unit of
  work), and deferral to cheaper tariff windows for every job (no deadline = unbounded).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from danlu.scheduling.fairshare import fairshare_factors
from danlu.scheduling.model import ClusterView, JobRequest

Order = Literal["fifo", "priority", "danlu"]
Choice = Literal["any", "balanced", "cheapest"]
DeferMode = Literal["never", "deadline", "always"]


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    order: Order
    choice: Choice
    backfill: bool
    preempt: bool
    defer: DeferMode
    # balanced choice: among types finishing within (1 + time_slack) x the earliest finish, the cheapest
    time_slack: float = 0.1
    # how many blocked jobs per round get a reservation (Slurm's bf_max_job_test, kept small)
    reservation_depth: int = 32
    # how far ahead to look for a cheaper tariff window when a job has no deadline
    defer_horizon_ms: int = 7 * 24 * 3_600_000
    # move running jobs to a faster type (noticed stop + resume) when that finishes them sooner
    migrate: bool = False
    # seed of the "any type" pick (fifo/backfill): a different seed is a different random draw
    seed: int = 0
    # scheduling interval the simulator uses for this policy unless told otherwise (None = 60 s)
    round_ms: int | None = None


POLICIES: dict[str, Policy] = {
    "fifo": Policy("fifo", "fifo", "any", backfill=False, preempt=False, defer="never", round_ms=360_000),
    "backfill": Policy("backfill", "priority", "any", backfill=True, preempt=False, defer="never"),
    "danlu": Policy("danlu", "danlu", "balanced", backfill=True, preempt=True, defer="deadline", migrate=True),
    "danlu-cost": Policy("danlu-cost", "danlu", "cheapest", backfill=True, preempt=True, defer="always"),
}


def get_policy(name: str) -> Policy:
    from danlu.core.errors import InvalidInput

    try:
        return POLICIES[name]
    except KeyError:
        raise InvalidInput("unknown_policy", f"unknown policy {name!r}; choose from {', '.join(POLICIES)}") from None


def any_type_index(job_id: str, n: int, seed: int = 0) -> int:
    """A uniform pseudo-random pick among ``n`` types, like Gavel's FIFO (``rng.randrange``),
    reproducible per (seed, job): the pure core keeps no RNG state between rounds."""
    key = job_id if seed == 0 else f"{seed}:{job_id}"
    return zlib.crc32(key.encode()) % n


def min_duration(job: JobRequest) -> int:
    return min((d for d in job.durations_ms.values() if d > 0), default=0)


def order_key(view: ClusterView, policy: Policy) -> Callable[[JobRequest], tuple[float, ...]]:
    """Sort key of the queue (smallest first)."""
    if policy.order == "fifo":
        return lambda job: (job.seq,)
    if policy.order == "priority":
        return lambda job: (-job.priority, job.seq)
    factors = fairshare_factors({j.user for j in view.queue}, view.usage, view.shares) if view.usage else {}
    now = view.now_ms

    def danlu_key(job: JobRequest) -> tuple[float, ...]:
        shortest = min_duration(job)
        size = float(shortest * job.gpus) or 1.0
        wait = float(max(0, now - job.submit_ms) * job.gpus)
        # shortest-GPU-time first, aged (response-ratio style) so long jobs are not starved,
        # divided by the user's fair-share factor so heavy users sort later
        rank = size * size / ((size + wait) * factors.get(job.user, 1.0) + 1e-12)
        urgent = job.deadline_ms is not None and job.deadline_ms - now - shortest <= shortest
        return (-job.priority, 0 if urgent else 1, rank, job.seq)

    return danlu_key
