"""Inputs and outputs of the pure scheduling core.

The core sees one immutable :class:`ClusterView` per round and returns a list of decisions
(:class:`Start`, :class:`Preempt`, :class:`Defer`). It holds no state between rounds except
what the caller passes back in (fair-share usage, reservations are recomputed each round).
Times are ``int`` epoch milliseconds on whatever clock the engine uses (virtual or real).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from danlu.billing.pricing import Plan, PriceBook

PRIORITY_LOW = 0
PRIORITY_NORMAL = 1
PRIORITY_HIGH = 2
PRIORITIES = {"low": PRIORITY_LOW, "normal": PRIORITY_NORMAL, "high": PRIORITY_HIGH}

# A gang spread over several hosts of one GPU model: (host id, GPUs there), the first part first.
Parts = tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Host:
    id: str
    gpu_model: str
    total_gpus: int
    free_gpus: int


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A queued job. ``durations_ms`` maps each GPU model the job may run on to its estimated
    run time there *from its current progress* (a model missing or 0 = cannot run there); the
    caller derives it from measured throughput or specs (see :mod:`danlu.scheduling.speed`)."""

    id: str
    user: str
    gpus: int
    submit_ms: int
    durations_ms: Mapping[str, int]
    priority: int = PRIORITY_NORMAL
    interruptible: bool = False
    max_price_minor: int | None = None  # per GPU-hour, before tariffs
    deadline_ms: int | None = None
    seq: int = 0  # arrival order tie-breaker
    estimated: bool = False  # its durations are an explicit estimate (no measured throughput for it)
    # service attained so far: GPU-ms of progress at its fastest type's speed (filled for ``las`` and
    # for policies that demote by attained service)
    attained_ms: int = 0
    # the job may run as one gang spread over several hosts of one model (issue 11, item 7; issue
    # 30): at its measured spread run time there (``spread_durations_ms``, from the same progress as
    # ``durations_ms``) or else ``ClusterView.spread_slowdown`` x its duration
    spread_ok: bool = False
    spread_durations_ms: Mapping[str, int] = field(default_factory=dict, compare=False)
    # an elastic job (issue 30, item 2): the GPU counts it may run at, each with its run time per
    # model from the same progress as ``durations_ms`` (and spread, where measured); ``gpus`` and
    # ``durations_ms`` are the count it is being considered at (its smallest, as queued). Empty: fixed.
    counts_ms: Mapping[int, Mapping[str, int]] = field(default_factory=dict, compare=False)
    counts_spread_ms: Mapping[int, Mapping[str, int]] = field(default_factory=dict, compare=False)

    @property
    def min_gpus(self) -> int:
        return min(self.counts_ms) if self.counts_ms else self.gpus

    def at(self, gpus: int) -> JobRequest:
        """The same job considered at another of its counts (an elastic job only)."""
        if gpus == self.gpus or gpus not in self.counts_ms:
            return self
        return replace(
            self,
            gpus=gpus,
            durations_ms=self.counts_ms[gpus],
            spread_durations_ms=self.counts_spread_ms.get(gpus, {}),
        )

    def runnable_on(self, gpu_model: str) -> bool:
        return self.durations_ms.get(gpu_model, 0) > 0

    def spread_ms(self, gpu_model: str, slowdown: float) -> int:
        """Run time on ``gpu_model`` with the gang spread over hosts: measured, else ``slowdown`` x."""
        measured = self.spread_durations_ms.get(gpu_model, 0)
        return measured if measured > 0 else round(self.durations_ms.get(gpu_model, 0) * slowdown)

    @property
    def plan(self) -> Plan:
        return Plan.INTERRUPTIBLE if self.interruptible else Plan.ON_DEMAND


