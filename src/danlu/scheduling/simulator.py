"""Trace replay: the same :class:`~danlu.scheduling.engine.Engine` on a virtual clock with a
simulated executor. A job's true run time equals its estimate (durations come from measured
throughput), a preempted (or migrated) job checkpoints within its notice, keeping its progress,
and every resume from a checkpoint first loses ``restart_overhead_ms`` (reload, warm-up).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from danlu.billing.pricing import PriceBook
from danlu.core.clock import FakeClock
from danlu.core.errors import InvalidInput
from danlu.core.money import format_minor
from danlu.scheduling.engine import Engine, ExecEvent
from danlu.scheduling.model import Host, JobRequest
from danlu.scheduling.policies import Policy, get_policy
from danlu.scheduling.speed import ThroughputTable, durations_from_reference, durations_from_steps
from danlu.scheduling.traces import TraceJob

MS_PER_H = 3_600_000
DEFAULT_ROUND_MS = 60_000


class SimExecutor:
    """Runs nothing: each started job 'exits' after its remaining true duration on that model."""

    def __init__(
        self,
        durations: Mapping[str, Mapping[str, int]],
        restart_overhead_ms: int = 0,
        counts: Mapping[str, Mapping[int, Mapping[str, int]]] | None = None,
    ) -> None:
        self._durations = durations
        self._counts = counts or {}  # an elastic job's true run time per GPU count, then model
        self._overhead = restart_overhead_ms
        self._remaining: dict[str, float] = {}
        self._running: dict[str, tuple[int, str, int, int, float]] = {}  # job -> (start, model, end, lost, slowdown)
        self._gpus: dict[str, int] = {}
        self._heap: list[tuple[int, str]] = []
        self.finished = 0  # jobs that ran to their end (for a progress line)

    def start(self, job_id: str, host_id: str, gpu_model: str, gpus: int, now_ms: int, slowdown: float = 1.0) -> None:
        left = self._remaining.setdefault(job_id, 1.0)
        lost = self._overhead if left < 1.0 - 1e-9 else 0
        self._gpus[job_id] = gpus
        end = now_ms + lost + max(1, round(self._whole(job_id, gpu_model) * slowdown * left))
        self._running[job_id] = (now_ms, gpu_model, end, lost, slowdown)
        heapq.heappush(self._heap, (end, job_id))

    def notify_preempt(self, job_id: str, notice_deadline_ms: int, now_ms: int) -> None:
        """The simulated job keeps training through its notice and checkpoints at the deadline."""

    def stop(self, job_id: str, now_ms: int) -> None:
        start, model, _, lost, slowdown = self._running.pop(job_id)
        done = max(0, now_ms - start - lost) / (self._whole(job_id, model) * slowdown)
        self._remaining[job_id] = max(0.0, self._remaining[job_id] - done)

    def _whole(self, job_id: str, gpu_model: str) -> int:
        by_count = self._counts.get(job_id, {}).get(self._gpus[job_id])
        return (by_count or self._durations[job_id])[gpu_model]

    def poll(self, now_ms: int) -> list[ExecEvent]:
        out = []
        while self._heap and self._heap[0][0] <= now_ms:
            end, job_id = heapq.heappop(self._heap)
            if job_id in self._running and self._running[job_id][2] == end:
                del self._running[job_id]
                out.append(ExecEvent(job_id, "succeeded", end))
                self.finished += 1
        return out

    def next_event_ms(self) -> int | None:
        while self._heap and self._heap[0][1] not in self._running:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None


@dataclass(frozen=True, slots=True)
class SimSetup:
    hosts: tuple[Host, ...]
    prices: PriceBook
    start_ms: int
    throughputs: ThroughputTable
    reference_model: str
    spread_slowdown: float = 1.25  # a spread gang with no measured spread throughput (the scenario's)


Missing = Literal["estimate", "skip", "refuse"]
MISSING_CHOICES: tuple[Missing, ...] = ("estimate", "skip", "refuse")


def to_requests(
    setup: SimSetup,
    trace: Iterable[TraceJob],
    interruptible: bool = False,
    *,
    missing: Missing = "estimate",
    spread: bool = True,
    elastic: bool = False,
) -> list[JobRequest]:
    """The trace as job requests. A job measured in steps needs a throughput for its (job type, GPU
    count), or a duration (a duration of 0 would make it finish in 1 ms everywhere). Without either,
    ``missing`` says what happens: ``estimate`` (the default) takes the same job type's throughput at
    the nearest GPU count, scaled linearly (optimistic), and flags the request ``estimated``;
    ``skip`` leaves the job out (the caller counts what is missing); ``refuse`` is an error naming
    it. Under ``estimate`` a job type the table does not know at all is skipped (nothing to scale).
    ``spread`` (the default): multi-GPU gangs may span hosts of one type (``spread_ok``), at the
    table's measured spread throughput where it has one (``spread_durations_ms``)."""
    models = sorted({h.gpu_model for h in setup.hosts})
    out = []
    for seq, tj in enumerate(trace):
        rates = setup.throughputs.lookup(tj.job_type, tj.gpus) if tj.steps else None
        spread_rates = setup.throughputs.lookup_spread(tj.job_type, tj.gpus) if rates is not None else {}
        estimated = False
        if tj.steps and rates is None and not tj.duration_s > 0:
            rates = estimate_rates(setup.throughputs, tj.job_type, tj.gpus) if missing == "estimate" else None
            if rates is None and missing != "refuse":
                continue  # skipped (or a job type the table does not know, nothing to scale): counted by the caller
            if rates is None:
                raise InvalidInput(
                    "missing_throughput",
                    f"trace job {tj.id}: no measured throughput for ({tj.job_type}, {tj.gpus} GPUs) and no "
                    "duration; add it to the throughput table or give the job a duration, or pass "
                    "--missing estimate (scale the nearest GPU count, flagged) or --missing skip",
                )
            estimated = True
        if rates is not None:
            durations = durations_from_steps(tj.steps, rates, models)
        else:
            durations = durations_from_reference(round(tj.duration_s * 1000), setup.reference_model, models)
        spread_durations = durations_from_steps(tj.steps, spread_rates, models) if spread_rates else {}
        if tj.allowed_models:
            durations = {m: d for m, d in durations.items() if m in tj.allowed_models}
        out.append(
            JobRequest(
                id=tj.id,
                user=tj.user,
                gpus=tj.gpus,
                submit_ms=setup.start_ms + round(tj.arrival_s * 1000),
                durations_ms=durations,
                priority=tj.priority,
                interruptible=interruptible or tj.interruptible,
                deadline_ms=None if tj.deadline_s is None else setup.start_ms + round(tj.deadline_s * 1000),
                seq=seq,
                estimated=estimated,
                spread_ok=spread and tj.gpus > 1,  # the gang may span hosts of one type
                spread_durations_ms={m: d for m, d in spread_durations.items() if m in durations},
            )
        )
        if elastic and rates is not None and not estimated:
            out[-1] = _elastic(out[-1], setup.throughputs, tj, models, spread)
    return out


