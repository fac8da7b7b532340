"""The long-tailed trace generator (issue 11) and the las baseline it is measured with."""

from __future__ import annotations

import statistics

import pytest

from danlu.billing.pricing import PriceBook
from danlu.core.errors import InvalidInput
from danlu.scheduling import longtail
from danlu.scheduling.core import schedule
from danlu.scheduling.model import Allocation, ClusterView, Defer, Host, JobRequest, Preempt, Start
from danlu.scheduling.policies import get_policy

LAS = get_policy("las", simulator=True)


def test_the_generator_is_seeded_long_tailed_and_open() -> None:
    assert longtail.generate(3) == longtail.generate(3) != longtail.generate(4)
    gpu_h: list[float] = []
    for seed in range(5):
        trace = longtail.generate(seed)
        hours = [t.duration_s * t.gpus / 3600 for t in trace]
        assert 3.0 <= statistics.median(hours) <= 4.5  # the "median 3-4 GPU-hours"
        assert {t.gpus for t in trace} == {1, 2, 4, 8}
        assert trace[-1].arrival_s > 4 * 7 * 86_400  # arrivals over weeks, not a closed batch
        gpu_h += hours
    assert sum(1 for h in gpu_h if h >= 1000) >= 5  # a few giants per trace


def test_las_is_a_simulator_baseline_not_a_live_policy() -> None:
    with pytest.raises(InvalidInput):
        get_policy("las")
    assert LAS.round_ms == 360_000 and LAS.notice_ms == 0


def _view(notice_ms: int) -> ClusterView:
    hosts = (Host("v0", "V100", 4, 0), Host("k0", "K80", 4, 0))
    running = (
        Allocation("old", "u", "v0", "V100", 4, 0, 10_000_000, attained_ms=50_000_000),
        Allocation("mid", "u", "k0", "K80", 4, 0, 10_000_000, attained_ms=1_000),
    )
    queue = (JobRequest("new", "u", 4, 5_000, {"V100": 600_000, "K80": 2_400_000}, seq=1),)
    return ClusterView(7_000, hosts, queue, running, PriceBook("USD", {}), notice_ms=notice_ms)


def test_las_gives_the_least_served_job_the_fastest_gpus_taken_from_the_most_served() -> None:
    decisions = schedule(_view(0), LAS)
    assert [d for d in decisions if isinstance(d, Preempt)] == [
        Preempt("old", "v0", 7_000, "", "time slice: least attained service")
    ]
    starts = [d for d in decisions if isinstance(d, Start)]
    assert [(s.job_id, s.host_id) for s in starts] == [("new", "v0")]  # "mid" (less served) keeps its K80s


def test_with_a_notice_las_preempts_then_waits_for_the_gpus() -> None:
    decisions = schedule(_view(60_000), LAS)
    assert any(isinstance(d, Preempt) and d.notice_deadline_ms == 67_000 for d in decisions)
    assert [d for d in decisions if isinstance(d, Start)] == []
    assert any(isinstance(d, Defer) and d.job_id == "new" for d in decisions)


def test_las_replays_a_long_tailed_trace_to_the_end_by_time_slicing() -> None:
    from danlu.scheduling.simulator import simulate, summarize, to_requests

    sim = longtail.sim_setup()
    requests = to_requests(sim, longtail.generate(1, n=120, days=4))
    engine = simulate(sim, requests, "las")
    summary = summarize(engine, sim, "las")
    assert summary["jobs_unfinished"] == 0
    assert summary["preemptions"] > 0  # it time-slices
    assert all(j.status == "succeeded" for j in engine.jobs.values())
