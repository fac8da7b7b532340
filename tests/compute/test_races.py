"""Races found in review, pinned on SQLite and PostgreSQL with a recording backend and a fake clock:
actions landing while a process is being launched, double starts, and the end of a notice period."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from danlu.accounts.service import create_user
from danlu.backend import RunSpec
from danlu.billing import service as billing
from danlu.compute import instances
from danlu.compute import storage as compute_storage
from danlu.compute.reconcile import meter_all, reconcile
from danlu.compute.views import show
from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.db.models import AllocationRow, Gpu, Instance, User
from tests.fakes import RecordingBackend


@pytest.fixture
def p(platform: Platform) -> Platform:
    platform.backend = RecordingBackend()
    billing.set_price(platform, "T4", "3.60", interruptible="1.80")
    billing.set_price(platform, "A100-80GB", "36.00")
    return platform


def renter(p: Platform, topup: str = "100.00") -> User:
    with p.db.write() as s:
        user, _ = create_user(s, "rae", 0)
        s.expunge(user)
    billing.admin_topup(p, "rae", topup, "seed")
    return user


def free_gpus(p: Platform) -> int:
    with p.db.read() as s:
        return len(s.query(Gpu).filter(Gpu.allocation_id.is_(None)).all())


def test_destroy_during_launch_kills_the_process(p: Platform, monkeypatch: pytest.MonkeyPatch) -> None:
    user = renter(p)
    executor = p.backend
    assert isinstance(executor, RecordingBackend)
    original = executor.launch

    def launch_then_rm(spec: RunSpec) -> str:
        handle = original(spec)
        instances.destroy(p, user, spec.run_id)  # `rm` lands while the run is being prepared
        return handle

    monkeypatch.setattr(executor, "launch", launch_then_rm)
    view = instances.rent(p, user, "T4", 1, ["sleep", "1000"])
    assert view.status == "destroyed"  # the rent reports the instance is gone (its record, read-only)
    handle = executor.last()
    assert (handle, "kill") in executor.signals, "the prepared run must be killed"
    assert handle not in executor.started, "and its command never let go"
    assert free_gpus(p) == 4


def test_balance_running_out_during_launch_stops_the_new_rental(p: Platform, fake_clock: FakeClock) -> None:
    user = renter(p, topup="1.00")
    instances.rent(p, user, "A100-80GB", 1, ["x"])  # 1 fen/s, 100 fen of balance
    fake_clock.advance(seconds=90)
    meter_all(p)  # 10 fen left: enough for a minute of T4
    fake_clock.advance(seconds=15)
    executor = p.backend
    assert isinstance(executor, RecordingBackend)
    original = executor.launch

    def launch_while_metered(spec: RunSpec) -> str:
        handle = original(spec)
        meter_all(p)  # the control loop runs out the balance while this run is being prepared
        return handle

    executor.launch = launch_while_metered  # type: ignore[method-assign]
    t4 = instances.rent(p, user, "T4", 1, ["y"])
    assert t4.status == "stopped" and "balance exhausted" in t4.status_reason
    fake_clock.advance(seconds=3600)
    reconcile(p)
    meter_all(p)
    assert billing.balance(p, user).balance_minor == 0
    assert show(p, user, t4.id).cost_minor == 0


def test_two_concurrent_starts_launch_once(p: Platform) -> None:
    user = renter(p)
    inst = instances.rent(p, user, "T4", 1, ["x"])
    instances.stop(p, user, inst.id)
    executor = p.backend
    assert isinstance(executor, RecordingBackend)
    executor.die(executor.last())
    reconcile(p)
    launched_before = len(executor.launched)
    results: list[str] = []

    def start() -> None:
        try:
            results.append(instances.start(p, user, inst.id).status)
        except Exception as exc:
            results.append(type(exc).__name__)

    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["Conflict", "running"], results
    assert len(executor.launched) == launched_before + 1
    assert free_gpus(p) == 3
    with p.db.read() as s:
        open_allocs = s.query(AllocationRow).filter(AllocationRow.ended_at_ms.is_(None)).count()
    assert open_allocs == 1


def test_preemption_notice_is_billed_until_the_process_ended(p: Platform, fake_clock: FakeClock) -> None:
    from danlu.scheduling.live import preempt_rental

    user = renter(p)
    inst = instances.rent(p, user, "T4", 1, ["nb"], interruptible=True)
    fake_clock.advance(seconds=100)
    preempt_rental(p, inst.id, fake_clock.now_ms() + 60_000, "test")
    executor = p.backend
    assert isinstance(executor, RecordingBackend)
    executor.die(executor.last(), code=0, at_ms=fake_clock.now_ms() + 5_000)  # it saved and exited 5 s in
    fake_clock.advance(seconds=3600)  # the loop (or a restarted server) notices an hour later
    reconcile(p)
    view = show(p, user, inst.id)
    assert view.status == "stopped"
    assert view.billed_seconds == 105  # 100 s of rental + 5 s of notice, not an hour


def test_cancel_while_a_job_run_is_launching_takes_effect(p: Platform) -> None:
    from danlu.scheduling import jobs
    from danlu.scheduling.live import schedule_round

    user = renter(p)
    job = jobs.submit(p, user, ["train"], gpus=1, gpu_types=["T4"])
    executor = p.backend
    assert isinstance(executor, RecordingBackend)
    original = executor.launch

    def launch_then_cancel(spec: RunSpec) -> str:
        handle = original(spec)
        assert jobs.cancel(p, user, job.id).status == "running"  # the run is still pending
        return handle

    executor.launch = launch_then_cancel  # type: ignore[method-assign]
    assert schedule_round(p).started == [job.id]
    assert executor.signals[-1] == (executor.last(), "kill")  # the prepared run is killed …
    assert executor.last() not in executor.started  # … and its command never let go
    assert free_gpus(p) == 4
    schedule_round(p)  # the job layer sees its run end
    assert jobs.show(p, user, job.id).status == "cancelled"


def test_cancel_of_a_job_whose_launch_was_orphaned_stops_it_once_running(p: Platform) -> None:
    """The cancel lands while another process launches the run: the job layer stops the run as
    soon as it sees it running (settle_runs), not the instance layer calling up into jobs."""
    from danlu.scheduling import jobs
    from danlu.scheduling.live import schedule_round

    user = renter(p)
    job = jobs.submit(p, user, ["train"], gpus=1, gpu_types=["T4"])
    executor = p.backend
    assert isinstance(executor, RecordingBackend)
    original = executor.launch

    def launch_then_cancel_elsewhere(spec: RunSpec) -> str:
        handle = original(spec)
        executor.launching_now.discard(spec.run_id)  # as if another server were launching it
        p.launches.discard(spec.run_id)
        assert jobs.cancel(p, user, job.id).status == "running"
        return handle

    executor.launch = launch_then_cancel_elsewhere  # type: ignore[method-assign]
    assert schedule_round(p).started == [job.id]
    assert executor.last() in executor.started
    schedule_round(p)
    assert executor.signals[-1] == (executor.last(), "term")
    executor.die(executor.last())
    reconcile(p)
    schedule_round(p)
    assert jobs.show(p, user, job.id).status == "cancelled"
    assert free_gpus(p) == 4


def test_a_verdict_on_an_old_run_never_touches_the_new_one(p: Platform) -> None:
    """reconcile judged run 1 ended; before it applied that, the instance was started again (run 2).
    The stale verdict must change nothing and kill nothing (issue 8, item 3)."""
    from danlu.backend import RunState
    from danlu.compute.reconcile import _finish

    user = renter(p)
    inst = instances.rent(p, user, "T4", 1, ["x"])
    backend = p.backend
    assert isinstance(backend, RecordingBackend)
    first = backend.last()
    instances.stop(p, user, inst.id)
    backend.die(first)
    reconcile(p)
    assert instances.start(p, user, inst.id).status == "running"
    second = backend.last()
    assert _finish(p, inst.id, first, RunState("lost"), p.clock.now_ms()) is None
    assert show(p, user, inst.id).status == "running"
    assert (second, "kill") not in backend.signals


def test_a_start_racing_a_reconcile_pass_is_not_judged_lost(p: Platform) -> None:
    """A reconcile pass while a start is launching (pending, no handle yet, this process launching
    it) leaves it alone; the run ends up running."""
    user = renter(p)
    inst = instances.rent(p, user, "T4", 1, ["x"])
    backend = p.backend
    assert isinstance(backend, RecordingBackend)
    instances.stop(p, user, inst.id)
    backend.die(backend.last())
    reconcile(p)
    original = backend.launch

    def launch_during_reconcile(spec: RunSpec) -> str:
        backend.launching_now.add(spec.run_id)
        assert reconcile(p).finished == {}
        backend.launching_now.discard(spec.run_id)
        return original(spec)

    backend.launch = launch_during_reconcile  # type: ignore[method-assign]
    assert instances.start(p, user, inst.id).status == "running"
    assert reconcile(p).alive == 1


def test_a_start_reads_the_clock_under_the_lock_so_runs_never_overlap(
    p: Platform, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 8 finding 7: `start` read the clock before taking the lock; a run that ended while it
    waited (here 20 ms later) was billed until after the next run had started."""
    user = renter(p)
    inst = instances.rent(p, user, "T4", 1, ["x"])
    executor = p.backend
    assert isinstance(executor, RecordingBackend)
    first = executor.last()
    fake_clock.advance(seconds=10)
    real_write = p.db.write

    def write_after_the_run_ends():  # type: ignore[no-untyped-def]
        monkeypatch.setattr(p.db, "write", real_write)
        fake_clock.advance(ms=20)  # the command exits while `start` waits for the lock …
        executor.die(first, code=0, at_ms=fake_clock.now_ms())
        reconcile(p)  # … and the control loop finishes it first
        return real_write()

    monkeypatch.setattr(p.db, "write", write_after_the_run_ends)
    instances.start(p, user, inst.id)  # called while the run was still going
    with p.db.read() as s:
        runs = s.query(AllocationRow).filter(AllocationRow.instance_id == inst.id).order_by(AllocationRow.id).all()
        spans = [(a.started_at_ms, a.ended_at_ms) for a in runs]
    assert len(spans) == 2
    assert spans[1][0] >= spans[0][1], f"intervals overlap: {spans}"


