"""Invariants of one scheduling round, for every policy, on random clusters and queues."""

from __future__ import annotations

from collections import Counter
from datetime import time
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from danlu.billing.pricing import Plan, PriceBook, Tariff
from danlu.scheduling.core import schedule
from danlu.scheduling.model import Allocation, ClusterView, Defer, Host, JobRequest, Preempt, Start
from danlu.scheduling.policies import POLICIES

MODELS = ["K80", "P100", "V100"]
PRICES = {(m, p): price for m, price in zip(MODELS, (92, 193, 295), strict=True) for p in Plan}
NOW = 1_767_603_600_000
NIGHT = Tariff("night", frozenset(range(7)), time(0), time(8), Decimal("0.6"))


@st.composite
def views(draw: st.DrawFn) -> ClusterView:
    hosts, running = [], []
    for h in range(draw(st.integers(1, 6))):
        model = draw(st.sampled_from(MODELS))
        total = draw(st.sampled_from([1, 2, 4, 8]))
        used = 0
        for r in range(draw(st.integers(0, 3))):
            gpus = draw(st.integers(1, total))
            if used + gpus > total:
                break
            used += gpus
            running.append(
                Allocation(
                    f"r{h}-{r}",
                    draw(st.sampled_from("abc")),
                    f"h{h}",
                    model,
                    gpus,
                    NOW - draw(st.integers(0, 10**7)),
                    NOW + draw(st.integers(1, 10**8)),
                    priority=draw(st.integers(0, 2)),
                    interruptible=draw(st.booleans()),
                    stopping_at_ms=draw(st.sampled_from([None, NOW + 30_000])),
                    durations_ms=draw(
                        st.one_of(st.just({}), st.fixed_dictionaries({m: st.integers(1, 10**8) for m in MODELS}))
                    ),
                    attained_ms=draw(st.sampled_from([0, 10**7, 10**9])),
                    checkpoints=draw(st.booleans()),
                )
            )
        hosts.append(Host(f"h{h}", model, total, total - used))
    queue = []
    for j in range(draw(st.integers(0, 25))):
        allowed = draw(st.lists(st.sampled_from(MODELS), min_size=1, max_size=3, unique=True))
        queue.append(
            JobRequest(
                id=f"q{j}",
                user=draw(st.sampled_from("abc")),
                gpus=draw(st.sampled_from([1, 1, 2, 4, 8, 16])),
                submit_ms=NOW - draw(st.integers(0, 10**7)),
                durations_ms={m: draw(st.integers(1, 10**8)) for m in allowed},
                priority=draw(st.integers(0, 2)),
                interruptible=draw(st.booleans()),
                max_price_minor=draw(st.sampled_from([None, 100, 200, 1000])),
                deadline_ms=draw(st.sampled_from([None, NOW + 10**8, NOW + 10**9])),
                seq=j,
                attained_ms=draw(st.sampled_from([0, 0, 10**9])),
                spread_ok=draw(st.booleans()),
            )
        )
    tariffs = (NIGHT,) if draw(st.booleans()) else ()
    return ClusterView(
        now_ms=NOW,
        hosts=tuple(hosts),
        queue=tuple(queue),
        running=tuple(running),
        prices=PriceBook("USD", PRICES, tariffs),
        quotas_gpus=draw(st.dictionaries(st.sampled_from("abc"), st.integers(0, 8))),
        usage=draw(st.dictionaries(st.sampled_from("abc"), st.floats(0, 100))),
        notice_ms=draw(st.sampled_from([0, 60_000, 300_000])),
        restart_overhead_ms=draw(st.sampled_from([0, 30_000])),
    )


@settings(max_examples=120, deadline=None)
@given(view=views(), policy=st.sampled_from(sorted(POLICIES)))
def test_round_never_breaks_an_invariant(view: ClusterView, policy: str) -> None:
    decisions = schedule(view, POLICIES[policy])
    free = {h.id: h.free_gpus for h in view.hosts}
    model = {h.id: h.gpu_model for h in view.hosts}
    jobs = {j.id: j for j in view.queue}
    running = {a.job_id: a for a in view.running}
    in_use = Counter[str]()
    for alloc in view.running:
        in_use[alloc.user] += alloc.gpus
    decided: list[str] = []
    moving = Counter[str]()
    for d in decisions:
        if isinstance(d, Start):
            job = jobs[d.job_id]
            assert d.gpus == job.gpus == sum(n for _, n in d.placed), "a gang starts whole or not at all"
            assert not d.parts or (job.spread_ok and len(d.parts) > 1), "spread only when the job allows it"
            assert d.placed[0][0] == d.host_id and len({h for h, _ in d.placed}) == len(d.placed)
            for host_id, n in d.placed:
                assert n > 0 and free[host_id] >= n, "never over-allocate a GPU"
                free[host_id] -= n
                assert model[host_id] == d.gpu_model, "a spread gang stays on one GPU model"
            assert job.runnable_on(d.gpu_model)
            quota = view.quotas_gpus.get(job.user)
            in_use[job.user] += d.gpus
            assert quota is None or in_use[job.user] <= quota, "never violate a quota"
            if job.max_price_minor is not None:
                assert view.prices.price(d.gpu_model, job.plan) <= job.max_price_minor
            decided.append(d.job_id)
        elif isinstance(d, Preempt):
            victim = running[d.job_id]
            assert victim.stopping_at_ms is None, "never preempt a job twice"
            assert d.notice_deadline_ms >= view.now_ms + view.notice_ms, "never preempt (or migrate) without notice"
            if d.migrate_to is not None:
                assert d.for_job_id == d.job_id and d.migrate_to != victim.gpu_model
                assert d.migrate_to in victim.durations_ms, "only to a type the job may run on"
                # the target GPUs come out of what this round's starts left free: never over-allocated
                assert any(h.gpu_model == d.migrate_to and free[h.id] >= victim.gpus for h in view.hosts)
                moving[d.migrate_to] += victim.gpus
                left = sum(free[h.id] for h in view.hosts if h.gpu_model == d.migrate_to)
                assert moving[d.migrate_to] <= left, "migrations never over-allocate a type"
            else:
                job = jobs[d.for_job_id]
                demoted = (  # demotion by attained service (danlu, danlu-cost): see test_demotion.py
                    POLICIES[policy].demote_after_ms is not None
                    and victim.checkpoints
                    and victim.priority == job.priority
                    and victim.attained_ms >= (POLICIES[policy].demote_after_ms or 0) > job.attained_ms
                    and view.now_ms - victim.start_ms >= POLICIES[policy].min_slice_ms
                )
                assert victim.interruptible or victim.priority < job.priority or demoted
            decided.append(d.job_id)
        else:
            assert isinstance(d, Defer) and d.job_id in jobs
            decided.append(d.job_id)
    assert len(decided) == len(set(decided)), "at most one decision per job"


@settings(max_examples=40, deadline=None)
@given(view=views())
def test_fifo_never_starts_a_job_behind_one_it_leaves_waiting(view: ClusterView) -> None:
    decisions = schedule(view, POLICIES["fifo"])
    seq = {j.id: j.seq for j in view.queue}
    waiting = [seq[d.job_id] for d in decisions if isinstance(d, Defer) and "head of the queue" in d.reason]
    started = [seq[d.job_id] for d in decisions if isinstance(d, Start)]
    if waiting:
        assert all(s < min(waiting) for s in started)
