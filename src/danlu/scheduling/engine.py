"""The simulator's shell: the round of :mod:`danlu.scheduling.rounds` with its state in memory.

:class:`Engine` is one of the two :class:`~danlu.scheduling.rounds.Shell` s (the live server's is
:class:`danlu.scheduling.live.LiveShell`, over the database). Its own seams:

* ``Clock.now_ms() -> int`` (:mod:`danlu.core.clock`; a fake clock in the simulator).
* :class:`Executor` — starts gangs, delivers preemption notices, hard-stops, reports exits
  (:class:`~danlu.scheduling.simulator.SimExecutor`).

Each :meth:`Engine.tick` runs :func:`~danlu.scheduling.rounds.run_round`: ``settle`` collects executor
exits and hard-stops jobs whose notice expired (each job then takes the state
:func:`~danlu.scheduling.lifecycle.after_run` gives, as live), ``view`` decays fair-share usage and
builds the view, the core decides, and ``start`` / ``notice`` / ``defer`` apply it. Every ended
allocation interval is rated through the one rater, :func:`danlu.billing.rating.rate_interval` (whole
seconds from the interval's start, as the live meter bills; the notice period is billed at the
interruptible price). ``tick`` returns the next instant worth waking up for, or ``None``.

A :class:`~danlu.scheduling.model.Preempt` with ``migrate_to`` is applied exactly like a
preemption (notice, stop at the deadline, requeue, resume from checkpoint) but counted as a
migration. A resumed job's estimate includes ``restart_overhead_ms`` of lost work, which the
core also weighs before moving a job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from danlu.billing.pricing import Plan, PriceBook
from danlu.billing.rating import rate_interval
from danlu.core.clock import Clock
from danlu.scheduling.fairshare import DEFAULT_HALF_LIFE_MS, decay
from danlu.scheduling.lifecycle import QUEUED, RUNNING, STOPPING, RunEnd, after_run, notice_deadline
from danlu.scheduling.model import Allocation, ClusterView, Defer, Host, JobRequest, Preempt, Start
from danlu.scheduling.policies import Policy
from danlu.scheduling.rounds import RoundReport, run_round

ExitKind = Literal["succeeded", "failed", "stopped"]


@dataclass(frozen=True, slots=True)
class ExecEvent:
    job_id: str
    kind: ExitKind
    at_ms: int


class Executor(Protocol):
    def start(self, job_id: str, host_id: str, gpu_model: str, gpus: int, now_ms: int, slowdown: float = 1.0) -> None:
        """Launch the job's gang on the host (resuming from its checkpoint if it has one);
        ``slowdown`` > 1 when the gang is spread over hosts (it runs that much slower)."""

    def notify_preempt(self, job_id: str, notice_deadline_ms: int, now_ms: int) -> None:
        """Deliver the notice (SIGTERM + ``DANLU_PREEMPT_DEADLINE`` file); the job may exit early."""

    def stop(self, job_id: str, now_ms: int) -> None:
        """Hard stop (the notice deadline passed). Must free the GPUs before returning."""

    def poll(self, now_ms: int) -> list[ExecEvent]:
        """Jobs that exited since the last poll."""

    def next_event_ms(self) -> int | None:
        """When the executor next expects an exit (simulator); ``None`` if unknown (live)."""


@dataclass(frozen=True, slots=True)
class UsageRecord:
    job_id: str
    user: str
    gpu_model: str
    plan: Plan
    gpus: int
    start_ms: int
    end_ms: int
    cost_minor: int


MAX_MIGRATIONS = 3  # moves per job at most; after that it finishes where it runs
PIN_MS = 20 * 60_000  # how long a migrated job waits for its target type before any type will do


@dataclass(slots=True)
class JobState:
    request: JobRequest  # durations_ms are for the whole job; remaining scales them
    status: str = QUEUED  # queued | running | stopping | succeeded | failed (lifecycle.py)
    remaining: float = 1.0
    first_start_ms: int | None = None
    end_ms: int | None = None
    preemptions: int = 0
    migrations: int = 0
    resizes: int = 0
    notice_ms: int | None = None
    defer_until_ms: int | None = None
    resumed: bool = False  # the current run restarts from a checkpoint (pays the restart overhead)
    migrating_to: str | None = None  # the type a migration moves it to: it restarts there, not back
    resizing_to: int | None = None  # the GPU count a resize moves an elastic job to: it restarts at it
    reason: str = ""  # why it is in its status (lifecycle.after_run's words, as the live server shows)


@dataclass(slots=True)
class EngineStats:
    rounds: int = 0
    decisions: int = 0
    cpu_s: float = 0.0
    preemptions: int = 0
    migrations: int = 0
    resizes: int = 0  # elastic jobs stopped to resume at another GPU count (elastic.py)


@dataclass
class Engine:
    clock: Clock
    executor: Executor
    hosts: tuple[Host, ...]
    prices: PriceBook
    policy: Policy
    quotas_gpus: Mapping[str, int] = field(default_factory=dict)
    notice_ms: int = 60_000
    restart_overhead_ms: int = 30_000
    spread_slowdown: float = 1.25  # a spread gang without a measured spread run time runs this much slower
    half_life_ms: int = DEFAULT_HALF_LIFE_MS
    jobs: dict[str, JobState] = field(default_factory=dict)
    running: dict[str, Allocation] = field(default_factory=dict)
    usage_log: list[UsageRecord] = field(default_factory=list)
    usage: dict[str, float] = field(default_factory=dict)
    stats: EngineStats = field(default_factory=EngineStats)
    _queue: dict[str, JobRequest] = field(default_factory=dict)
    _free: dict[str, int] = field(default_factory=dict)
    _last_tick_ms: int | None = None
    _deferred: dict[str, int] = field(default_factory=dict)  # job id -> off-peak wake time
    _freed: bool = False  # some allocation ended since the last round
    # a job moved twice -> until when it waits for its target, and its durations on every type
    _pinned: dict[str, tuple[int, JobRequest]] = field(default_factory=dict)
    # a resized elastic job -> until when it waits for its new count, and its request with every count
    _resized: dict[str, tuple[int, JobRequest]] = field(default_factory=dict)
    unplaceable: list[str] = field(default_factory=list)  # never submitted: no host can ever hold them
    on_round: Callable[[RoundReport], None] | None = None  # sees each round's report (tests, tracing)

    def __post_init__(self) -> None:
        self._free = {h.id: h.free_gpus for h in self.hosts}
        self._model = {h.id: h.gpu_model for h in self.hosts}

    def submit(self, request: JobRequest) -> None:
        self.jobs[request.id] = JobState(request)
        self._queue[request.id] = request

    def tick(self) -> int | None:
        """One round (rounds.run_round, the live server's too); the next instant worth waking for."""
        now = self.clock.now_ms()
        report = run_round(self, self.policy, now)
        if self.on_round is not None:
            self.on_round(report)
        if report.ran:
            self.stats.rounds += 1
            self.stats.cpu_s += report.cpu_s
        self._freed = False
        return self._next_wake(now)

    # -- the Shell seam (rounds.Shell): state in memory, a simulated executor --

    def settle(self, now_ms: int) -> int:
        before = len(self.running)
        for event in self.executor.poll(now_ms):
            self._ended(event.job_id, event.at_ms, event.kind)
        for job_id, alloc in list(self.running.items()):
            if alloc.stopping_at_ms is not None and alloc.stopping_at_ms <= now_ms:
                self.executor.stop(job_id, now_ms)
                self._ended(job_id, now_ms, "stopped")
        return before - len(self.running)

    def view(self, now_ms: int) -> ClusterView | None:
        now = now_ms
        if self._last_tick_ms is not None and self.usage:
            self.usage = decay(self.usage, now - self._last_tick_ms, self.half_life_ms)
        self._last_tick_ms = now
        for job_id in [j for j, until in self._deferred.items() if until <= now]:
            del self._deferred[job_id]
        for job_id in [j for j, (until, _) in self._pinned.items() if until <= now or j not in self._queue]:
            _, full = self._pinned.pop(job_id)  # started, or its target stayed taken: any type again
            if job_id in self._queue:
                self._queue[job_id] = full
                self._resized.pop(job_id, None)
        for job_id, (until, full) in list(self._resized.items()):
            # started; or its new shape was taken meanwhile, or it waited PIN_MS for it: any count again
            if job_id not in self._queue or until <= now or not self._fits(self._queue[job_id]):
                del self._resized[job_id]
                if job_id in self._queue:
                    self._queue[job_id] = full
        deferred = self._deferred
        queue = tuple(r for r in self._queue.values() if r.id not in deferred)
        # with an empty queue a round only matters when GPUs freed up and running jobs may move
        if not (queue or (self.policy.migrate and self._freed and self.running)):
            return None
        running = tuple(self.running.values())
        if self.policy.order == "las" or self.policy.demote_after_ms is not None:
            # only jobs that ran before have attained service (a fresh one has 0: no copy needed)
            queue = tuple(
                replace(r, attained_ms=self._attained(r.id, now)) if self.jobs[r.id].remaining < 1.0 else r
                for r in queue
            )
            running = tuple(replace(a, attained_ms=self._attained(a.job_id, now)) for a in running)
        return ClusterView(
            now_ms=now,
            hosts=tuple(replace(h, free_gpus=self._free[h.id]) for h in self.hosts),
            queue=queue,
            running=running,
            prices=self.prices,
            quotas_gpus=self.quotas_gpus,
            usage=self.usage,
            notice_ms=self.notice_ms,
            restart_overhead_ms=self.restart_overhead_ms,
            spread_slowdown=self.spread_slowdown,
        )

    def start(self, d: Start, now_ms: int) -> bool:
        self._start(d, now_ms)
        return True

    def notice(self, d: Preempt, now_ms: int) -> bool:
        self._preempt(d, now_ms)
        return True

    def defer(self, d: Defer, now_ms: int) -> None:
        if d.off_peak and d.until_ms is not None:
            self.jobs[d.job_id].defer_until_ms = d.until_ms
            self._deferred[d.job_id] = d.until_ms

    def _attained(self, job_id: str, now: int) -> int:
        """GPU-ms of progress so far, at the speed of the job's fastest type (``las``, demotion)."""
        state = self.jobs[job_id]
        durations = state.request.durations_ms
        fastest = min((d for d in durations.values() if d > 0), default=0)
        remaining = state.remaining
        alloc = self.running.get(job_id)
        if alloc is not None:
            full = self._whole(state.request, alloc) * self._slowdown(alloc)
            lost = self.restart_overhead_ms if state.resumed else 0
            remaining -= max(0, now - alloc.start_ms - lost) / full if full else 0.0
        return round(max(0.0, 1.0 - remaining) * fastest * state.request.gpus)

    def _start(self, d: Start, now: int) -> None:
        state = self.jobs[d.job_id]
        for host_id, gpus in d.placed:
            if self._free[host_id] < gpus or self._model[host_id] != d.gpu_model:
                raise RuntimeError(f"core over-allocated host {host_id}")  # an invariant, not a user error
            self._free[host_id] -= gpus
        queued = self._queue.pop(d.job_id)
        req = state.request
        self.running[d.job_id] = Allocation(
            d.job_id,
            req.user,
            d.host_id,
            d.gpu_model,
            d.gpus,
            now,
            d.est_end_ms,
            req.priority,
            req.interruptible,
            checkpoints=True,  # a simulated job checkpoints within its notice (simulator.py)
            parts=d.parts,
            # a job moved MAX_MIGRATIONS times stays where it is: no duration table, no further move
            durations_ms=self._usable_durations(queued.at(d.gpus)) if state.migrations < MAX_MIGRATIONS else {},
            counts_ms=self._resized.pop(d.job_id)[1].counts_ms if d.job_id in self._resized else queued.counts_ms,
        )
        state.status = RUNNING
        state.defer_until_ms = None
        state.resumed = state.remaining < 1.0 - 1e-9
        if state.first_start_ms is None:
            state.first_start_ms = now
        self.stats.decisions += 1
        self.executor.start(d.job_id, d.host_id, d.gpu_model, d.gpus, now, self._slowdown(self.running[d.job_id]))

    def _usable_durations(self, req: JobRequest) -> dict[str, int]:
        """The job's run time per model it may use (price within its max), for migration checks."""
        plan = req.plan
        return {
            m: d
            for m, d in req.durations_ms.items()
            if d > 0
            and self.prices.has_price(m, plan)
            and (req.max_price_minor is None or self.prices.price(m, plan) <= req.max_price_minor)
        }

    def _preempt(self, d: Preempt, now: int) -> None:
        alloc = self.running[d.job_id]
        deadline = notice_deadline(d.notice_deadline_ms, now, self.notice_ms)  # as live.preempt_run
        self.running[d.job_id] = replace(alloc, stopping_at_ms=deadline)
        state = self.jobs[d.job_id]
        state.status, state.notice_ms = STOPPING, now
        if d.migrate_to is not None:
            state.migrating_to = d.migrate_to
            state.migrations += 1
            self.stats.migrations += 1
        if d.resize_to is not None:
            state.resizing_to = d.resize_to
            state.resizes += 1
            self.stats.resizes += 1
        if d.migrate_to is None and d.resize_to is None:
            state.preemptions += 1
            self.stats.preemptions += 1
        self.stats.decisions += 1
        self.executor.notify_preempt(d.job_id, deadline, now)
        if deadline <= now:  # no notice (the las baseline): off its GPUs before this round's starts
            self.executor.stop(d.job_id, now)
            self._ended(d.job_id, now, "stopped")

    def _ended(self, job_id: str, at_ms: int, kind: ExitKind) -> None:
        alloc = self.running.pop(job_id, None)
        if alloc is None:
            return
        state = self.jobs[job_id]
        for host_id, gpus in alloc.placed:
            self._free[host_id] += gpus
        self._freed = True
        plan = state.request.plan
        notice_from = state.notice_ms if state.notice_ms is not None else at_ms
        self._bill(state, alloc, plan, alloc.start_ms, min(notice_from, at_ms))
        self._bill(state, alloc, Plan.INTERRUPTIBLE, min(notice_from, at_ms), at_ms)
        self.usage[alloc.user] = self.usage.get(alloc.user, 0.0) + alloc.gpus * (at_ms - alloc.start_ms) / 3_600_000
        full = self._whole(state.request, alloc) * self._slowdown(alloc)
        lost = self.restart_overhead_ms if state.resumed else 0
        done = max(0, at_ms - alloc.start_ms - lost) / full if full else 0.0
        state.remaining = max(0.0, state.remaining - done)
        state.notice_ms = None
        exit_code = {"succeeded": 0, "failed": 1}.get(kind)
        end = RunEnd(
            "stopped" if exit_code is None else "exited",
            exit_code,
            noticed=alloc.stopping_at_ms is not None,
            work_left=kind == "stopped" and state.remaining > 1e-9,  # an exit means the executor saw it end
        )
        status, state.reason = after_run(end)  # the live server's rule too (lifecycle.py)
        if status == QUEUED:
            state.status = status
            req = state.request
            whole = replace(
                req,
                durations_ms=self._left(state, req.durations_ms),
                spread_durations_ms=self._left(state, req.spread_durations_ms),
                counts_ms={k: self._left(state, d) for k, d in req.counts_ms.items()},
                counts_spread_ms={k: self._left(state, d) for k, d in req.counts_spread_ms.items()},
            )
            queued = whole
            target, state.migrating_to = state.migrating_to, None
            count, state.resizing_to = state.resizing_to, None
            room = max((self._free[h.id] for h in self.hosts if h.gpu_model == target), default=0)
            if target is not None and target in whole.durations_ms and room >= req.gpus and state.migrations >= 2:
                # Moved a second time: it restarts on ``target``. Offered every type again, the
                # cheapest-within-10 % choice can put it straight back where it came from, and the
                # next round moves it again (51,925 migrations for 951 jobs on a real trace). The
                # first move stays free to land elsewhere: pinning it too cost gavel48's closed
                # batch 0.3 h of makespan (19.35 -> 19.65 h).
                self._pinned[job_id] = (at_ms + PIN_MS, whole)
                queued = _only_on(queued, target)
            if count is not None and count in whole.counts_ms:
                # Resized: it restarts at its new count (on ``target`` if it moves) while that shape fits
                # (view): offered every count again, the next round could undo what this one decided.
                self._resized[job_id] = (at_ms + PIN_MS, whole)
                at_count = queued.at(count)
                queued = replace(at_count, counts_ms={count: at_count.durations_ms})
                if target is not None and target in queued.durations_ms:
                    queued = _only_on(queued, target)
            self._queue[job_id] = queued
            if count is not None and target is None and not alloc.parts and self._free[alloc.host_id] >= count:
                # resized in place (it shrank, or grows where it is): its GPUs there are its own again
                # at once, not left for a later round to hand to someone else
                duration = queued.durations_ms.get(alloc.gpu_model)
                if duration is not None:
                    reason = f"resized to {count} GPUs in place"
                    self._start(
                        Start(job_id, alloc.host_id, alloc.gpu_model, count, req.plan, at_ms + duration, reason), at_ms
                    )
        else:
            state.status = status
            state.end_ms = at_ms

    def _fits(self, request: JobRequest) -> bool:
        """Whether GPUs are free now for the job's gang on one of its models (or spread, if it may)."""
        for model in request.durations_ms:
            free = [self._free[h.id] for h in self.hosts if h.gpu_model == model]
            if max(free, default=0) >= request.gpus or (request.spread_ok and sum(free) >= request.gpus):
                return True
        return False

    def _left(self, state: JobState, whole: Mapping[str, int]) -> dict[str, int]:
        """Run times from the job's progress: what is left of ``whole``, plus the restart overhead."""
        return {m: max(1, round(d * state.remaining)) + self.restart_overhead_ms for m, d in whole.items()}

    def _slowdown(self, alloc: Allocation) -> float:
        """How much slower the job runs where it is: 1 on one host; spread over hosts, its measured
        spread run time over its run time on one host (JobRequest.spread_ms), else the default."""
        if not alloc.parts:
            return 1.0
        req = self.jobs[alloc.job_id].request.at(alloc.gpus)
        one_host = req.durations_ms.get(alloc.gpu_model, 0)
        return req.spread_ms(alloc.gpu_model, self.spread_slowdown) / one_host if one_host else self.spread_slowdown

    @staticmethod
    def _whole(request: JobRequest, alloc: Allocation) -> int:
        """The whole job's run time on the allocation's model at its GPU count (an elastic job's differs by count)."""
        return request.at(alloc.gpus).durations_ms.get(alloc.gpu_model, 0)

    def _bill(self, state: JobState, alloc: Allocation, plan: Plan, start: int, end: int) -> None:
        if end <= start:
            return
        if not self.prices.has_price(alloc.gpu_model, plan):
            plan = state.request.plan
        cost = rate_interval(self.prices, alloc.gpu_model, plan, start, end, alloc.gpus).total_minor
        self.usage_log.append(
            UsageRecord(alloc.job_id, alloc.user, alloc.gpu_model, plan, alloc.gpus, start, end, cost)
        )

    def _next_wake(self, now: int) -> int | None:
        times = [t for t in (self.executor.next_event_ms(),) if t is not None]
        times += [a.stopping_at_ms for a in self.running.values() if a.stopping_at_ms is not None]
        times += self._deferred.values()
        times += [until for until, _ in self._resized.values()]
        if self._queue and not times:
            return None
        later = [t for t in times if t > now]
        return min(later) if later else None


def _only_on(request: JobRequest, model: str) -> JobRequest:
    """The queued job offered ``model`` alone (its durations, and each count's, there only)."""
    return replace(
        request,
        durations_ms={model: request.durations_ms[model]},
        counts_ms={n: {model: d[model]} for n, d in request.counts_ms.items() if model in d},
    )
