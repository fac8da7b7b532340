"""The pure scheduling core: one round, :func:`schedule` (view, policy) -> decisions.

No database, no clock, no I/O. Invariants (property-tested in tests/scheduling):

* a :class:`Start` never takes more GPUs than a host has free (after this round's other starts);
* a gang starts whole on one host or not at all;
* a start never takes a user past their GPU quota;
* a :class:`Preempt` always carries ``notice_deadline_ms >= now + notice``.

Jobs are walked in the policy's order. A job that cannot start now is "blocked"; the first
``reservation_depth`` blocked jobs get a reservation on the host where they can start earliest,
and later jobs may only start now if they leave those reservations intact (backfill). Jobs beyond
the point where the cluster is full and the reservation budget is spent get no decision this
round (they simply stay queued); every other queued job gets a :class:`Defer` with its reason.

While the queue looks like a closed batch (``policies.batch_horizon``), the order is longest
first and the balanced choice takes, among types that end before the batch's estimated end, the
one using the least cluster capacity (comparative advantage), to keep the last finish early.

The queue is heapified, not sorted: a round pays O(n) for the keys plus O(log n) per job it
actually looks at, so a round that fills the cluster after k jobs costs O(n + k log n); a walk
that goes past n/32 jobs sorts the rest once instead (cheaper than popping in CPython).

Policies with ``migrate`` then look at running jobs: GPUs still free after the queue walk (and
after every reservation) may take a running job whose estimated finish improves by more than the
restart overhead; it gets a :class:`Preempt` with ``migrate_to`` set (the same notice, requeue and
resume from checkpoint as any preemption). Because of that, such a policy also values starting a
job now on a slower free type at its finish *with* a later move to the faster type.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterator
from itertools import chain
from operator import itemgetter

from danlu.billing.pricing import Plan
from danlu.scheduling.backfill import Timeline
from danlu.scheduling.deferral import cheaper_start, horizon_for
from danlu.scheduling.elastic import grow, shrink, size
from danlu.scheduling.fairshare import within_quota
from danlu.scheduling.las import schedule_las
from danlu.scheduling.model import Allocation, ClusterView, Decision, Defer, JobRequest, Parts, Preempt, Start
from danlu.scheduling.placement import FreeIndex
from danlu.scheduling.policies import Batch, Policy, any_type_index, min_duration, order_keys
from danlu.scheduling.preemption import Preemptor, demotion_for

Option = tuple[int, int, str, str]  # (start_ms, finish_ms, model, host)
SPREAD = "*spread*"  # an option's host when the gang starts spread over hosts (its parts are kept aside)


def schedule(view: ClusterView, policy: Policy) -> list[Decision]:
    if policy.order == "las":
        return schedule_las(view)
    index = FreeIndex(view.hosts)
    timeline = Timeline(view.now_ms, index, view.running)
    keys, closed = order_keys(view, policy)  # closed: the queue as a closed batch, if it looks like one
    # no demotion in a closed batch of several jobs: longest-first is what ends the batch early there
    demotion = demotion_for(view, policy) if closed is None or len(view.queue) == 1 else None
    preemptor = Preemptor(view, demotion) if policy.preempt else None
    in_use: Counter[str] = Counter()
    for alloc in view.running:
        in_use[alloc.user] += alloc.gpus
    now = view.now_ms
    decisions: list[Decision] = []
    blocked = 0
    free_left = sum(index.free.values())
    allowed = _AllowedModels(view, index.models)
    quotas = view.quotas_gpus
    batch = closed if policy.choice == "balanced" else None
    # elastic jobs (elastic.py): queued ones are sized (not under fifo), running ones may lend GPUs back
    sizing = policy.order != "fifo"
    lending = sizing and elastic_running(view)
    noticed = preemptor.taken if preemptor is not None else set()  # running jobs given notice this round: one each
    for job in _in_order(view.queue, keys):
        can_reserve = policy.backfill and blocked < policy.reservation_depth
        if free_left == 0 and not can_reserve:
            break  # nothing free, reservation (and preemption) budget spent: the rest stay queued
        if job.counts_ms and sizing:
            quota = quotas.get(job.user) if quotas else None
            cap = None if quota is None else quota - in_use[job.user]  # a count past its quota is not offered
            job = _sized(view, policy, job, allowed, timeline, batch, cap)
        if quotas and not within_quota(job.user, job.gpus, in_use, quotas):
            decisions.append(Defer(job.id, None, f"user {job.user} would exceed their GPU quota"))
            continue
        models = allowed(job)
        if not models:
            decisions.append(Defer(job.id, None, "no GPU model it can run on is within its max price"))
            continue
        spreads: dict[str, Parts] = {}
        if can_reserve or (
            free_left and (job.spread_ok or not timeline.surely_blocked(models, job.gpus, job.durations_ms))
        ):
            option = _choose(view, policy, job, models, timeline, can_reserve, batch, spreads)
        else:
            option = None  # past the reservation budget it could only start now, and it cannot
        if option is not None and option[0] == now:
            _, finish, model, host = option
            wait_until = _deferral(view, policy, job, model, finish - now)
            if wait_until is not None:
                decisions.append(Defer(job.id, wait_until, "a cheaper tariff window still meets the deadline", True))
                continue
            parts = spreads[model] if host == SPREAD else ((host, job.gpus),)
            reason = _start_reason(policy, blocked)
            if host == SPREAD:
                reason += f"; spread over {len(parts)} hosts (slower than on one)"
            decisions.append(
                Start(job.id, parts[0][0], model, job.gpus, job.plan, finish, reason, parts if host == SPREAD else ())
            )
            for part_host, part_gpus in parts:
                index.take(part_host, part_gpus)
                timeline.add_running(part_host, finish, part_gpus)
            in_use[job.user] += job.gpus
            free_left -= job.gpus
            continue
        if not policy.backfill:
            decisions.append(Defer(job.id, None, "waiting at the head of the queue (first come, first served)"))
            break
        blocked += 1
        if (
            can_reserve
            and preemptor is not None
            and preemptor.possible(job)
            and _preempt(view, job, models, option, index, timeline, preemptor, decisions)
        ):
            continue
        if (
            lending
            and can_reserve
            and (option is None or option[0] > now + view.notice_ms + view.restart_overhead_ms)
            and _shrink(view, job, models, index, timeline, noticed, decisions, option)
        ):
            continue
        if option is not None and can_reserve:
            start, finish, _, host = option
            timeline.reserve(host, start, finish, job.gpus)
            decisions.append(Defer(job.id, start, "GPUs reserved at the estimated start"))
        elif can_reserve and job.spread_ok and job.gpus > 1:  # no reservation is made for a future spread
            decisions.append(Defer(job.id, None, "waiting for enough GPUs of one model across hosts"))
        elif can_reserve:
            decisions.append(Defer(job.id, None, "no host can ever hold this gang"))
    if free_left > 0 and lending:
        decisions.extend(grow(view, policy, index, timeline, noticed, in_use))
    if policy.migrate and free_left > 0 and view.running:
        decisions.extend(_migrations(view, index, timeline, noticed))
    return decisions


def elastic_running(view: ClusterView) -> bool:
    return any(alloc.counts_ms for alloc in view.running)


def _sized(
    view: ClusterView,
    policy: Policy,
    job: JobRequest,
    allowed: _AllowedModels,
    timeline: Timeline,
    batch: Batch | None,
    cap: int | None,
) -> JobRequest:
    def finish_now(sized: JobRequest, models: list[str]) -> int | None:
        option = _choose(view, policy, sized, models, timeline, False, batch, {})
        return option[1] if option is not None and option[0] == view.now_ms else None

    return size(view, policy, job, allowed, finish_now, cap)


def _shrink(
    view: ClusterView,
    job: JobRequest,
    models: list[str],
    index: FreeIndex,
    timeline: Timeline,
    noticed: set[str],
    decisions: list[Decision],
    option: Option | None,
) -> bool:
    """Take lent GPUs back from running elastic jobs so that the blocked ``job`` starts after their notice."""
    found = shrink(view, job, models, index, timeline, noticed, option[0] if option is not None else None)
    if found is None:
        return False
    notices, (host, model) = found
    decisions.extend(notices)
    ready = view.now_ms + view.notice_ms
    timeline.reserve(host, ready, ready + job.durations_ms[model], job.gpus)
    decisions.append(Defer(job.id, ready, "waiting for GPUs lent to elastic jobs, after their notice"))
    return True


MIGRATION_COOLDOWN_MS = 30 * 60_000  # a job runs this long on a type before it may move again


def _migrations(view: ClusterView, index: FreeIndex, timeline: Timeline, taken: set[str]) -> list[Decision]:
    """Move running jobs onto GPUs nobody queued wants, when that finishes them sooner.

    A move costs the notice (the job keeps training through it) plus ``restart_overhead_ms`` of
    lost work; it is made only when the estimated finish improves by more than one further
    overhead (a margin against estimate error), largest gain first, never into a reservation.
    """
    ready = view.now_ms + view.notice_ms
    overhead = view.restart_overhead_ms
    roomy = {m: g for m in index.models if (g := index.largest_free(m)) > 0}
    if not roomy:
        return []
    candidates: list[tuple[int, str, str, int, Allocation]] = []
    for alloc in view.running:
        if alloc.stopping_at_ms is not None or not alloc.durations_ms or alloc.job_id in taken or alloc.parts:
            continue  # (a gang spread over hosts is not moved)
        if view.now_ms - alloc.start_ms < MIGRATION_COOLDOWN_MS:
            continue  # it just started (or moved): let it run before weighing another move
        left_here = alloc.est_end_ms - ready
        if left_here <= 2 * overhead:
            continue
        for model, largest in roomy.items():
            if model == alloc.gpu_model or largest < alloc.gpus:
                continue
            left_there = alloc.remaining_ms_on(model, ready)
            if left_there is None:
                continue
            gain = left_here - (overhead + left_there)
            if gain > max(2 * overhead, 1):  # beats the move and a move back
                candidates.append((-gain, alloc.job_id, model, left_there, alloc))
    candidates.sort(key=lambda c: (c[0], c[1], c[2]))
    out: list[Decision] = []
    moved: set[str] = set()
    for neg_gain, job_id, model, left_there, alloc in candidates:
        if job_id in moved:
            continue
        host = timeline.startable_now(model, alloc.gpus, overhead + left_there)
        if host is None:
            continue
        index.take(host, alloc.gpus)  # held for the job until it restarts there
        timeline.add_running(host, ready + overhead + left_there, alloc.gpus)
        moved.add(job_id)
        minutes = -neg_gain // 60_000
        out.append(Preempt(job_id, alloc.host_id, ready, job_id, f"migrating to {model}: ~{minutes} min sooner", model))
    return out


def _in_order(queue: tuple[JobRequest, ...], keys: list[tuple[float, ...]]) -> Iterator[JobRequest]:
    """Queued jobs in key order (keys are unique: each ends with the job's index in ``queue``).

    A heap while few jobs are looked at (a round that fills the cluster early stays
    O(n + k log n)); once a walk goes deep (n/32 jobs), the rest is sorted in one go and walked
    at C speed, which is much cheaper in CPython than popping the heap item by item. Same order
    either way."""
    heapq.heapify(keys)
    head = min(len(keys), max(64, len(keys) >> 5))

    def parts() -> Iterator[Iterator[JobRequest]]:
        pop = heapq.heappop
        yield (queue[int(pop(keys)[-1])] for _ in range(head))
        keys.sort()
        yield map(queue.__getitem__, map(int, map(itemgetter(-1), keys)))

    return chain.from_iterable(parts())


class _AllowedModels:
    """GPU models a job may run on: priced for its plan, within its max price, runnable.

    The priced part depends only on (plan, max price), so it is computed once per distinct pair
    per round, not once per job; only the runnable filter is per job. Sorted by model name."""

    def __init__(self, view: ClusterView, models: list[str]) -> None:
        self.prices = view.prices
        self.models = sorted(models)
        self._priced: dict[tuple[Plan, int | None], list[str]] = {}

    def __call__(self, job: JobRequest) -> list[str]:
        plan = job.plan
        cap = job.max_price_minor
        priced = self._priced.get((plan, cap))
        if priced is None:
            prices = self.prices
            priced = [
                m for m in self.models if prices.has_price(m, plan) and (cap is None or prices.price(m, plan) <= cap)
            ]
            self._priced[(plan, cap)] = priced
        durations = job.durations_ms
        return [m for m in priced if durations.get(m, 0) > 0]


def _choose_any(
    view: ClusterView,
    policy: Policy,
    job: JobRequest,
    models: list[str],
    timeline: Timeline,
    can_reserve: bool,
    spread_into: dict[str, Parts] | None,
) -> Option | None:
    """Policy choice "any": a uniformly random type among those with room now, as Gavel's FIFO pools a type's
    GPUs across servers — on one host where one has room, else spread (when the job may); else the earliest
    reserved start."""
    now = view.now_ms
    room: list[tuple[str, int, str, Parts]] = []  # (model, duration, host or SPREAD, parts)
    for m in models:
        host = timeline.startable_now(m, job.gpus, job.durations_ms[m])
        if host is not None:
            room.append((m, job.durations_ms[m], host, ()))
        elif spread_into is not None:
            slower = job.spread_ms(m, view.spread_slowdown)
            parts = timeline.spread_now(m, job.gpus, slower)
            if parts is not None:
                room.append((m, slower, SPREAD, parts))
    if room:
        model, duration, host, parts = room[any_type_index(job.id, len(room), policy.seed)]
        if host == SPREAD and spread_into is not None:
            spread_into[model] = parts
        return (now, now + duration, model, host)
    if not can_reserve:
        return None
    later = [_earliest(timeline, job, m) for m in models]
    options = [o for o in later if o is not None]
    return min(options, key=lambda o: (o[0], o[1])) if options else None


def _choose(
    view: ClusterView,
    policy: Policy,
    job: JobRequest,
    models: list[str],
    timeline: Timeline,
    can_reserve: bool,
    batch: Batch | None = None,
    spreads: dict[str, Parts] | None = None,
) -> Option | None:
    """The job's (start, finish, model, host): now or at a reserved start. ``spreads``: a job that
    allows it may start now spread over hosts of a model on which no single host has room (host
    :data:`SPREAD`, its parts stored in ``spreads[model]``), at its measured spread run time there
    (:meth:`JobRequest.spread_ms`; else ``view.spread_slowdown`` x the time)."""
    now = view.now_ms
    spread_into = spreads if job.spread_ok and job.gpus > 1 else None
    if policy.choice == "any":
        return _choose_any(view, policy, job, models, timeline, can_reserve, spread_into)
    options = []
    for model in models:
        duration = job.durations_ms[model]
        host = timeline.startable_now(model, job.gpus, duration)
        if host is not None:
            options.append((now, now + duration, model, host))
            continue
        if spread_into is not None:
            slower = job.spread_ms(model, view.spread_slowdown)
            parts = timeline.spread_now(model, job.gpus, slower)
            if parts is not None:
                spread_into[model] = parts
                options.append((now, now + slower, model, SPREAD))
        if can_reserve:
            option = _earliest(timeline, job, model)
            if option is not None:
                options.append(option)
    if not options:
        return None
    plan = job.plan
    if not can_reserve and not policy.migrate:
        # Past the reservation budget we cannot see when better types free up, so only take a
        # type that is (nearly) this job's best; never park a job on a far slower type blindly.
        fastest = min(job.durations_ms[m] for m in models)
        cheapest = min(view.prices.price(m, plan) * job.durations_ms[m] for m in models)
        options = [
            o
            for o in options
            if (policy.choice == "balanced" and o[1] - o[0] <= fastest * (1.0 + policy.time_slack))
            or (policy.choice == "cheapest" and view.prices.price(o[2], plan) * (o[1] - o[0]) <= cheapest)
        ]
        if not options:
            return None

    def cost(option: Option) -> int:
        return view.prices.price(option[2], plan) * (option[1] - option[0])

    if policy.choice == "cheapest":
        # the cheapest type among those that end within the bound a renter can read (issue 11:
        # waiting for the cheapest type made 189 jobs wait over a day)
        bound = now + (min(o[1] for o in options) - now) * policy.cost_delay_factor
        return min((o for o in options if o[1] <= bound), key=lambda o: (cost(o), o[1]))
    if batch is not None:
        # a closed batch (see policies.batch_horizon): among the types on which this job ends
        # before the whole batch is estimated to be done, take the one that uses the least of
        # the cluster's capacity (duration there x that type's relative speed), so slow types go
        # to the jobs that lose least on them (comparative advantage) and the last finish stays
        # early. No such type: the usual choice below.
        within = [o for o in options if o[1] <= batch.horizon_ms]
        if within:
            speed = batch.speed
            return min(within, key=lambda o: ((o[1] - o[0]) * speed.get(o[2], 1.0), o[1], o[2]))
    finish = _with_migration(view, job, options) if policy.migrate else {o: o[1] for o in options}
    best_finish = min(finish.values())
    limit = now + (best_finish - now) * (1.0 + policy.time_slack)
    return min((o for o in options if finish[o] <= limit), key=lambda o: (cost(o), finish[o]))


def _with_migration(view: ClusterView, job: JobRequest, options: list[Option]) -> dict[Option, float]:
    """Estimated finish of each option when a job started now on a slower type may move to a
    faster one once it frees: it has made progress by then and pays one restart overhead."""
    now = view.now_ms
    later = [o for o in options if o[0] > now]
    out: dict[Option, float] = {}
    for option in options:
        best = float(option[1])
        duration = job.durations_ms[option[2]]
        if option[0] == now and duration > 0 and option[3] != SPREAD:  # a spread gang is not moved
            for start, _, model, _ in later:
                done = min(1.0, (start + view.notice_ms - now) / duration)
                moved = start + view.notice_ms + view.restart_overhead_ms + job.durations_ms[model] * (1.0 - done)
                best = min(best, moved)
        out[option] = best
    return out


def _earliest(timeline: Timeline, job: JobRequest, model: str) -> Option | None:
    duration = job.durations_ms[model]
    slot = timeline.earliest_on_model(model, job.gpus, duration)
    if slot is None:
        return None
    return (slot[0], slot[0] + duration, model, slot[1])


def _deferral(view: ClusterView, policy: Policy, job: JobRequest, model: str, duration: int) -> int | None:
    if policy.defer == "never" or (policy.defer == "deadline" and job.deadline_ms is None):
        return None
    horizon = horizon_for(job, duration, view.now_ms, policy.defer_horizon_ms)
    if policy.defer == "always":
        # cost mode: a cheaper window only while the job still ends within the readable bound
        # (with the off-peak tariff, 492 of 951 jobs once waited for exactly 00:00)
        fastest = min(d for d in job.durations_ms.values() if d > 0)
        horizon = min(horizon, round(fastest * policy.cost_delay_factor) - duration)
    return cheaper_start(view.prices, job, model, duration, view.now_ms, horizon)


def _preempt(
    view: ClusterView,
    job: JobRequest,
    models: list[str],
    option: Option | None,
    index: FreeIndex,
    timeline: Timeline,
    preemptor: Preemptor,
    decisions: list[Decision],
) -> bool:
    deadline = view.now_ms + view.notice_ms
    if option is not None and option[0] <= deadline:
        return False  # it will start about as soon without hurting anyone
    if any(timeline.startable_now(m, job.gpus, job.durations_ms[m]) for m in models):
        return False  # capacity exists now (on a type it likes less): never preempt for a preference
    # demotion only when waiting would more than double the job's time (Tiresias demotes blindly)
    demote = preemptor.may_demote_for(job) and (option is None or option[0] - view.now_ms > min_duration(job))
    plan = preemptor.plan(job, models, index, demote=demote)
    if plan is None:
        return False
    for victim in plan.victims:
        decisions.append(Preempt(victim.job_id, victim.host_id, deadline, job.id, _preempt_reason(victim, job)))
    duration = job.durations_ms[plan.gpu_model]
    timeline.reserve(plan.host_id, plan.ready_ms, plan.ready_ms + duration, job.gpus)
    decisions.append(Defer(job.id, plan.ready_ms, "waiting for preempted GPUs after their notice"))
    return True


def _start_reason(policy: Policy, blocked: int) -> str:
    if blocked and policy.backfill:
        return "backfilled: fits now without delaying any reserved start"
    return f"placed by {policy.name}"


def _preempt_reason(victim: Allocation, job: JobRequest) -> str:
    if victim.priority < job.priority:
        return f"preempted with notice for higher-priority job {job.id}"
    if victim.interruptible and not job.interruptible:
        return f"preempted with notice for on-demand job {job.id}"
    hours = victim.attained_ms / 3_600_000
    return (
        f"demoted with notice after {hours:.1f} GPU-hours of service for job {job.id}, which has had less; "
        "it resumes from its checkpoint"
    )
