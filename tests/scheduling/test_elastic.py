"""Issue 30, item 2: elastic jobs. A job that may run at several GPU counts starts at the count that
ends it soonest (within the slack), grows into GPUs nobody queued can use, gives GPUs back so a
shorter waiting job starts, never runs below its minimum, and keeps its progress across a resize."""

from __future__ import annotations

from dataclasses import replace

from danlu.billing.pricing import Plan, PriceBook
from danlu.scheduling.core import schedule
from danlu.scheduling.model import (
    PRIORITY_HIGH,
    PRIORITY_LOW,
    Allocation,
    ClusterView,
    Defer,
    Host,
    JobRequest,
    Preempt,
    Start,
)
from danlu.scheduling.policies import POLICIES
from danlu.scheduling.simulator import SimSetup, simulate, summarize
from danlu.scheduling.speed import ThroughputTable

NOW = 1_767_600_000_000
H = 3_600_000
BOOK = PriceBook("USD", {("V100", Plan.ON_DEMAND): 300, ("K80", Plan.ON_DEMAND): 90})
DANLU = POLICIES["danlu"]


def elastic(job_id: str, counts: dict[int, int], *, model: str = "V100", submit: int = NOW, seq: int = 0) -> JobRequest:
    """A job that may run at each count of ``counts`` (GPUs -> whole run time there), queued at its minimum."""
    by_count = {n: {model: ms} for n, ms in counts.items()}
    low = min(counts)
    return JobRequest(job_id, "u", low, submit, by_count[low], seq=seq, counts_ms=by_count)


def view(hosts: tuple[Host, ...], queue: tuple[JobRequest, ...], running: tuple[Allocation, ...] = ()) -> ClusterView:
    return ClusterView(NOW, hosts, queue, running, BOOK, restart_overhead_ms=30_000)


# ResNet-like scaling: nearly linear to 4 GPUs, little more at 8
SCALING = {1: 8 * H, 2: 4 * H, 4: 2 * H + 6 * 60_000, 8: 2 * H}


def test_an_elastic_job_starts_at_the_smallest_count_within_the_slack_of_the_earliest_finish() -> None:
    decisions = schedule(view((Host("h", "V100", 8, 8),), (elastic("e", SCALING),)), DANLU)
    (start,) = decisions
    # 8 GPUs would end it at 2 h, 4 GPUs at 2.1 h: within 10 %, so 4 GPUs (the other 4 stay free)
    assert isinstance(start, Start) and start.gpus == 4
    assert start.est_end_ms == NOW + SCALING[4]


def test_an_elastic_job_takes_what_is_free_but_never_less_than_its_minimum() -> None:
    busy = Allocation("other", "v", "h", "V100", 6, NOW - H, NOW + 5 * H)
    roomy = schedule(view((Host("h", "V100", 8, 2),), (elastic("e", SCALING),), (busy,)), DANLU)
    assert [(type(d), getattr(d, "gpus", None)) for d in roomy] == [(Start, 2)]  # 4 would be better: 2 are free
    at_least_two = elastic("e", {n: ms for n, ms in SCALING.items() if n >= 2})
    tight = Allocation("other", "v", "h", "V100", 7, NOW - H, NOW + 5 * H)
    decisions = schedule(view((Host("h", "V100", 8, 1),), (at_least_two,), (tight,)), DANLU)
    assert not any(isinstance(d, Start) for d in decisions)  # one free GPU is below its minimum of 2
    assert any(isinstance(d, Defer) and d.job_id == "e" for d in decisions)


def running_elastic(gpus: int, started: int, *, end_in: int = 6 * H) -> Allocation:
    counts = {n: {"V100": ms} for n, ms in SCALING.items()}
    return Allocation(
        "e",
        "u",
        "h",
        "V100",
        gpus,
        started,
        NOW + end_in,
        durations_ms=counts[gpus],
        checkpoints=True,
        counts_ms=counts,
    )


def test_a_running_elastic_job_grows_into_idle_gpus_after_its_cooldown_only() -> None:
    hosts = (Host("h", "V100", 8, 7),)
    fresh = running_elastic(1, NOW - 30 * 60_000 + 60_000)  # ClusterView.resize_cooldown_ms: 30 min
    assert schedule(view(hosts, (), (fresh,)), DANLU) == []  # it has run 29 min at this count: not yet
    settled = running_elastic(1, NOW - 2 * H)
    (grow,) = schedule(view(hosts, (), (settled,)), DANLU)
    assert isinstance(grow, Preempt) and grow.job_id == grow.for_job_id == "e"
    assert grow.resize_to == 4 and grow.migrate_to is None  # 4 GPUs: 8 would gain < 10 % more
    assert grow.notice_deadline_ms == NOW + 60_000
    assert grow.reason.startswith("growing from 1 to 4 GPUs on idle GPUs")


