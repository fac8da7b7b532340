"""Demotion by attained service inside ``danlu`` (issue 11, item 3).

Run-to-completion lost to time slicing on heavy tails: giant 8-GPU jobs held the only two 8-GPU
K80 servers for weeks while every other 8-GPU job waited (975 h average JCT for 8-GPU jobs on one
seed, against 85 h under las). ``danlu`` now stops a job that checkpoints, has had its share of
service and its slice, for an equal-priority job that has had little, needs less than the giant
has left and would otherwise wait longer than its own run time; with notice, requeued, resumed.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from danlu.billing.pricing import Plan, PriceBook
from danlu.scheduling import longtail
from danlu.scheduling.core import schedule
from danlu.scheduling.model import Allocation, ClusterView, Defer, Host, JobRequest, Preempt, Start
from danlu.scheduling.policies import DEMOTE_AFTER_MS, get_policy

H = 3_600_000
DANLU = get_policy("danlu")
NOW = 100 * H
PRICES = PriceBook("USD", {("K80", Plan.ON_DEMAND): 45, ("K80", Plan.INTERRUPTIBLE): 14})


def _giant(**kw: object) -> Allocation:
    base = Allocation(
        "giant",
        "u1",
        "k0",
        "K80",
        8,
        start_ms=NOW - 5 * H,  # this run began 5 h ago
        est_end_ms=NOW + 500 * H,
        durations_ms={"K80": 600 * H},
        attained_ms=300 * H,  # GPU-hours of service so far, far past the line
        checkpoints=True,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def _view(giant: Allocation, job: JobRequest | None = None) -> ClusterView:
    small = job or JobRequest("small", "u2", 8, NOW - 600_000, {"K80": 2 * H}, seq=7)
    # (a lone queued job looks like a closed batch, in which nothing is demoted unless it is alone)
    return ClusterView(NOW, (Host("k0", "K80", 8, 0),), (small,), (giant,), PRICES, notice_ms=60_000)


def test_a_giant_is_demoted_with_notice_for_a_small_gang_that_would_wait_weeks() -> None:
    decisions = schedule(_view(_giant()), DANLU)
    preempts = [d for d in decisions if isinstance(d, Preempt)]
    assert [(p.job_id, p.for_job_id, p.notice_deadline_ms, p.migrate_to) for p in preempts] == [
        ("giant", "small", NOW + 60_000, None)
    ]
    assert "demoted with notice after 300.0 GPU-hours of service" in preempts[0].reason
    assert [(d.job_id, d.until_ms) for d in decisions if isinstance(d, Defer)] == [("small", NOW + 60_000)]
    assert not [d for d in decisions if isinstance(d, Start)]


def test_without_demotion_the_small_gang_waits_for_the_giant() -> None:
    decisions = schedule(_view(_giant()), replace(DANLU, demote_after_ms=None))
    assert not [d for d in decisions if isinstance(d, Preempt)]


@pytest.mark.parametrize(
    ("giant", "why"),
    [
        (_giant(checkpoints=False), "it does not checkpoint: its work would be lost"),
        (_giant(attained_ms=DEMOTE_AFTER_MS - 1), "it has not had its share of service yet"),
        (_giant(start_ms=NOW - DANLU.min_slice_ms + 1), "it (re)started less than a slice ago"),
        (_giant(est_end_ms=NOW + H), "it has less work left than the queued job needs"),
        (_giant(stopping_at_ms=NOW + 30_000), "it is already leaving"),
        (_giant(priority=2), "it has a higher priority"),
    ],
)
def test_no_demotion_when(giant: Allocation, why: str) -> None:
    decisions = schedule(_view(giant), DANLU)
    assert not [d for d in decisions if isinstance(d, Preempt)], why


def test_no_demotion_for_a_job_that_has_had_its_share_itself() -> None:
    served = JobRequest("small", "u2", 8, NOW - 600_000, {"K80": 2 * H}, seq=7, attained_ms=DEMOTE_AFTER_MS)
    assert not [d for d in schedule(_view(_giant(), served), DANLU) if isinstance(d, Preempt)]


def test_no_demotion_when_the_job_starts_within_its_own_run_time_anyway() -> None:
    # the giant is about to end: waiting 1 h for a 2 h job is better than stopping anyone
    giant = _giant(est_end_ms=NOW + H, durations_ms={"K80": 101 * H})
    small = JobRequest("small", "u2", 4, NOW - 600_000, {"K80": 2 * H}, seq=7)
    assert not [d for d in schedule(_view(giant, small), DANLU) if isinstance(d, Preempt)]


def test_a_long_tailed_trace_with_8_gpu_giants_finishes_sooner_with_demotion() -> None:
    """Seed 3 of benchmarks/longtail.py, shortened: the giants that held both 8-GPU servers."""
    from danlu.scheduling.simulator import simulate, summarize, to_requests

    sim = longtail.sim_setup()
    trace = longtail.generate(3, n=300, days=14)
    results = {}
    for name in ("danlu", "las"):
        engine = simulate(sim, to_requests(sim, trace, spread=False), name)  # gangs on one host: demotion frees one
        results[name] = summarize(engine, sim, name)
        assert results[name]["jobs_unfinished"] == 0
    assert results["danlu"]["preemptions"] > 0  # it demoted someone
    assert results["danlu"]["avg_jct_h"] < results["las"]["avg_jct_h"]


def test_no_demotion_in_a_closed_batch_of_several_jobs() -> None:
    """A bulk submission is ordered longest-first to end the batch early: demoting the longest
    jobs there would undo it (gavel48's minimize_makespan)."""
    small = JobRequest("small", "u2", 8, NOW - 600_000, {"K80": 2 * H}, seq=7)
    other = replace(small, id="other", seq=8)
    view = replace(_view(_giant()), queue=(small, other))
    assert not [d for d in schedule(view, DANLU) if isinstance(d, Preempt)]
    open_stream = replace(view, queue=(small, replace(other, submit_ms=NOW - 400 * H)))
    assert [d.job_id for d in schedule(open_stream, DANLU) if isinstance(d, Preempt)] == ["giant"]


def test_on_demand_work_never_makes_way_for_interruptible_work() -> None:
    cheap = JobRequest("small", "u2", 8, NOW - 600_000, {"K80": 2 * H}, seq=7, interruptible=True)
    assert not [d for d in schedule(_view(_giant(), cheap), DANLU) if isinstance(d, Preempt)]
    spot_giant = _giant(interruptible=True)  # an interruptible giant may make way for either
    assert [d.job_id for d in schedule(_view(spot_giant, cheap), DANLU) if isinstance(d, Preempt)] == ["giant"]


def test_the_operators_line_and_slice_reach_the_live_policy() -> None:
    from pathlib import Path
    from types import SimpleNamespace

    from danlu.context import Settings
    from danlu.scheduling.live import live_policy

    defaults = Settings(data_dir=Path())  # `danlu server` without --demote-after/--demote-slice
    for name in ("danlu", "danlu-cost"):
        policy = get_policy(name)
        assert live_policy(SimpleNamespace(settings=replace(defaults, scheduler_policy=name))) == policy  # type: ignore[arg-type]
        set_ = replace(defaults, scheduler_policy=name, demote_after_s=90, demote_slice_s=30)
        assert live_policy(SimpleNamespace(settings=set_)) == replace(  # type: ignore[arg-type]
            policy, demote_after_ms=90_000, min_slice_ms=30_000
        )
        off = replace(defaults, scheduler_policy=name, demote_after_s=None)
        assert live_policy(SimpleNamespace(settings=off)).demote_after_ms is None  # type: ignore[arg-type]
    fifo = replace(defaults, scheduler_policy="fifo", demote_after_s=90)
    assert live_policy(SimpleNamespace(settings=fifo)) == get_policy("fifo")  # type: ignore[arg-type]