ELASTIC_UP_TO = 2  # an elastic trace job may run from 1 GPU up to this many times its requested count


def _elastic(request: JobRequest, table: ThroughputTable, tj: TraceJob, models: list[str], spread: bool) -> JobRequest:
    """The trace job as an elastic one (``--elastic``): every count the table measures its job type
    at, from 1 GPU to ``ELASTIC_UP_TO`` x the trace's count, at the table's speed for that count (the
    same steps; a model missing at some count is not offered at it). Queued at its minimum."""
    counts: dict[int, dict[str, int]] = {}
    spread_counts: dict[int, dict[str, int]] = {}
    for (job_type, n), rates in table.rates.items():
        if job_type != tj.job_type or not 1 <= n <= ELASTIC_UP_TO * tj.gpus:
            continue
        found = durations_from_steps(tj.steps, rates, models)
        if tj.allowed_models:
            found = {m: d for m, d in found.items() if m in tj.allowed_models}
        if found:
            counts[n] = found
            if spread and n > 1:
                spread_counts[n] = durations_from_steps(tj.steps, table.lookup_spread(job_type, n), found)
    if len(counts) < 2:
        return request
    # spread_ok: the job may span hosts at whichever count it runs (the core spreads only gangs)
    return replace(request, counts_ms=counts, counts_spread_ms=spread_counts, spread_ok=spread).at(min(counts))


def estimate_rates(table: ThroughputTable, job_type: str, gpus: int) -> dict[str, float] | None:
    """The job type's steps/s at the nearest measured GPU count (the smaller on a tie), scaled
    linearly to ``gpus``; None when the job type is not in the table at all."""
    counts = sorted({n for t, n in table.rates if t == job_type}, key=lambda n: (abs(n - gpus), n))
    if not counts:
        return None
    base = table.rates[(job_type, counts[0])]
    return {model: rate * gpus / counts[0] for model, rate in base.items()}


def spreads(policy: Policy) -> bool:
    """Whether the policy may start a gang spread over hosts (core._choose does for every policy
    but the las baseline, which places each gang on one host)."""
    return policy.order != "las"


def placeable(hosts: Iterable[Host], request: JobRequest) -> bool:
    """Whether some host could ever hold the whole gang on a type it can run on (or, for a gang
    that may spread over hosts, the hosts of one such type together)."""
    per_model: dict[str, int] = {}
    for h in hosts:
        if request.runnable_on(h.gpu_model):
            if h.total_gpus >= request.gpus:
                return True
            per_model[h.gpu_model] = per_model.get(h.gpu_model, 0) + h.total_gpus
    return request.spread_ok and any(total >= request.gpus for total in per_model.values())