def test_a_waiting_shorter_job_takes_lent_gpus_back_but_a_longer_one_does_not() -> None:
    hosts = (Host("h", "V100", 8, 0),)
    lender = running_elastic(8, NOW - H, end_in=3 * H)
    short = JobRequest("s", "w", 4, NOW, {"V100": H}, seq=1)
    decisions = schedule(view(hosts, (short,), (lender,)), DANLU)
    shrink = [d for d in decisions if isinstance(d, Preempt)]
    assert [(d.job_id, d.resize_to, d.for_job_id) for d in shrink] == [("e", 4, "s")]  # just enough: 8 -> 4
    assert "shrinking from 8 to 4 GPUs so that job s can start" in shrink[0].reason
    assert any(isinstance(d, Defer) and d.job_id == "s" and d.until_ms == NOW + 60_000 for d in decisions)
    # lent GPUs go back without waiting for the cooldown (that is for growing): a lender started a minute ago
    fresh = running_elastic(8, NOW - 60_000, end_in=3 * H)
    assert [d.resize_to for d in schedule(view(hosts, (short,), (fresh,)), DANLU) if isinstance(d, Preempt)] == [4]
    long = JobRequest("l", "w", 4, NOW, {"V100": 5 * H}, seq=1)  # it would still run after the lender ends
    assert not any(isinstance(d, Preempt) for d in schedule(view(hosts, (long,), (lender,)), DANLU))


def test_rigid_jobs_are_never_resized_beside_elastic_ones() -> None:
    rigid = Allocation("r", "u", "h", "V100", 1, NOW - 2 * H, NOW + 6 * H, durations_ms={"V100": 8 * H})
    elastic_one = replace(running_elastic(1, NOW - 2 * H), host_id="g")
    hosts = (Host("h", "V100", 8, 7), Host("g", "V100", 8, 7))
    (grow,) = schedule(view(hosts, (), (rigid, elastic_one)), DANLU)  # grow runs: only the elastic job grows
    assert grow.job_id == "e"
    short = JobRequest("s", "w", 8, NOW, {"V100": H}, seq=1)
    full = (Host("h", "V100", 8, 0),)
    wide_rigid = replace(rigid, gpus=8, durations_ms={"V100": 8 * H})
    assert not any(isinstance(d, Preempt) for d in schedule(view(full, (short,), (wide_rigid,)), DANLU))


def test_a_shrink_follows_the_rules_of_a_preemption_and_each_job_gets_one_notice() -> None:
    full = (Host("h", "V100", 8, 0),)
    lender = replace(running_elastic(8, NOW - H, end_in=3 * H), priority=PRIORITY_HIGH)
    low = JobRequest("s", "w", 4, NOW, {"V100": H}, seq=1, priority=PRIORITY_LOW)
    assert not any(isinstance(d, Preempt) for d in schedule(view(full, (low,), (lender,)), DANLU))
    on_demand = running_elastic(8, NOW - H, end_in=3 * H)
    cheap = JobRequest("s", "w", 4, NOW, {"V100": H}, seq=1, interruptible=True)
    assert not any(isinstance(d, Preempt) for d in schedule(view(full, (cheap,), (on_demand,)), DANLU))
    # shrunk for one waiting job, then not preempted for another in the same round
    spot = replace(running_elastic(8, NOW - H, end_in=3 * H), interruptible=True)
    a = JobRequest("a", "w", 4, NOW, {"V100": H}, seq=1, interruptible=True)
    b = JobRequest("b", "w", 8, NOW, {"V100": 2 * H}, seq=2)
    notices = [d for d in schedule(view(full, (a, b), (spot,)), DANLU) if isinstance(d, Preempt)]
    assert len(notices) == 1 and notices[0].job_id == "e"


