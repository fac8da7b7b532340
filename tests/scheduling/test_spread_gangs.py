"""Gangs across hosts of one type (issue 11, item 7).

A gang had to fit on one host, so jobs wider than the largest host never ran and 8-GPU jobs
crowded the few 8-GPU servers. A job that allows it (``spread_ok``) may now start spread over
hosts of one GPU model, but only when no single host has room, at ``spread_slowdown`` x its time.
"""

from __future__ import annotations

from dataclasses import replace

from danlu.billing.pricing import Plan, PriceBook
from danlu.scheduling.core import schedule
from danlu.scheduling.engine import Engine
from danlu.scheduling.model import Allocation, ClusterView, Defer, Host, JobRequest, Preempt, Start
from danlu.scheduling.policies import get_policy
from danlu.scheduling.simulator import SimExecutor, placeable

H = 3_600_000
PRICES = PriceBook("USD", {(m, p): 100 for m in ("V100", "K80") for p in Plan})
DANLU = get_policy("danlu")
HOSTS = (Host("v0", "V100", 4, 4), Host("v1", "V100", 4, 4), Host("k0", "K80", 8, 0))
WIDE = JobRequest("wide", "u", 8, 0, {"V100": 10 * H, "K80": 30 * H}, seq=1, spread_ok=True)


def _view(job: JobRequest, hosts: tuple[Host, ...] = HOSTS, running: tuple[Allocation, ...] = ()) -> ClusterView:
    return ClusterView(H, hosts, (job,), running, PRICES, notice_ms=60_000, spread_slowdown=1.25)


def test_an_8_gpu_gang_spreads_over_two_4_gpu_hosts_at_the_slowdown() -> None:
    [start] = [d for d in schedule(_view(WIDE), DANLU) if isinstance(d, Start)]
    assert (start.host_id, start.gpu_model, start.gpus) == ("v0", "V100", 8)
    assert sorted(start.parts) == [("v0", 4), ("v1", 4)]
    assert start.est_end_ms == H + round(10 * H * 1.25)
    assert "spread over 2 hosts" in start.reason


def test_a_gang_that_does_not_allow_it_stays_on_one_host() -> None:
    decisions = schedule(_view(replace(WIDE, spread_ok=False)), DANLU)
    assert not [d for d in decisions if isinstance(d, Start)]
    assert [(d.job_id, d.reason) for d in decisions if isinstance(d, Defer)] == [
        ("wide", "no host can ever hold this gang")
    ]
    busy = (HOSTS[0], replace(HOSTS[1], free_gpus=2), HOSTS[2])  # 6 V100s free: not enough even spread
    decisions = schedule(_view(WIDE, busy), DANLU)
    assert [(d.job_id, d.reason) for d in decisions if isinstance(d, Defer)] == [
        ("wide", "waiting for enough GPUs of one model across hosts")
    ]


def test_one_host_with_room_beats_a_spread() -> None:
    hosts = (*HOSTS[:2], Host("v2", "V100", 8, 8))
    [start] = [d for d in schedule(_view(WIDE, hosts), DANLU) if isinstance(d, Start)]
    assert (start.host_id, start.parts) == ("v2", ())
    assert start.est_end_ms == H + 10 * H


def test_a_spread_never_takes_gpus_reserved_for_a_blocked_job() -> None:
    # "first" (4 GPUs) cannot start now and reserves v1 from 2 h, when its 2 busy GPUs free up;
    # the 5-GPU gang could spread over v0's 3 + v1's 2 now, but v1's would break that reservation
    hosts = (Host("v0", "V100", 4, 3), Host("v1", "V100", 4, 2))
    running = (Allocation("r0", "u", "v0", "V100", 1, 0, 10 * H), Allocation("r1", "u", "v1", "V100", 2, 0, 2 * H))
    first = JobRequest("first", "u", 4, 0, {"V100": 5 * H}, seq=0)
    wide = replace(WIDE, gpus=5, durations_ms={"V100": 10 * H})
    view = replace(_view(wide, hosts, running), queue=(first, wide))
    decisions = schedule(view, DANLU)
    assert not [d for d in decisions if isinstance(d, Start)]
    assert next((d.job_id, d.until_ms) for d in decisions if isinstance(d, Defer)) == ("first", 2 * H)
    # without the reservation the same gang spreads at once
    alone = schedule(replace(view, queue=(wide,)), DANLU)
    assert [sorted(d.parts) for d in alone if isinstance(d, Start)] == [[("v0", 3), ("v1", 2)]]