def test_a_reconcile_pass_between_commit_and_launch_does_not_fail_the_rental(p: Platform) -> None:
    """Found by the throughput benchmark: the loop ran after `rent` committed the pending row but
    before the backend knew of the launch, judged it abandoned by a dead server and failed it."""
    user = renter(p)
    executor = p.backend
    assert isinstance(executor, RecordingBackend)
    original = executor.launch

    def loop_runs_first(spec: RunSpec) -> str:
        reconcile(p)  # the control loop's tick lands here
        return original(spec)

    executor.launch = loop_runs_first  # type: ignore[method-assign]
    view = instances.rent(p, user, "T4", 1, ["sleep", "1000"])
    assert view.status == "running", view.status_reason
    assert executor.last() in executor.started


def test_a_suspension_during_a_launch_stops_the_new_rental(p: Platform) -> None:
    """Found in review: the suspension sweeps running instances only, and a launch in flight then
    set its instance running, so a suspended renter kept a billed sandbox."""
    from danlu.compute import operator

    user = renter(p)
    executor = p.backend
    assert isinstance(executor, RecordingBackend)
    original = executor.launch

    def suspended_meanwhile(spec: RunSpec) -> str:
        handle = original(spec)
        operator.suspend_user(p, "rae", "abuse report")
        return handle

    executor.launch = suspended_meanwhile  # type: ignore[method-assign]
    view = instances.rent(p, user, "T4", 1, ["sleep", "1000"])
    assert (view.status, view.status_reason) == ("stopped", "account suspended: abuse report")
    assert executor.last() not in executor.started and (executor.last(), "kill") in executor.signals
    assert free_gpus(p) == 4


