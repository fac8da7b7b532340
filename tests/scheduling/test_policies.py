"""Policy behaviour on tiny hand-made clusters, and the engine's preempt-notice-resume loop."""

from __future__ import annotations

from dataclasses import replace
from datetime import time
from decimal import Decimal

from danlu.billing.pricing import Plan, PriceBook, Tariff
from danlu.scheduling.core import schedule
from danlu.scheduling.model import PRIORITY_HIGH, PRIORITY_LOW, ClusterView, Defer, Host, JobRequest, Preempt, Start
from danlu.scheduling.policies import POLICIES, batch_horizon
from danlu.scheduling.simulator import SimSetup, simulate
from danlu.scheduling.speed import ThroughputTable

H = 3_600_000
NOW = 1_767_603_600_000  # Monday 2026-01-05 09:00 UTC
PRICES = {
    ("K80", Plan.ON_DEMAND): 92,
    ("V100", Plan.ON_DEMAND): 295,
    ("K80", Plan.INTERRUPTIBLE): 14,
    ("V100", Plan.INTERRUPTIBLE): 84,
}
BOOK = PriceBook("USD", PRICES)


def job(i: int, gpus: int = 1, **kw: object) -> JobRequest:
    base: dict[str, object] = {"durations_ms": {"K80": 4 * H, "V100": H}, "submit_ms": NOW, "user": "u", "seq": i}
    base.update(kw)
    return JobRequest(id=f"j{i}", gpus=gpus, **base)  # type: ignore[arg-type]


def view(hosts: list[Host], queue: list[JobRequest], **kw: object) -> ClusterView:
    return ClusterView(now_ms=NOW, hosts=tuple(hosts), queue=tuple(queue), running=(), prices=BOOK, **kw)  # type: ignore[arg-type]


def starts(decisions: list[object]) -> dict[str, Start]:
    return {d.job_id: d for d in decisions if isinstance(d, Start)}


def test_fifo_head_of_line_blocks_and_backfill_lets_small_jobs_pass() -> None:
    hosts = [Host("v0", "V100", 4, 2)]
    queue = [job(0, gpus=4), job(1, gpus=1, durations_ms={"V100": H})]
    assert starts(schedule(view(hosts, queue), POLICIES["fifo"])) == {}
    from danlu.scheduling.model import Allocation

    running = (Allocation("r", "x", "v0", "V100", 2, NOW - H, NOW + 2 * H),)
    v = ClusterView(now_ms=NOW, hosts=tuple(hosts), queue=tuple(queue), running=running, prices=BOOK)
    assert set(starts(schedule(v, POLICIES["backfill"]))) == {"j1"}  # ends before the 4-GPU reservation
    long_small = job(1, gpus=1, durations_ms={"V100": 5 * H})
    v = ClusterView(now_ms=NOW, hosts=tuple(hosts), queue=(queue[0], long_small), running=running, prices=BOOK)
    assert starts(schedule(v, POLICIES["backfill"])) == {}  # would delay the reserved start: must wait