@dataclass(frozen=True, slots=True)
class Allocation:
    """GPUs bound to a running job. ``est_end_ms`` comes from the job's duration estimate;
    ``stopping_at_ms`` is set once a preemption notice was sent (the GPUs free by then)."""

    job_id: str
    user: str
    host_id: str
    gpu_model: str
    gpus: int
    start_ms: int
    est_end_ms: int
    priority: int = PRIORITY_NORMAL
    interruptible: bool = False
    stopping_at_ms: int | None = None
    # whole-job run time per GPU model the job may use, measured from the progress it had at
    # ``start_ms`` (as in its JobRequest then); lets the core weigh a migration. Empty = unknown.
    durations_ms: Mapping[str, int] = field(default_factory=dict, compare=False)
    attained_ms: int = 0  # as JobRequest.attained_ms, up to the round's now (``las`` and demotion)
    # the job resumes from its checkpoint when stopped (a simulated job always does; a live job once
    # it has written one): only such work may be demoted for a job with less attained service
    checkpoints: bool = False
    parts: Parts = ()  # a gang spread over hosts (``host_id`` is the first); empty: all on ``host_id``
    # an elastic job's whole-job run time per count it may run at, then per model, from the progress
    # it had at ``start_ms`` (as ``durations_ms``; JobRequest.counts_ms): lets the core weigh a resize
    counts_ms: Mapping[int, Mapping[str, int]] = field(default_factory=dict, compare=False)

    @property
    def placed(self) -> Parts:
        return self.parts or ((self.host_id, self.gpus),)

    def remaining_ms_at(self, gpus: int, at_ms: int, gpu_model: str | None = None) -> int | None:
        """Estimated run time left at ``at_ms`` if the job continued at ``gpus`` GPUs (of ``gpu_model``,
        else of its own model)."""
        full = self.counts_ms.get(gpus, {}).get(gpu_model or self.gpu_model, 0)
        span = self.est_end_ms - self.start_ms
        if full <= 0 or span <= 0:
            return None
        return round(full * max(0, self.est_end_ms - at_ms) / span)

    def remaining_ms_on(self, gpu_model: str, at_ms: int) -> int | None:
        """Estimated run time left at ``at_ms`` if the job continued on ``gpu_model`` instead."""
        full = self.durations_ms.get(gpu_model, 0)
        span = self.est_end_ms - self.start_ms
        if full <= 0 or span <= 0:
            return None
        return round(full * max(0, self.est_end_ms - at_ms) / span)

    @property
    def release_ms(self) -> int:
        return self.stopping_at_ms if self.stopping_at_ms is not None else self.est_end_ms


@dataclass(frozen=True, slots=True)
class ClusterView:
    """Everything one scheduling round may look at."""

    now_ms: int
    hosts: tuple[Host, ...]
    queue: tuple[JobRequest, ...]
    running: tuple[Allocation, ...]
    prices: PriceBook
    quotas_gpus: Mapping[str, int] = field(default_factory=dict)  # user -> max concurrent GPUs
    usage: Mapping[str, float] = field(default_factory=dict)  # user -> decayed GPU-hours
    shares: Mapping[str, float] = field(default_factory=dict)  # user -> share weight (default 1)
    notice_ms: int = 60_000
    # work lost when a job restarts from its checkpoint (reload, warm-up); weighed against a migration
    restart_overhead_ms: int = 0
    # a gang spread over hosts runs this much slower than on one host (gradients cross the network
    # instead of NVLink/PCIe) when the job has no measured spread run time: a scenario's declared
    # assumption (docs/scheduling.md)
    spread_slowdown: float = 1.25
    # an elastic job runs this long at one GPU count (since it last (re)started) before it is resized
    resize_cooldown_ms: int = 30 * 60_000


@dataclass(frozen=True, slots=True)
class Start:
    job_id: str
    host_id: str
    gpu_model: str
    gpus: int
    plan: Plan
    est_end_ms: int
    reason: str
    parts: Parts = ()  # spread over these hosts (``host_id`` is the first); empty: all on ``host_id``

    @property
    def placed(self) -> Parts:
        return self.parts or ((self.host_id, self.gpus),)


@dataclass(frozen=True, slots=True)
class Preempt:
    """Ask a running job to stop: it receives notice now and must be off its GPUs by
    ``notice_deadline_ms`` (never earlier than now + the operator's notice period)."""

    job_id: str
    host_id: str
    notice_deadline_ms: int
    for_job_id: str
    reason: str
    # set when the job is stopped only to move it to a faster GPU model (``for_job_id`` is the job
    # itself): the same noticed stop + requeue + resume from checkpoint, counted as a migration
    migrate_to: str | None = None
    # set when an elastic job is stopped to resume at another GPU count (grown into idle GPUs, or
    # shrunk so a waiting job can start): the same noticed stop and resume, counted as a resize
    resize_to: int | None = None


@dataclass(frozen=True, slots=True)
class Defer:
    """Leave a job queued on purpose; ``until_ms`` is when it becomes worth reconsidering."""

    job_id: str
    until_ms: int | None
    reason: str
    off_peak: bool = False  # deferred on purpose to a cheaper tariff window: hide it until then


Decision = Start | Preempt | Defer
