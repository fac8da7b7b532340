"""Issue 11, item 1: no migration livelock. A job that gains by moving to a faster, dearer type
used to be put straight back on the cheaper type it left (cheapest within 10 % of the best finish)
and moved again the next round: 59 moves for one 10-hour job here, finishing 1 h late. Now a job
runs 30 min before it may move again, a move must beat the move and a move back, a second move
restarts on its target, and no job moves more than ``MAX_MIGRATIONS`` times."""

from __future__ import annotations

from danlu.billing.pricing import Plan, PriceBook
from danlu.scheduling.engine import MAX_MIGRATIONS
from danlu.scheduling.model import Host, JobRequest
from danlu.scheduling.simulator import SimSetup, simulate, summarize
from danlu.scheduling.speed import ThroughputTable

NOW = 1_767_600_000_000
H = 3_600_000
BOOK = PriceBook("USD", {("V100", Plan.ON_DEMAND): 300, ("P100", Plan.ON_DEMAND): 150, ("K80", Plan.ON_DEMAND): 90})
HOSTS = (Host("v0", "V100", 1, 1), Host("p0", "P100", 1, 1), Host("k0", "K80", 1, 1))
SETUP = SimSetup(HOSTS, BOOK, NOW, ThroughputTable(), "V100")


def test_a_job_does_not_ping_pong_between_a_fast_and_a_cheap_type() -> None:
    job = JobRequest("j", "u", 1, NOW, {"V100": 10 * H, "P100": 10 * H + 30 * 60_000}, seq=0)
    # Short K80-only jobs arrive every 10 min: each arrival is a round in which j may move.
    ticks = [JobRequest(f"t{i}", "u", 1, NOW + i * 10 * 60_000, {"K80": 60_000}, seq=i) for i in range(1, 60)]
    engine = simulate(SETUP, [job, *ticks], "danlu")
    state = engine.jobs["j"]
    assert state.status == "succeeded" and state.migrations <= 2
    assert state.end_ms is not None and state.end_ms - NOW < 10.1 * H  # on the V100 it moved to, not 10.99 h
    assert summarize(engine, SETUP, "danlu")["migrations"] == state.migrations


def test_no_job_moves_more_than_the_cap() -> None:
    # Many jobs that each gain from every free fast GPU: moves stay bounded per job.
    jobs = [JobRequest(f"j{i}", "u", 1, NOW + i * 7 * 60_000, {"V100": 6 * H, "P100": 7 * H}, seq=i) for i in range(12)]
    engine = simulate(SETUP, jobs, "danlu")
    assert all(s.status == "succeeded" for s in engine.jobs.values())
    assert max(s.migrations for s in engine.jobs.values()) <= MAX_MIGRATIONS