def test_faster_dearer_gpu_wins_when_it_is_cheaper_per_job() -> None:
    hosts = [Host("k0", "K80", 8, 8), Host("v0", "V100", 4, 4)]
    # 1 h on V100 = 2.95; 4 h on K80 = 3.68: the V100 is cheaper per unit of work
    assert starts(schedule(view(hosts, [job(0)]), POLICIES["danlu-cost"]))["j0"].gpu_model == "V100"
    slow_on_v100 = job(0, durations_ms={"K80": 7 * H // 5, "V100": H})  # K80 1.29 < V100 2.95, 1.4x as long
    assert starts(schedule(view(hosts, [slow_on_v100]), POLICIES["danlu-cost"]))["j0"].gpu_model == "K80"
    # ... but never past the bound a renter can read: 1.5x the fastest plan's time (K80 1.84, 2x as long)
    twice_as_long = job(0, durations_ms={"K80": 2 * H, "V100": H})
    assert starts(schedule(view(hosts, [twice_as_long]), POLICIES["danlu-cost"]))["j0"].gpu_model == "V100"


def test_gang_goes_on_one_host_or_waits() -> None:
    hosts = [Host("v0", "V100", 4, 2), Host("v1", "V100", 4, 2)]
    for policy in POLICIES.values():
        assert starts(schedule(view(hosts, [job(0, gpus=4, durations_ms={"V100": H})]), policy)) == {}


def test_quota_defers_with_a_reason() -> None:
    hosts = [Host("v0", "V100", 4, 4)]
    decisions = schedule(view(hosts, [job(0, gpus=2), job(1, gpus=2)], quotas_gpus={"u": 3}), POLICIES["danlu"])
    assert set(starts(decisions)) == {"j0"}
    assert any(isinstance(d, Defer) and "quota" in d.reason for d in decisions)


def test_high_priority_job_preempts_interruptible_work_with_notice() -> None:
    from danlu.scheduling.model import Allocation

    hosts = [Host("v0", "V100", 4, 0)]
    running = (Allocation("spot", "x", "v0", "V100", 4, NOW - H, NOW + 10 * H, PRIORITY_LOW, interruptible=True),)
    urgent = job(0, gpus=2, durations_ms={"V100": H}, priority=PRIORITY_HIGH)
    v = ClusterView(now_ms=NOW, hosts=tuple(hosts), queue=(urgent,), running=running, prices=BOOK, notice_ms=90_000)
    decisions = schedule(v, POLICIES["danlu"])
    preempts = [d for d in decisions if isinstance(d, Preempt)]
    assert [(p.job_id, p.notice_deadline_ms) for p in preempts] == [("spot", NOW + 90_000)]
    assert schedule(v, POLICIES["backfill"]) and not any(
        isinstance(d, Preempt) for d in schedule(v, POLICIES["backfill"])
    )


def test_deadline_aware_deferral_to_off_peak() -> None:
    night = Tariff("night", frozenset(range(7)), time(0), time(8), Decimal("0.5"), synthetic=True)
    book = PriceBook("USD", PRICES, (night,))
    hosts = [Host("v0", "V100", 4, 4)]
    relaxed = job(0, durations_ms={"V100": H}, deadline_ms=NOW + 24 * H)
    tight = job(1, durations_ms={"V100": H}, deadline_ms=NOW + 3 * H)
    v = ClusterView(now_ms=NOW, hosts=tuple(hosts), queue=(relaxed, tight), running=(), prices=book)
    decisions = schedule(v, POLICIES["danlu"])
    assert set(starts(decisions)) == {"j1"}
    deferred = [d for d in decisions if isinstance(d, Defer) and d.off_peak]
    assert [(d.job_id, d.until_ms) for d in deferred] == [("j0", NOW + 15 * H)]  # Tuesday 00:00 UTC


def test_engine_preempts_with_notice_resumes_and_bills_the_notice_as_interruptible() -> None:
    hosts = (Host("v0", "V100", 4, 4),)
    setup = SimSetup(hosts, BOOK, NOW, ThroughputTable(), "V100")
    spot = JobRequest("spot", "x", 4, NOW, {"V100": 10 * H}, PRIORITY_LOW, interruptible=True, seq=0)
    vip = JobRequest("vip", "y", 4, NOW + H, {"V100": H}, PRIORITY_HIGH, seq=1)
    engine = simulate(setup, [spot, vip], "danlu", notice_ms=60_000, restart_overhead_ms=0)
    assert engine.jobs["spot"].status == "succeeded" and engine.jobs["vip"].status == "succeeded"
    assert engine.jobs["spot"].preemptions == 1
    assert engine.jobs["vip"].first_start_ms == NOW + H + 60_000  # exactly after the notice
    spot_usage = [u for u in engine.usage_log if u.job_id == "spot"]
    worked = sum(u.end_ms - u.start_ms for u in spot_usage)
    assert worked == 10 * H  # resumed from its checkpoint: no work lost, none repeated
    assert all(u.plan is Plan.INTERRUPTIBLE for u in spot_usage)
    assert sum(u.cost_minor for u in spot_usage) == 84 * 4 * 10  # exact: whole hours


def test_a_resume_pays_the_restart_overhead_once() -> None:
    hosts = (Host("v0", "V100", 4, 4),)
    setup = SimSetup(hosts, BOOK, NOW, ThroughputTable(), "V100")
    spot = JobRequest("spot", "x", 4, NOW, {"V100": 10 * H}, PRIORITY_LOW, interruptible=True, seq=0)
    vip = JobRequest("vip", "y", 4, NOW + H, {"V100": H}, PRIORITY_HIGH, seq=1)
    engine = simulate(setup, [spot, vip], "danlu", notice_ms=60_000, restart_overhead_ms=45_000)
    worked = sum(u.end_ms - u.start_ms for u in engine.usage_log if u.job_id == "spot")
    assert worked == 10 * H + 45_000  # the lost warm-up is real GPU time, and billed


def test_a_running_job_migrates_with_notice_to_a_faster_type_that_frees_and_finishes() -> None:
    # "slow" starts on the K80 because the V100 is busy for another hour; when the V100 frees,
    # the engine moves it there (noticed stop, requeue, resume) and it finishes far sooner.
    hosts = (Host("k0", "K80", 1, 1), Host("v0", "V100", 1, 1))
    setup = SimSetup(hosts, BOOK, NOW, ThroughputTable(), "V100")
    busy = JobRequest("busy", "x", 1, NOW, {"V100": H}, seq=0)
    slow = JobRequest("slow", "y", 1, NOW + 1, {"K80": 8 * H, "V100": 4 * H}, seq=1)
    engine = simulate(setup, [busy, slow], "danlu", notice_ms=60_000, restart_overhead_ms=30_000)
    state = engine.jobs["slow"]
    assert state.status == "succeeded" and state.migrations == 1 and state.preemptions == 0
    runs = [(u.gpu_model, u.start_ms, u.end_ms) for u in engine.usage_log if u.job_id == "slow"]
    assert [m for m, _, _ in runs[:1]] == ["K80"] and runs[-1][0] == "V100"
    assert runs[-1][1] >= runs[0][2]  # never on two types at once: the move waits for the stop
    assert state.end_ms is not None and state.end_ms - NOW < 5 * H  # vs 8 h on the K80, 5 h waiting


def test_closed_batch_runs_longest_first_but_a_growing_queue_stays_shortest_first() -> None:
    from danlu.scheduling.policies import batch_horizon

    hosts = [Host("v0", "V100", 1, 1)]
    short = job(0, durations_ms={"V100": H})
    long = job(1, durations_ms={"V100": 3 * H})
    # fresh arrivals, backlog (4 h) shorter than twice the longest job (6 h): shortest first
    fresh = view(hosts, [short, long])
    assert batch_horizon(fresh, POLICIES["danlu"]) is None
    assert set(starts(schedule(fresh, POLICIES["danlu"]))) == {"j0"}
    # the same queue after nothing has arrived for as long as its longest job: a closed batch,
    # longest first so the last finish is early
    quiet = ClusterView(now_ms=NOW + 3 * H, hosts=tuple(hosts), queue=(short, long), running=(), prices=BOOK)
    batch = batch_horizon(quiet, POLICIES["danlu"])
    assert batch is not None and batch.horizon_ms == NOW + 3 * H + 4 * H
    assert set(starts(schedule(quiet, POLICIES["danlu"]))) == {"j1"}
    # a deep backlog (>= 2 x the longest job) is a batch too; the switch can be turned off
    deep = view(hosts, [job(i, durations_ms={"V100": H}) for i in range(6)] + [job(9, durations_ms={"V100": 3 * H})])
    assert set(starts(schedule(deep, POLICIES["danlu"]))) == {"j9"}
    off = replace(POLICIES["danlu"], batch_lpt=False)
    assert set(starts(schedule(deep, off))) == {"j0"}


def test_in_a_closed_batch_slow_gpus_go_to_the_jobs_that_lose_least_on_them() -> None:
    hosts = [Host("k0", "K80", 1, 1), Host("v0", "V100", 1, 1)]
    # a closed batch (nothing new for 10 h); both finish soonest on the V100, but j0 loses 4x on
    # a K80 and j1 only 4 %: j1 (longest first) takes the K80, which leaves the V100 to j0
    j0 = job(0, durations_ms={"K80": 8 * H, "V100": 2 * H}, submit_ms=NOW - 10 * H)
    j1 = job(1, durations_ms={"K80": 26 * H // 10, "V100": 25 * H // 10}, submit_ms=NOW - 10 * H)
    picks = starts(schedule(view(hosts, [j0, j1]), POLICIES["danlu"]))
    assert (picks["j0"].gpu_model, picks["j1"].gpu_model) == ("V100", "K80")


def test_the_simulator_bills_whole_seconds_like_the_live_meter() -> None:
    """1.5 s of one GPU at 36.00/h: 1 fen, as the live meter charges (the simulator said 2 before
    it rated through danlu.billing.rating)."""
    book = PriceBook("CNY", {("T4", Plan.ON_DEMAND): 3600})
    setup = SimSetup((Host("t0", "T4", 1, 1),), book, NOW, ThroughputTable(), "T4")
    short = JobRequest("short", "u", 1, NOW, {"T4": 1_500}, seq=0)
    engine = simulate(setup, [short], "fifo")
    assert engine.jobs["short"].status == "succeeded"
    assert [(u.end_ms - u.start_ms, u.cost_minor) for u in engine.usage_log] == [(1_500, 1)]


def test_a_deep_backlog_from_an_open_arrival_stream_stays_shortest_first() -> None:
    """Issue 11, item 2: "deep" means a bulk submission, not any long queue. The same deep queue
    that arrived at once is a closed batch (longest first); arrived over the last 4 h, one job
    every 35 min with the last 5 min ago, it is an open stream and stays shortest first."""
    hosts = [Host("v0", "V100", 1, 1)]
    bulk = [job(i, durations_ms={"V100": H}, submit_ms=NOW) for i in range(6)]
    bulk.append(job(9, durations_ms={"V100": 3 * H}, submit_ms=NOW))
    assert batch_horizon(view(hosts, bulk), POLICIES["danlu"]) is not None
    stream = [replace(j, submit_ms=NOW - 5 * 60_000 - k * 35 * 60_000) for k, j in enumerate(bulk)]
    assert batch_horizon(view(hosts, stream), POLICIES["danlu"]) is None
    assert set(starts(schedule(view(hosts, stream), POLICIES["danlu"]))) == {"j5"}  # a short one (the oldest), not j9


def test_cost_mode_defers_to_a_cheaper_window_only_within_the_readable_bound() -> None:
    # Issue 11: with an off-peak window every job once waited for exactly 00:00 (492 of 951). Now a
    # cheaper window counts only while the job still ends within 1.5x its fastest plan's time.
    night = Tariff("night", frozenset(range(7)), time(0), time(8), Decimal("0.6"))
    book = PriceBook("USD", PRICES, (night,))
    hosts = (Host("v0", "V100", 4, 4),)
    evening = NOW + 14 * H + 30 * 60_000  # Monday 23:30: the window opens in 30 min
    two_hours = job(0, durations_ms={"V100": 2 * H})  # may wait up to 1 h (ends within 3 h)
    one_hour = job(1, durations_ms={"V100": H})  # may wait up to 30 min
    for j, deferred in ((two_hours, True), (one_hour, True)):
        v = ClusterView(now_ms=evening, hosts=hosts, queue=(j,), running=(), prices=book)
        ds = schedule(v, POLICIES["danlu-cost"])
        assert any(isinstance(d, Defer) and d.off_peak and d.until_ms == NOW + 15 * H for d in ds) == deferred
    earlier = NOW + 13 * H  # 22:00: two hours before the window
    for j in (two_hours, one_hour):  # both would end past 1.5x their time by waiting: they start now
        v = ClusterView(now_ms=earlier, hosts=hosts, queue=(j,), running=(), prices=book)
        assert [d.job_id for d in schedule(v, POLICIES["danlu-cost"]) if isinstance(d, Start)] == [j.id]
