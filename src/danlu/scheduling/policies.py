"""The policy registry: each policy is a small set of switches over one list scheduler.

* ``fifo``: a model of Gavel's FIFO (scheduler/policies/fifo.py, mode 'base'): arrival order,
  the head of the queue blocks everyone; a uniformly random GPU type among those with room for
  the gang (seeded, reproducible per job); the job keeps that type until it ends; no backfill,
  no preemption; Gavel's 360 s round in the simulator.
* ``backfill``: priority then arrival; any free type; Slurm-style reservations + backfill.
* ``danlu``: priority, then deadline urgency, then fair-share-weighted shortest GPU-time first
  with aging (longest first while the queue looks like a closed batch, see :func:`batch_horizon`);
  GPU type by earliest estimated finish, the cheapest within a small slack;
  backfill; preemption of interruptible / lower-priority work with notice; demotion by attained
  service (a long job that checkpoints makes way, with notice, for a short one: ``demote_after_ms``);
  off-peak deferral
  only for jobs whose deadline still holds; migration of running jobs to a faster free type when
  it finishes them sooner by more than the restart overhead (and so a job may start on a slower
  free type rather than wait for a faster one).
* ``danlu-cost``: as ``danlu`` but the type with the lowest cost per job (cost per unit of
  work), and deferral to cheaper tariff windows, each only while the job still ends within
  ``cost_delay_factor`` (1.5) x the time of its fastest plan from now, and by its deadline.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from danlu.scheduling.fairshare import fairshare_factors
from danlu.scheduling.model import ClusterView, JobRequest

Order = Literal["fifo", "priority", "danlu", "las"]
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
    # danlu order: switch to longest-GPU-time-first (LPT, for the makespan) while the queue looks
    # like a closed batch: its work would keep the cluster busy for at least batch_depth x its
    # longest job, or no job has joined it for as long as its work will take (see batch_horizon)
    batch_lpt: bool = True
    batch_depth: float = 2.0
    # the notice this policy gives in the simulator (None: the caller's); las: 0, as Gavel's leases
    notice_ms: int | None = None
    # cheapest choice: the bound on delay a renter can read. A cheaper type, or a cheaper tariff
    # window, is taken only if the job still ends within this factor x its fastest plan's time from
    # now (and by its deadline, if it has one)
    cost_delay_factor: float = 1.5
    # demotion by attained service (Tiresias' two queues, issue 11 item 3): a running job that
    # checkpoints, has attained at least ``demote_after_ms`` GPU-ms of service (at its fastest
    # type's speed) and has run ``min_slice_ms`` since it (re)started may be stopped with notice,
    # like a preemption, for an equal-priority job below that line that would otherwise wait longer
    # than its own run time and needs less GPU time than the running job has left. None: never.
    demote_after_ms: int | None = None
    min_slice_ms: int = 3_600_000


DEMOTE_AFTER_MS = 8 * 3_600_000  # 8 GPU-hours of attained service (about 2x the median job)

POLICIES: dict[str, Policy] = {
    "fifo": Policy("fifo", "fifo", "any", backfill=False, preempt=False, defer="never", round_ms=360_000),
    "backfill": Policy("backfill", "priority", "any", backfill=True, preempt=False, defer="never"),
    "danlu": Policy(
        "danlu",
        "danlu",
        "balanced",
        backfill=True,
        preempt=True,
        defer="deadline",
        migrate=True,
        demote_after_ms=DEMOTE_AFTER_MS,
    ),
    "danlu-cost": Policy(
        "danlu-cost",
        "danlu",
        "cheapest",
        backfill=True,
        preempt=True,
        defer="always",
        demote_after_ms=DEMOTE_AFTER_MS,
    ),
}


# Baselines for the simulator only (a rental platform does not stop every job every 6 minutes;
# danlu's demotion by attained service is the live form of it):
# * ``las``: heterogeneity-aware least attained service with Gavel's 360 s time slices (las.py).
SIM_POLICIES: dict[str, Policy] = {
    "las": Policy("las", "las", "balanced", backfill=False, preempt=True, defer="never", round_ms=360_000, notice_ms=0),
}


def get_policy(name: str, *, simulator: bool = False) -> Policy:
    from danlu.core.errors import InvalidInput

    known = {**POLICIES, **SIM_POLICIES} if simulator else POLICIES
    try:
        return known[name]
    except KeyError:
        raise InvalidInput("unknown_policy", f"unknown policy {name!r}; choose from {', '.join(known)}") from None


def any_type_index(job_id: str, n: int, seed: int = 0) -> int:
    """A uniform pseudo-random pick among ``n`` types, like Gavel's FIFO (``rng.randrange``),
    reproducible per (seed, job): the pure core keeps no RNG state between rounds."""
    key = job_id if seed == 0 else f"{seed}:{job_id}"
    return zlib.crc32(key.encode()) % n


def min_duration(job: JobRequest) -> int:
    return min((d for d in job.durations_ms.values() if d > 0), default=0)


@dataclass(frozen=True, slots=True)
class Batch:
    """The queue seen as a closed batch: when it should all be done, and each GPU model's speed
    relative to a job's fastest type (mean over the queue)."""

    horizon_ms: int
    speed: dict[str, float]