def test_a_run_ending_while_the_loop_works_is_never_billed_past_its_end(
    p: Platform, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kill drill once saw an allocation end 614 ms after its process: the loop polled the process
    (alive), then spent time scheduling, on telemetry and webhooks, and metered to the clock *after* that,
    past an exit that happened meanwhile; the exit noticed next tick could not take that time back. The
    meter bills only up to the start of the tick, before the processes were polled."""
    from danlu.server import loop as loop_mod

    user = renter(p)
    inst = instances.rent(p, user, "T4", 1, ["nb"])
    executor = p.backend
    assert isinstance(executor, RecordingBackend)
    fake_clock.advance(seconds=100)
    loop = loop_mod.ControlLoop(p)
    loop.next_ms[loop_mod.Cadence.METER] = 0  # meter on this tick
    exit_at = fake_clock.now_ms() + 1_000

    def busy_round(platform: Platform) -> object:  # a loaded machine: the phases after the poll take 2 s
        executor.die(executor.last(), code=0, at_ms=exit_at)  # the command ends 1 s into them
        fake_clock.advance(seconds=2)
        return None

    monkeypatch.setattr(loop_mod, "schedule_round", busy_round)
    loop.run_once()
    monkeypatch.setattr(loop_mod, "schedule_round", lambda platform: None)
    loop.run_once()  # the next tick sees the exit
    view = show(p, user, inst.id)
    assert view.status == "exited"
    assert view.billed_seconds == 101  # to the exit, not to the meter's clock 1 s later
    with p.db.read() as s:
        [alloc] = s.query(AllocationRow).filter(AllocationRow.instance_id == inst.id).all()
        assert alloc.ended_at_ms == alloc.billed_until_ms == exit_at


def _stopped_with_a_gib(p: Platform, fake_clock: FakeClock) -> tuple[User, str, int]:
    """A renter's rental holding 1 GiB (sparse), stopped with storage at 3.00 per GB-month; its stop time."""
    from danlu.billing import storage

    storage.configure(p, price_gb_month="3.00", warn_after_s=366 * 86_400, release_after_s=366 * 86_400)
    user = renter(p)
    inst = instances.rent(p, user, "T4", 1, ["nb"])
    with p.db.read() as s:
        workspace = Path(s.get(Instance, inst.id).workspace)  # type: ignore[union-attr]
    workspace.mkdir(parents=True, exist_ok=True)  # the recording backend makes none
    with open(workspace / "data", "wb") as f:
        f.truncate(1 << 30)
    instances.stop(p, user, inst.id)
    executor = p.backend
    assert isinstance(executor, RecordingBackend)
    stopped_at = fake_clock.now_ms()
    executor.die(executor.last(), code=0, at_ms=stopped_at)
    return user, inst.id, stopped_at


def test_a_stopped_workspace_is_billed_per_gb_month_not_per_mib_hour(p: Platform, fake_clock: FakeClock) -> None:
    """A newcomer's stopped 191 MiB workspace at 0.30/GB-month was charged 0.43 in 27 s (57 an hour): the
    meter rated storage allocations per unit-*hour* (``allocation_rate`` dropped the storage rate's
    seconds per unit), about 737,000 times the price. 1 GiB kept 30 days must cost exactly 0.30."""
    user, inst_id, _ = _stopped_with_a_gib(p, fake_clock)
    reconcile(p)
    compute_storage.measure_stored(p)  # the loop's storage phase, after the stop commits
    before = show(p, user, inst_id)
    assert before.status == "stopped" and before.stopped_storage_per_day_minor == 10  # 3.00 / 30 days
    fake_clock.advance(seconds=30 * 86_400)
    meter_all(p)
    after = show(p, user, inst_id)
    assert after.storage_cost_minor - before.storage_cost_minor == 300, (before, after)


def test_a_stop_with_free_storage_never_walks_the_workspace_in_its_write_transaction(
    p: Platform, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27: ``transition`` measured every stopped workspace (a walk of the renter's files) inside
    the write transaction that stops it, which on SQLite blocks every other writer, even where storage
    is free (the default) and the size is never used."""
    user = renter(p)
    inst = instances.rent(p, user, "T4", 1, ["nb"])

    def walked(path: str) -> int:
        raise AssertionError(f"walked {path} inside the stop's transaction")

    monkeypatch.setattr(compute_storage, "workspace_bytes", walked)
    instances.stop(p, user, inst.id)
    executor = p.backend
    assert isinstance(executor, RecordingBackend)
    executor.die(executor.last(), code=0, at_ms=fake_clock.now_ms())
    reconcile(p)
    assert show(p, user, inst.id).status == "stopped"


def test_a_priced_stop_measures_the_workspace_after_commit_and_bills_it_from_the_stop(
    p: Platform, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27: where storage is priced, the stop's write transaction walked the renter's files (on SQLite
    every writer waited for the walk). The loop's storage phase measures it after commit, and the storage
    allocation starts at the stop, not at the measurement: not a millisecond of storage goes unbilled."""
    walks: list[str] = []
    real = compute_storage.workspace_bytes
    monkeypatch.setattr(compute_storage, "workspace_bytes", lambda path: walks.append(path) or real(path))
    user, inst_id, stopped_at = _stopped_with_a_gib(p, fake_clock)
    fake_clock.advance(seconds=2)
    reconcile(p)  # the process ended: stopped
    assert show(p, user, inst_id).status == "stopped"
    assert walks == []  # nothing measured in the stop's transactions
    fake_clock.advance(seconds=3)
    assert compute_storage.measure_stored(p) == 1
    assert len(walks) == 1
    with p.db.read() as s:
        inst = s.get(Instance, inst_id)
        assert inst is not None and inst.storage_measure_from_ms is None
        stored = s.get(AllocationRow, inst.storage_allocation_id)
        assert stored is not None and stored.gpu_count == 1024  # MiB
        assert stored.started_at_ms == stored.billed_until_ms == inst.stopped_at_ms == stopped_at + 2000
    assert compute_storage.measure_stored(p) == 0 and len(walks) == 1  # measured once
    before = show(p, user, inst_id)
    fake_clock.advance(seconds=30 * 86_400 - 5)
    meter_all(p)
    assert show(p, user, inst_id).storage_cost_minor - before.storage_cost_minor == 300  # 30 days from the stop


def test_a_rental_started_again_before_its_workspace_is_measured_opens_no_storage(
    p: Platform, fake_clock: FakeClock
) -> None:
    user, inst_id, _ = _stopped_with_a_gib(p, fake_clock)
    reconcile(p)
    instances.start(p, user, inst_id)
    assert compute_storage.measure_stored(p) == 0
    with p.db.read() as s:
        inst = s.get(Instance, inst_id)
        assert inst is not None and inst.storage_measure_from_ms is None and inst.storage_allocation_id is None
        assert s.query(AllocationRow).filter(AllocationRow.plan == "storage").count() == 0


def test_a_clock_that_jumps_during_a_tick_is_metered_on_the_next_one(
    p: Platform, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The meter bills to the start of a tick; the next pass is due an interval after *that*, not after the
    tick's end, or time that passed during a tick waited a whole interval (forever on a clock that then
    stood still: the tenant matrix's PostgreSQL world waited 30 s for usage that never came)."""
    from danlu.server import loop as loop_mod

    user = renter(p)
    inst = instances.rent(p, user, "T4", 1, ["nb"])
    loop = loop_mod.ControlLoop(p)
    loop.next_ms[loop_mod.Cadence.METER] = 0

    def slow_round(platform: Platform) -> object:
        fake_clock.advance(seconds=30)  # the test's (or the machine's) clock moves on mid-tick
        return None

    monkeypatch.setattr(loop_mod, "schedule_round", slow_round)
    loop.run_once()
    monkeypatch.setattr(loop_mod, "schedule_round", lambda platform: None)
    loop.run_once()  # the clock stands still now
    with p.db.read() as s:
        alloc = s.get(AllocationRow, s.get(Instance, inst.id).current_allocation_id)  # type: ignore[union-attr]
        assert alloc is not None and alloc.billed_until_ms == fake_clock.now_ms()


def test_show_of_a_running_rental_with_many_files_measures_its_workspace_once_in_30_seconds(
    p: Platform, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``show`` (every `danlu show`, every page of a rental) walked the running rental's whole workspace
    for what staying stopped would cost per day: a renter's million files on every call. A workspace of
    many entries (here: 3 or more) is measured once in 30 s; a small one on every call."""
    from danlu.billing import storage
    from danlu.compute import workspace_size

    storage.configure(p, price_gb_month="3.00", warn_after_s=366 * 86_400, release_after_s=366 * 86_400)
    user = renter(p)
    inst = instances.rent(p, user, "T4", 1, ["nb"])
    with p.db.read() as s:
        workspace = Path(s.get(Instance, inst.id).workspace)  # type: ignore[union-attr]
    workspace.mkdir(parents=True, exist_ok=True)
    walks: list[str] = []
    real = workspace_size._measure
    monkeypatch.setattr(workspace_size, "_measure", lambda path: walks.append(path) or real(path))
    monkeypatch.setattr(workspace_size, "ESTIMATE_FROM_ENTRIES", 3)

    def gib(name: str) -> None:
        with open(workspace / name, "wb") as f:
            f.truncate(1 << 30)

    gib("a")
    assert show(p, user, inst.id).stopped_storage_per_day_minor == 10  # 1 GiB at 3.00 / 30 days
    gib("b")  # small (2 entries): measured on every call
    assert show(p, user, inst.id).stopped_storage_per_day_minor == 20 and len(walks) == 2
    gib("c")  # 3 entries: measured now, then kept
    assert show(p, user, inst.id).stopped_storage_per_day_minor == 30
    fake_clock.advance(seconds=29)
    gib("d")
    assert show(p, user, inst.id).stopped_storage_per_day_minor == 30  # the estimate of 29 s ago
    assert len(walks) == 3
    fake_clock.advance(seconds=2)
    assert show(p, user, inst.id).stopped_storage_per_day_minor == 40  # measured again
    assert len(walks) == 4