def simulate(
    setup: SimSetup,
    requests: list[JobRequest],
    policy_name: str,
    notice_ms: int = 60_000,
    round_ms: int | None = None,
    restart_overhead_ms: int = 30_000,
    seed: int = 0,
    progress: Callable[[int, int, int], None] | None = None,
) -> Engine:
    """Replay ``requests``. Rounds run at most once per ``round_ms`` of virtual time, on a grid
    aligned to the trace start (like a live server's scheduling interval); ``None`` takes the
    policy's own interval (fifo: Gavel's 360 s) or else 60 s; ``round_ms=1`` makes every event
    its own round. ``seed`` changes the random type pick of fifo/backfill. ``progress(jobs finished,
    jobs, virtual now)`` is called after every round (a CLI's status line)."""
    policy = replace(get_policy(policy_name, simulator=True), seed=seed)
    if not spreads(policy):  # fifo, backfill and las place a gang on one host: never count a type's hosts together
        requests = [replace(r, spread_ok=False) if r.spread_ok else r for r in requests]
    notice_ms = policy.notice_ms if policy.notice_ms is not None else notice_ms
    round_ms = round_ms or policy.round_ms or DEFAULT_ROUND_MS
    clock = FakeClock(setup.start_ms)
    executor = SimExecutor(
        {r.id: r.durations_ms for r in requests},
        restart_overhead_ms,
        {r.id: r.counts_ms for r in requests if r.counts_ms},
    )
    engine = Engine(
        clock,
        executor,
        setup.hosts,
        setup.prices,
        policy,
        notice_ms=notice_ms,
        restart_overhead_ms=restart_overhead_ms,
        spread_slowdown=setup.spread_slowdown,
    )
    engine.unplaceable = sorted(r.id for r in requests if not placeable(setup.hosts, r))
    never = set(engine.unplaceable)  # reported, never queued: fifo would block behind them forever
    pending = sorted((r for r in requests if r.id not in never), key=lambda r: (r.submit_ms, r.seq))
    i = 0
    while True:
        now = clock.now_ms()
        while i < len(pending) and pending[i].submit_ms <= now:
            engine.submit(pending[i])
            i += 1
        wake = engine.tick()
        if progress is not None:
            progress(executor.finished, len(requests), now)
        nxt = [t for t in (wake, pending[i].submit_ms if i < len(pending) else None) if t is not None]
        if not nxt:
            return engine
        target = max(min(nxt), now + 1)
        offset = (target - setup.start_ms) % round_ms
        clock.set(target if offset == 0 else target + round_ms - offset)


def summarize(engine: Engine, setup: SimSetup, policy_name: str) -> dict[str, object]:
    jobs = list(engine.jobs.values())
    done = [j for j in jobs if j.status == "succeeded" and j.end_ms is not None]
    jct = [(j.end_ms or 0) - j.request.submit_ms for j in done]
    waits = sorted((j.first_start_ms or 0) - j.request.submit_ms for j in jobs if j.first_start_ms is not None)
    last = max((j.end_ms or 0 for j in done), default=setup.start_ms)
    makespan = last - setup.start_ms
    gpus_total = sum(h.total_gpus for h in setup.hosts)
    busy = sum(u.gpus * (u.end_ms - u.start_ms) for u in engine.usage_log)
    cost = sum(u.cost_minor for u in engine.usage_log)
    currency = setup.prices.currency
    misses = sum(
        1 for j in jobs if j.request.deadline_ms is not None and (j.end_ms is None or j.end_ms > j.request.deadline_ms)
    )
    stats = engine.stats
    return {
        "policy": policy_name,
        "jobs": len(jobs) + len(engine.unplaceable),
        "jobs_completed": len(done),
        "jobs_unfinished": len(jobs) + len(engine.unplaceable) - len(done),
        "jobs_unplaceable": len(engine.unplaceable),
        "unplaceable": list(engine.unplaceable),
        "jobs_estimated": sum(1 for j in jobs if j.request.estimated),
        "avg_jct_h": round(sum(jct) / len(jct) / MS_PER_H, 3) if jct else None,
        "p95_queue_delay_h": round(_p95(waits) / MS_PER_H, 3) if waits else None,
        "makespan_h": round(makespan / MS_PER_H, 3),
        "utilization": round(busy / (gpus_total * makespan), 3) if makespan > 0 else 0.0,
        "cost": format_minor(cost, currency),
        "currency": currency,
        "cost_per_completed_job": format_minor(cost // len(done), currency) if done else None,
        "deadline_misses": misses,
        "preemptions": stats.preemptions,
        "migrations": stats.migrations,
        "resizes": stats.resizes,
        "rounds": stats.rounds,
        "decisions": stats.decisions,
        "sched_cpu_ms_per_round": round(stats.cpu_s * 1000 / stats.rounds, 4) if stats.rounds else 0.0,
        "sched_cpu_ms_per_decision": round(stats.cpu_s * 1000 / stats.decisions, 4) if stats.decisions else 0.0,
    }


def _p95(sorted_values: list[int]) -> int:
    k = max(0, math.ceil(0.95 * len(sorted_values)) - 1)
    return sorted_values[k]