def batch_horizon(view: ClusterView, policy: Policy, shortest: Sequence[int] | None = None) -> Batch | None:
    """When the queue looks like a closed batch, when it should all be done; else None.

    Stateless evidence that the queue has stopped growing, from the view alone: ``drain`` is the
    queued GPU time (each job at its fastest type) plus the running work left, over the cluster's
    GPUs. The queue is a batch when it is *deep* (``drain >= batch_depth x`` its longest job: the
    order of the tail decides the last finish) or *quiet* (its youngest job has waited at least
    ``min(drain, longest job)``: nothing has arrived for as long as the backlog, or its longest
    job, will take). Then longest-first (LPT) keeps the last finish early; otherwise
    shortest-first keeps mean JCT low. The horizon is ``now`` + the drain time with each GPU
    model weighted by its relative speed (mean fastest / duration-there over up to 256 evenly
    spaced queued jobs), so a slow type counts as a fraction of a GPU.
    ``shortest``: each queued job's :func:`min_duration`, if the caller has them."""
    queue = view.queue
    if not policy.batch_lpt or policy.order != "danlu" or not queue:
        return None
    now = view.now_ms
    gpus = sum(h.total_gpus for h in view.hosts)
    if gpus <= 0:
        return None
    if shortest is None:
        shortest = [min_duration(job) for job in queue]
    longest = max(shortest)
    if longest <= 0:
        return None
    work = sum(d * job.gpus for d, job in zip(shortest, queue, strict=True))
    running = [(max(0, a.release_ms - now) * a.gpus, a.gpu_model) for a in view.running]
    drain = (work + sum(w for w, _ in running)) / gpus
    youngest = max(job.submit_ms for job in queue)
    oldest = min(job.submit_ms for job in queue)
    # Deep counts only for a bulk submission (the queue arrived within a tenth of its drain time):
    # on an open arrival stream a backlog is deep most of the time, and longest-first there made
    # every short job wait (on in 87 % of the rounds of a 76-day trace, +13 % average JCT).
    deep = drain >= policy.batch_depth * longest and youngest - oldest <= drain / 10
    if not deep and now - youngest < min(drain, longest):
        return None
    ratio: dict[str, list[float]] = {}
    step = max(1, len(queue) // 256)
    for d, job in zip(shortest[::step], queue[::step], strict=True):
        for model, there in job.durations_ms.items():
            if there > 0:
                ratio.setdefault(model, []).append(d / there)
    speed = {m: sum(r) / len(r) for m, r in ratio.items()}
    capacity = sum(h.total_gpus * speed.get(h.gpu_model, 0.0) for h in view.hosts)
    effective = work + sum(w * speed.get(m, 1.0) for w, m in running)
    return Batch(now + round(effective / capacity if capacity > 0 else drain), speed)


def order_key(view: ClusterView, policy: Policy) -> Callable[[JobRequest], tuple[float, ...]]:
    """Sort key of the queue (smallest first)."""
    if policy.order == "fifo":
        return lambda job: (job.seq,)
    if policy.order == "priority":
        return lambda job: (-job.priority, job.seq)
    key = _danlu_key(view, batch_horizon(view, policy) is not None)
    return lambda job: key(job, min_duration(job))


def _danlu_key(view: ClusterView, closed: bool) -> Callable[[JobRequest, int], tuple[float, ...]]:
    factors = fairshare_factors({j.user for j in view.queue}, view.usage, view.shares) if view.usage else {}
    factor_of = factors.get
    now = view.now_ms

    def danlu_key(job: JobRequest, shortest: int) -> tuple[float, ...]:
        gpus = job.gpus
        size = float(shortest * gpus) or 1.0
        deadline = job.deadline_ms
        urgent = deadline is not None and deadline - now - shortest <= shortest
        if closed:
            # a closed batch: longest first (LPT), i.e. earliest latest start for the horizon
            return (-job.priority, 0 if urgent else 1, -float(shortest), -size, job.seq)
        wait = float(max(0, now - job.submit_ms) * gpus)
        # shortest-GPU-time first, aged (response-ratio style) so long jobs are not starved,
        # divided by the user's fair-share factor so heavy users sort later
        rank = size * size / ((size + wait) * factor_of(job.user, 1.0) + 1e-12)
        return (-job.priority, 0 if urgent else 1, rank, job.seq)

    return danlu_key


def order_keys(view: ClusterView, policy: Policy) -> tuple[list[tuple[float, ...]], Batch | None]:
    """``order_key`` of every queued job, each followed by the job's index in ``view.queue``
    (flat tuples: cheaper to compare than nested ones; the index makes keys unique), and the
    round's :func:`batch_horizon`. Each job's shortest duration is computed once, for both."""
    queue = view.queue
    if policy.order == "fifo":
        return [(job.seq, i) for i, job in enumerate(queue)], None
    if policy.order == "priority":
        return [(-job.priority, job.seq, i) for i, job in enumerate(queue)], None
    shortest = [min([d for d in job.durations_ms.values() if d > 0] or [0]) for job in queue]
    batch = batch_horizon(view, policy, shortest)
    key = _danlu_key(view, batch is not None)
    return [(*key(job, d), i) for i, (job, d) in enumerate(zip(queue, shortest, strict=True))], batch