def test_no_shrink_where_the_host_has_room_or_where_it_costs_more_than_it_saves() -> None:
    lender = running_elastic(4, NOW - H, end_in=3 * H)
    roomy = (Host("h", "V100", 8, 4),)
    waiting = JobRequest("s", "w", 4, NOW, {"V100": H}, seq=1)
    assert not any(isinstance(d, Preempt) for d in schedule(view(roomy, (waiting,), (lender,)), DANLU))
    # the lender would lose more (its 2.9 h left at 4 GPUs become ~11 h at 1) than the job waits (its start in 1 h)
    almost_done = running_elastic(4, NOW - H, end_in=3 * H)
    other = Allocation("o", "v", "h", "V100", 4, NOW - H, NOW + H)
    three = JobRequest("t", "w", 3, NOW, {"V100": H // 2}, seq=1)
    decisions = schedule(view((Host("h", "V100", 8, 0),), (three,), (almost_done, other)), DANLU)
    assert not any(isinstance(d, Preempt) for d in decisions)


def test_the_cost_mode_grows_elastic_jobs_but_never_moves_them_to_another_model() -> None:
    counts = {n: {"V100": ms, "K80": 3 * ms} for n, ms in SCALING.items()}
    on_k80 = Allocation(
        "e", "u", "k", "K80", 1, NOW - 2 * H, NOW + 20 * H, durations_ms=counts[1], checkpoints=True, counts_ms=counts
    )
    hosts = (Host("k", "K80", 8, 7), Host("v", "V100", 8, 8))
    (grow,) = schedule(view(hosts, (), (on_k80,)), POLICIES["danlu-cost"])
    assert grow.migrate_to is None and (grow.resize_to or 0) > 1  # danlu-cost does not migrate
    moved = schedule(view(hosts, (), (on_k80,)), DANLU)
    assert [(d.migrate_to, d.resize_to) for d in moved if isinstance(d, Preempt)] == [("V100", 4)]


def test_an_elastic_job_is_never_offered_more_than_its_quota_leaves() -> None:
    quota = replace(view((Host("h", "V100", 8, 8),), (elastic("e", SCALING),)), quotas_gpus={"u": 2})
    (start,) = schedule(quota, DANLU)
    assert isinstance(start, Start) and start.gpus == 2
    running = replace(running_elastic(1, NOW - 2 * H), user="u")
    capped = replace(view((Host("h", "V100", 8, 7),), (), (running,)), quotas_gpus={"u": 2})
    (grow,) = schedule(capped, DANLU)
    assert isinstance(grow, Preempt) and grow.resize_to == 2


def test_a_resized_job_keeps_its_progress_and_is_billed_for_what_it_held() -> None:
    """Simulated end to end: j starts alone on 1 of 2 GPUs (a rigid job holds the other for 1 h), grows
    to 2 GPUs when it frees, and ends when its work is done: 1 h at 1 GPU (1/8 of it), then 7/8 of 4 h
    at 2 GPUs after the notice and the restart overhead."""
    hosts = (Host("h", "V100", 2, 2),)
    book = PriceBook("USD", {("V100", Plan.ON_DEMAND): 360})
    setup = SimSetup(hosts, book, NOW, ThroughputTable(), "V100")
    job = JobRequest("j", "u", 1, NOW + 1, {"V100": 8 * H}, seq=1, counts_ms={1: {"V100": 8 * H}, 2: {"V100": 4 * H}})
    blocker = JobRequest("b", "u", 1, NOW, {"V100": H}, seq=0)
    engine = simulate(setup, [blocker, job], "danlu", notice_ms=60_000, restart_overhead_ms=30_000)
    state = engine.jobs["j"]
    assert state.status == "succeeded" and state.resizes == 1
    # (GPUs, start, end) of each billed interval (a notice period is its own, at the interruptible price)
    spans = [(u.gpus, u.start_ms - NOW, u.end_ms - NOW) for u in engine.usage_log if u.job_id == "j"]
    assert [g for g, _, _ in spans] == [1, 1, 2]
    (_, first_start, noticed), (_, _, stopped), (_, restart, end) = spans
    assert first_start == 60_000 and noticed == H  # started at the first round; noticed when the blocker ended
    assert stopped == noticed + 60_000 and restart == stopped  # the notice ran; it restarted at 2 GPUs at once
    left = 1 - (stopped - first_start) / (8 * H)  # it trained through its notice, at 1 GPU
    assert end == (state.end_ms or 0) - NOW
    assert abs(end - (restart + 30_000 + left * 4 * H)) <= 1_000  # the overhead, then the rest at 2 GPUs
    # billed for exactly what it held: GPU-seconds of every interval at the listed price
    # billed for what it held, at 0.1 a GPU-second (this book has no interruptible price, so the notice
    # is billed on demand too): 1 GPU from 60 s to the end of its notice (3,600 GPU-s), then 2 GPUs
    billed = [(u.gpus, u.cost_minor) for u in engine.usage_log if u.job_id == "j"]
    assert billed[:2] == [(1, 354), (1, 6)]
    grown = engine.usage_log[-1]
    assert (
        grown.job_id == "j"
        and grown.gpus == 2
        and abs(grown.cost_minor - 2 * (grown.end_ms - grown.start_ms) / 10_000) <= 1
    )
    assert summarize(engine, setup, "danlu")["resizes"] == 1


def test_elastic_jobs_on_gavel48_finish_everything_with_resizes_counted() -> None:
    """Every job of gavel48's closed batch finishes with elasticity on, each job always within its
    range, and the average JCT falls (the benchmark prints by how much)."""
    from pathlib import Path

    import pytest

    from danlu.scheduling.replay import run_simulation
    from danlu.scheduling.scenario import load_scenario

    data = Path(__file__).resolve().parents[3] / "shared" / "data"
    if not (data / "scenarios" / "gavel48.json").is_file():
        pytest.skip("the shared data folder (../shared/data) is not here")
    scenario = load_scenario(data / "scenarios" / "gavel48.json")
    trace = data / "gavel" / "traces" / "minimize_makespan.trace"
    kwargs = {"tariffs": False, "interruptible": False, "notice_s": 60}
    (fixed,) = run_simulation(scenario, trace, ["danlu"], **kwargs)  # type: ignore[arg-type]
    (grown,) = run_simulation(scenario, trace, ["danlu"], elastic=True, **kwargs)  # type: ignore[arg-type]
    assert grown["jobs_completed"] == fixed["jobs_completed"] == 100
    assert grown["elastic"] > 0 and grown["resizes"] > 0
    assert grown["avg_jct_h"] < fixed["avg_jct_h"]


def test_danlu_simulate_elastic_on_the_demo() -> None:
    """``danlu simulate --elastic``: the JSON counts the elastic jobs and their resizes; the table says
    what elastic means."""
    import json

    import typer
    from typer.testing import CliRunner

    from danlu.cli import simulate_cmds

    app = typer.Typer()
    simulate_cmds.register(app)

    @app.command("noop")
    def noop() -> None:  # a second command keeps Typer's sub-command parsing
        """unused"""

    runner = CliRunner()
    out = runner.invoke(app, ["simulate", "--demo", "--policies", "danlu", "--elastic", "--json"])
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.stdout)
    assert row["jobs_completed"] == 40 and row["elastic"] == 40 and row["resizes"] > 0
    fixed = runner.invoke(app, ["simulate", "--demo", "--policies", "danlu", "--json"])
    (rigid,) = json.loads(fixed.stdout)
    assert rigid["elastic"] == 0 and rigid["resizes"] == 0
    table = runner.invoke(app, ["simulate", "--demo", "--policies", "danlu", "--elastic"], env={"COLUMNS": "250"})
    assert table.exit_code == 0 and "40 job(s) ran elastic" in table.output


def test_a_job_whose_new_shape_was_taken_meanwhile_restarts_in_the_shape_that_fits() -> None:
    """j is told to grow to 2 GPUs; during its (3 min) notice a new job takes the second GPU. j does not wait for
    it: it restarts on its own GPU at once (the engine offers every count again when the decided one does not fit)."""
    hosts = (Host("h", "V100", 2, 2),)
    setup = SimSetup(hosts, PriceBook("USD", {("V100", Plan.ON_DEMAND): 360}), NOW, ThroughputTable(), "V100")
    job = JobRequest("j", "u", 1, NOW + 1, {"V100": 8 * H}, seq=1, counts_ms={1: {"V100": 8 * H}, 2: {"V100": 4 * H}})
    blocker = JobRequest("b", "u", 1, NOW, {"V100": H}, seq=0)
    late = JobRequest("c", "v", 1, NOW + H + 30_000, {"V100": 2 * H}, seq=2)
    engine = simulate(setup, [blocker, job, late], "danlu", notice_ms=180_000, restart_overhead_ms=30_000)
    spans = sorted((u.start_ms - NOW, u.end_ms - NOW, u.gpus) for u in engine.usage_log if u.job_id == "j")
    assert engine.jobs["j"].resizes >= 1 and engine.jobs["j"].status == "succeeded"  # (it grows again once c ends)
    stopped = H + 180_000
    assert [g for start, _, g in spans if start >= stopped][:1] == [1]  # it restarted at 1 GPU
    restart = min(start for start, _, _ in spans if start >= stopped)
    assert restart - stopped <= 60_000  # within one round, not after PIN_MS
