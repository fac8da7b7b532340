"""One round, two clocks (issue 11, item 9): the simulator's engine and the live server run the same
round (rounds.run_round) over their own state, so the same scenario gives the same decisions in the
same order. Scenario: an interruptible 2-GPU job runs on the only 2 T4s; a high-priority 2-GPU job
arrives; the first gets its notice, makes way, the second runs, and the first resumes and finishes."""

from __future__ import annotations

from danlu.billing import service as billing
from danlu.billing.pricing import Plan, PriceBook
from danlu.compute.reconcile import reconcile
from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.scheduling.engine import Engine
from danlu.scheduling.model import Host, JobRequest
from danlu.scheduling.policies import get_policy
from danlu.scheduling.rounds import RoundReport
from danlu.scheduling.simulator import SimExecutor
from tests.compute.test_races import renter
from tests.fakes import RecordingBackend

MIN = 60_000


def _actions(reports: list[RoundReport], names: dict[str, str]) -> list[tuple[str, str]]:
    out = []
    for r in reports:
        out += [("notice", names[j]) for j in r.preempted] + [("start", names[j]) for j in r.started]
    return out


def _simulated() -> list[tuple[str, str]]:
    clock = FakeClock(0)
    durations = {"A": {"T4": 60 * MIN}, "B": {"T4": 10 * MIN}}
    prices = PriceBook("CNY", {("T4", Plan.ON_DEMAND): 360, ("T4", Plan.INTERRUPTIBLE): 180})
    reports: list[RoundReport] = []
    engine = Engine(
        clock,
        SimExecutor(durations, 30_000),
        (Host("h", "T4", 2, 2),),
        prices,
        get_policy("danlu"),
        notice_ms=MIN,
        on_round=reports.append,
    )
    engine.submit(JobRequest("A", "u", 2, 0, durations["A"], interruptible=True, seq=0))
    engine.tick()
    clock.set(10 * MIN)
    engine.submit(JobRequest("B", "u", 2, 10 * MIN, durations["B"], priority=2, seq=1))
    while (wake := engine.tick()) is not None:
        clock.set(wake)
    assert {j: s.status for j, s in engine.jobs.items()} == {"A": "succeeded", "B": "succeeded"}
    return _actions(reports, {"A": "A", "B": "B"})


def test_the_simulator_and_the_live_server_decide_the_same(platform: Platform, fake_clock: FakeClock) -> None:
    from danlu.scheduling import jobs
    from danlu.scheduling.live import schedule_round

    p = platform
    p.backend = backend = RecordingBackend()
    billing.set_price(p, "T4", "3.60", interruptible="1.80")
    user = renter(p)
    a = jobs.submit(p, user, ["train"], gpus=2, gpu_types=["T4"], est_duration_s=3600, interruptible=True)
    reports = [schedule_round(p)]
    fake_clock.advance(600)
    b = jobs.submit(p, user, ["eval"], gpus=2, gpu_types=["T4"], est_duration_s=600, priority="high")
    reports.append(schedule_round(p))  # A gets its notice
    backend.die(backend.last(), 0, fake_clock.now_ms())  # A checkpoints and exits within it
    reconcile(p)
    reports.append(schedule_round(p))  # A requeued; B starts on its GPUs
    fake_clock.advance(600)
    backend.die(backend.last(), 0, fake_clock.now_ms())  # B finishes
    reconcile(p)
    reports.append(schedule_round(p))  # A resumes
    backend.die(backend.last(), 0, fake_clock.now_ms())
    reconcile(p)
    reports.append(schedule_round(p))
    assert [jobs.show(p, user, j.id).status for j in (a, b)] == ["succeeded", "succeeded"]
    live = _actions(reports, {a.id: "A", b.id: "B"})
    assert live == [("start", "A"), ("notice", "A"), ("start", "B"), ("start", "A")]
    assert live == _simulated()
