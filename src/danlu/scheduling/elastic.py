"""Elastic jobs (issue 30, item 2): a job that may run at any of several GPU counts.

An elastic :class:`~danlu.scheduling.model.JobRequest` carries its run time at each count it allows
(``counts_ms``: from the throughput table's 1/2/4/8-GPU rows in the simulator). It is queued at its
minimum and never runs below it. Three decisions, all in the pure core, in the policy's queue order
like every other (shortest work first for ``danlu``):

* **size at start** (:func:`size`): among the counts the job can start at now, the smallest whose
  finish is within ``time_slack`` of the earliest (a count that barely helps is not worth its
  GPUs); the cost mode takes the cheapest that ends within its readable bound
  (``cost_delay_factor`` x the earliest finish).
* **grow** (:func:`grow`): after the queue walk, GPUs nobody queued could start on may take a
  running elastic job to a larger count of its model, or (a policy that migrates, while the job may
  still move, as a migration) to any count of another model, or gather a gang spread over hosts
  onto one — whichever ends it soonest, when that is sooner by more than the slack and the restart
  overhead; most time saved per GPU held first, never into a reservation. (A rigid job still moves
  only as a migration.)
* **shrink** (:func:`shrink`): a job that would otherwise wait takes GPUs back from running elastic
  jobs on one host above their minimum — just enough of them, each to the largest of its counts
  that frees them — by a preemption's rules (never for a job of lower priority, never on-demand
  work for interruptible work) and, at equal priority, only from a job that would still run longer
  than the waiting one (shortest remaining first: shrinking a job that ends sooner only delays both).

A job runs ``ClusterView.resize_cooldown_ms`` (30 min; ``danlu server --resize-cooldown``) at a count
before it may grow again; lent GPUs go back without waiting for it (a waiting renter is owed them, and
the shrink's own rules bound the cost). Every resize is the same noticed stop, checkpoint and resume as a
preemption (counted apart, as ``resizes``), and the job restarts at the count decided while that
fits (the engine at once where it keeps its GPUs; the live server at its next start, ``jobs.resize_to``).
What a job held is billed second by second like any allocation. Interactive rentals are never
elastic: only a job with ``counts_ms`` is ever resized.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from danlu.scheduling.backfill import Timeline
from danlu.scheduling.model import Allocation, ClusterView, JobRequest, Preempt
from danlu.scheduling.placement import FreeIndex
from danlu.scheduling.policies import Policy

# A lender gives GPUs back unless it would lose this many times the wait the waiting job saves. Above 1 on
# purpose: GPUs above a job's minimum are lent, and a job that waits for them is owed them unless that is
# clearly wasteful (with linear scaling, 2 -> 1 GPUs costs the lender exactly what the waiter saves).
# gavel48 max_min_fairness: 1.0 -> 3.261 h, 2.0 -> 3.284 h, 3.0 -> 3.368 h average JCT.
SHRINK_BOUND = 2.0

# (job at a count, its runnable models) -> its estimated finish if it starts now, else None
StartNow = Callable[[JobRequest, list[str]], int | None]


def size(
    view: ClusterView,
    policy: Policy,
    job: JobRequest,
    allowed: Callable[[JobRequest], list[str]],
    finish_now: StartNow,
    cap: int | None = None,
) -> JobRequest:
    """The job at the count it should start at now (its minimum when no count can start now); never more
    than ``cap`` GPUs (what its owner's quota leaves), except its minimum (the quota check refuses that)."""
    now = view.now_ms
    options: list[tuple[int, int, JobRequest]] = []  # (finish, cost, job at a count), fewest GPUs first
    for count in sorted(job.counts_ms):
        if cap is not None and count > max(cap, job.min_gpus):
            break
        sized = job.at(count)
        models = allowed(sized)
        finish = finish_now(sized, models) if models else None
        if finish is not None:
            cheapest = min(view.prices.price(m, sized.plan) * sized.durations_ms[m] for m in models)
            options.append((finish, cheapest * count, sized))
    if not options:
        return job.at(job.min_gpus)
    best = min(f for f, _, _ in options)
    if policy.choice == "cheapest":
        bound = now + (best - now) * policy.cost_delay_factor
        return min((o for o in options if o[0] <= bound), key=lambda o: (o[1], o[0]))[2]
    limit = now + (best - now) * (1.0 + policy.time_slack)
    return next(sized for finish, _, sized in options if finish <= limit)


def grow(
    view: ClusterView,
    policy: Policy,
    index: FreeIndex,
    timeline: Timeline,
    taken: set[str],
    in_use: Counter[str],
) -> list[Preempt]:
    """Notices that reshape running elastic jobs onto GPUs nobody queued could use: a larger count of
    their model, or (while the job may still move: ``Allocation.durations_ms``) any count of another
    model. Each job's shapes are tried as :func:`size` ranks them (the fewest GPUs within the slack of
    its earliest end first); jobs by the time their first choice saves per GPU, most first."""
    ready = view.now_ms + view.notice_ms
    overhead = view.restart_overhead_ms
    roomy = {m for m in index.models if index.largest_free(m) > 0}
    ranked: list[tuple[float, str, list[tuple[int, str, int]], Allocation]] = []
    for alloc in view.running:
        if not _resizable(view, alloc, taken):
            continue
        left_here = alloc.est_end_ms - ready
        shapes: list[tuple[int, str, int]] = []  # (count, model, run time left there)
        quota = view.quotas_gpus.get(alloc.user)
        for count, durations in alloc.counts_ms.items():
            if quota is not None and in_use[alloc.user] + count - alloc.gpus > quota:
                continue  # past its owner's GPU quota
            for model in durations:
                moves = model != alloc.gpu_model
                if (moves and (not policy.migrate or not alloc.durations_ms or model not in roomy)) or (
                    not moves and (count < alloc.gpus or (count == alloc.gpus and not alloc.parts))
                ):
                    continue
                left_there = alloc.remaining_ms_at(count, ready, model)
                if (
                    left_there is not None
                    and left_here - (overhead + left_there) * (1.0 + policy.time_slack) > 2 * overhead
                ):
                    shapes.append((count, model, left_there))
        if shapes:
            best = min(left for _, _, left in shapes)
            shapes.sort(key=lambda s: (s[2] > best * (1.0 + policy.time_slack), s[0], s[2], s[1]))
            count, _, left_there = shapes[0]
            ranked.append((-(left_here - overhead - left_there) / count, alloc.job_id, shapes, alloc))
    ranked.sort(key=lambda r: (r[0], r[1]))
    out: list[Preempt] = []
    for _, job_id, shapes, alloc in ranked:
        for count, model, left_there in shapes:
            notice = _reshape(view, index, timeline, alloc, count, model, ready + overhead + left_there)
            if notice is not None:
                taken.add(job_id)
                in_use[alloc.user] += count - alloc.gpus
                out.append(notice)
                break
    return out


def _reshape(
    view: ClusterView, index: FreeIndex, timeline: Timeline, alloc: Allocation, count: int, model: str, end: int
) -> Preempt | None:
    """The notice that moves ``alloc`` to ``count`` GPUs of ``model`` ending at ``end``, holding the GPUs
    it will restart on, or None when they are not free for that long."""
    extra = count - alloc.gpus
    if (
        model == alloc.gpu_model
        and not alloc.parts
        and index.free[alloc.host_id] >= extra
        and timeline.fits(alloc.host_id, extra, view.now_ms, end - view.now_ms)
    ):
        host, need = alloc.host_id, extra  # it grows where it is
    else:
        elsewhere = timeline.startable_now(model, count, end - view.now_ms)
        if elsewhere is None:
            return None
        host, need = elsewhere, count
    index.take(host, need)  # held for the job until it resumes in its new shape
    timeline.add_running(host, end, need)
    minutes = (alloc.est_end_ms - end) // 60_000
    shape = f"{count} GPUs" if model == alloc.gpu_model else f"{count}x {model}"
    return Preempt(
        alloc.job_id,
        alloc.host_id,
        view.now_ms + view.notice_ms,
        alloc.job_id,
        f"growing from {alloc.gpus} to {shape} on idle GPUs: ~{minutes} min sooner",
        migrate_to=model if model != alloc.gpu_model else None,
        resize_to=count,
    )


def shrink(
    view: ClusterView,
    job: JobRequest,
    models: list[str],
    index: FreeIndex,
    timeline: Timeline,
    taken: set[str],
    start_ms: int | None,
) -> tuple[list[Preempt], tuple[str, str]] | None:
    """Notices that take lent GPUs back from running elastic jobs on one host so that ``job``'s gang
    fits there, and that host and model; None when no host can be freed that way (or none needs to be),
    or when the lenders would lose more time than the job saves (``start_ms``: when it would start
    otherwise; None: not before the lenders end)."""
    lenders: dict[str, list[Allocation]] = {}
    ready = view.now_ms + view.notice_ms
    shortest = min(job.durations_ms[m] for m in models)
    for alloc in view.running:
        if (
            _resizable(view, alloc, taken, cooldown=False)
            and not alloc.parts  # on one host
            and _lent(alloc) > 0
            and alloc.gpu_model in models
            and _yields(alloc, job, ready, shortest)
        ):
            lenders.setdefault(alloc.host_id, []).append(alloc)
    for host in sorted(lenders, key=lambda h: (-sum(_lent(a) for a in lenders[h]), h)):
        model = index.model_of[host]
        need = job.gpus - index.free[host]
        if timeline.has_reservations(host) or index.total[host] < job.gpus or need <= 0:
            continue  # (room there already: what keeps the job waiting is not the lent GPUs)
        chosen: list[tuple[Allocation, int]] = []  # (lender, the count it shrinks to)
        for alloc in sorted(lenders[host], key=lambda a: (-_lent(a), a.job_id)):
            if need <= 0:
                break
            # the largest of its counts that gives back enough, else its minimum
            low = max((c for c in alloc.counts_ms if alloc.gpus - c >= need), default=min(alloc.counts_ms))
            chosen.append((alloc, low))
            need -= alloc.gpus - low
        if need > 0:
            continue
        # the time the lenders lose (restart, and the rest at fewer GPUs) against the wait the job saves
        waits = (start_ms if start_ms is not None else max(a.est_end_ms for a, _ in chosen)) - ready
        lost = sum(
            (a.remaining_ms_at(low, ready) or 0) + view.restart_overhead_ms - (a.est_end_ms - ready)
            for a, low in chosen
        )
        if lost >= waits * SHRINK_BOUND:
            continue
        notices = []
        for alloc, low in chosen:
            taken.add(alloc.job_id)
            notices.append(
                Preempt(
                    alloc.job_id,
                    host,
                    ready,
                    job.id,
                    f"shrinking from {alloc.gpus} to {low} GPUs so that job {job.id} can start; "
                    "it resumes from its checkpoint",
                    resize_to=low,
                )
            )
        return notices, (host, model)
    return None


def _yields(lender: Allocation, job: JobRequest, ready: int, shortest: int) -> bool:
    """Whether ``lender`` gives lent GPUs back to ``job``, by the rules of a preemption (danlu.scheduling.
    preemption): never to a job of lower priority, never on-demand work to interruptible work; at equal
    priority only to a job shorter than what the lender has left (shortest remaining first: shrinking a
    job that ends sooner only delays both)."""
    if lender.priority != job.priority:
        return lender.priority < job.priority
    if job.interruptible and not lender.interruptible:
        return False
    return lender.est_end_ms - ready > shortest


def _lent(alloc: Allocation) -> int:
    return alloc.gpus - min(alloc.counts_ms)


def _resizable(view: ClusterView, alloc: Allocation, taken: set[str], *, cooldown: bool = True) -> bool:
    """A running elastic job that may get a resize notice now: none yet this round, and (to grow) it has
    run ``resize_cooldown_ms`` at its count. Lent GPUs go back without waiting for the cooldown."""
    return (
        bool(alloc.counts_ms)
        and alloc.stopping_at_ms is None
        and alloc.job_id not in taken
        and (not cooldown or view.now_ms - alloc.start_ms >= view.resize_cooldown_ms)
    )