def test_the_engine_frees_every_part_and_the_simulator_charges_the_slowdown() -> None:
    from danlu.core.clock import FakeClock

    clock = FakeClock(0)
    executor = SimExecutor({"wide": WIDE.durations_ms}, 0)
    engine = Engine(clock, executor, HOSTS, PRICES, DANLU)
    engine.submit(WIDE)
    engine.tick()
    assert engine.running["wide"].placed == (("v0", 4), ("v1", 4))
    assert engine._free == {"v0": 0, "v1": 0, "k0": 0}
    clock.set(round(10 * H * 1.25))
    engine.tick()
    assert engine.jobs["wide"].status == "succeeded" and engine.jobs["wide"].end_ms == round(12.5 * H)
    assert engine._free == {"v0": 4, "v1": 4, "k0": 0}
    billed = sum(u.gpus * (u.end_ms - u.start_ms) for u in engine.usage_log)
    assert billed == 8 * round(12.5 * H)  # every GPU of every part, for the slower run


def test_a_spread_gang_can_be_preempted_and_frees_the_host_it_is_wanted_on() -> None:
    spread = Allocation("low", "u", "v0", "V100", 8, 0, 100 * H, priority=0, parts=(("v0", 4), ("v1", 4)))
    hosts = (Host("v0", "V100", 4, 0), Host("v1", "V100", 4, 0))
    high = JobRequest("high", "u", 4, 0, {"V100": H}, seq=1, priority=2)
    decisions = schedule(_view(high, hosts, (spread,)), DANLU)
    assert [(d.job_id, d.for_job_id) for d in decisions if isinstance(d, Preempt)] == [("low", "high")]


def test_placeable_counts_a_type_s_hosts_together_only_for_a_spreadable_gang() -> None:
    hosts = HOSTS[:2]
    assert not placeable(hosts, replace(WIDE, spread_ok=False))
    assert placeable(hosts, WIDE)
    assert not placeable(hosts, replace(WIDE, gpus=9))


def test_only_las_never_spreads_so_only_las_is_told_a_wide_gang_cannot_fit() -> None:
    """las places a gang on one host: a gang wider than every host is reported unplaceable there,
    not queued forever. fifo and backfill pool a type's hosts as Gavel's FIFO does (issue 30)."""
    from danlu.scheduling.simulator import SimSetup, simulate, summarize
    from danlu.scheduling.speed import ThroughputTable

    setup = SimSetup(HOSTS[:2], PRICES, 0, ThroughputTable(), "V100")
    wide = replace(WIDE, durations_ms={"V100": H})
    small = JobRequest("small", "u", 1, 1, {"V100": H}, seq=2)
    for name in ("fifo", "backfill", "danlu"):
        engine = simulate(setup, [wide, small], name)
        s = summarize(engine, setup, name)
        assert (s["jobs_completed"], s["jobs_unplaceable"]) == (2, 0), name
        assert engine.jobs["wide"].end_ms is not None and engine.jobs["wide"].first_start_ms is not None
        assert engine.jobs["wide"].end_ms - engine.jobs["wide"].first_start_ms == round(1.25 * H), name
    las = simulate(setup, [wide, small], "las")
    assert summarize(las, setup, "las")["unplaceable"] == ["wide"]
