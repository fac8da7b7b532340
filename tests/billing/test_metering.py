"""Metering and the ledger on SQLite and PostgreSQL, on a fake clock."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from danlu.accounts.payers import personal_account
from danlu.accounts.service import create_user
from danlu.backend import RunState
from danlu.billing import service as billing
from danlu.billing.metering import meter_account, open_allocations_by_account
from danlu.compute import instances
from danlu.compute.reconcile import meter_all, reconcile
from danlu.compute.runs import BackendUnavailable
from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.core.errors import InsufficientFunds
from danlu.db.models import Account, AllocationRow, LedgerEntry, UsageRecordRow, User
from tests.fakes import RecordingBackend


@pytest.fixture
def p(platform: Platform) -> Platform:
    platform.backend = RecordingBackend()
    billing.set_price(platform, "A100-80GB", "36.00")  # 1 fen per GPU-second
    billing.set_price(platform, "T4", "3.60")
    return platform


def renter(p: Platform, name: str, topup: str | None) -> User:
    with p.db.write() as s:
        user, _ = create_user(s, name, p.clock.now_ms())
        s.expunge(user)
    if topup:
        billing.admin_topup(p, name, topup, key=f"seed-{name}")
    return user


def assert_ledger_consistent(p: Platform) -> None:
    total, _ = billing.ledger_totals(p)
    assert total == 0
    with p.db.read() as s:
        for acct in s.scalars(select(Account)):
            entries = s.execute(
                select(func.coalesce(func.sum(LedgerEntry.amount_minor), 0)).where(LedgerEntry.account_id == acct.id)
            ).scalar_one()
            assert acct.balance_minor == entries, acct.kind


def test_per_second_billing_is_exact_across_many_ticks(p: Platform, fake_clock: FakeClock) -> None:
    user = renter(p, "alice", "100.00")
    inst = instances.rent(p, user, "A100-80GB", 2, ["train"])
    for _ in range(37):
        fake_clock.advance(seconds=1.5)
        meter_all(p)
    view = instances.show(p, user, inst.id)
    assert view.billed_seconds == 55  # 55.5 s elapsed, a started second is not billed
    assert view.cost_minor == 2 * 55  # 36.00/h = 1 fen per GPU-second
    assert billing.balance(p, user).balance_minor == 10_000 - 110
    assert_ledger_consistent(p)


def test_a_replayed_tick_never_charges_twice(p: Platform, fake_clock: FakeClock) -> None:
    user = renter(p, "bob", "10.00")
    instances.rent(p, user, "T4", 1, ["x"])
    fake_clock.advance(seconds=100)
    with p.db.write() as s:
        payer = personal_account(s, user.id).id
        stale = open_allocations_by_account(s)[payer]
        for a in stale:
            s.expunge(a)
    meter_all(p)
    charged = billing.balance(p, user).balance_minor
    assert charged == 1000 - 10  # 100 s at 0.1 fen/s
    # Replaying the same tick from a stale snapshot (a crashed loop's retry) charges nothing: the
    # meter re-reads allocations under the account lock and sees the interval already billed.
    with p.db.write() as s:
        replay = meter_account(s, payer, [s.merge(a, load=False) for a in stale], fake_clock.now_ms())
    assert replay.charged_minor == 0
    assert billing.balance(p, user).balance_minor == charged
    # Second line of defence: the usage interval's own identity.
    with pytest.raises(IntegrityError), p.db.write() as s:
        rec = s.scalars(select(UsageRecordRow)).one()
        s.add(
            UsageRecordRow(
                allocation_id=rec.allocation_id,
                start_ms=rec.start_ms,
                end_ms=rec.end_ms + 5,
                amount_minor=1,
                transaction_id=rec.transaction_id,
            )
        )
        s.flush()
    with p.db.read() as s:
        assert s.execute(select(func.count(UsageRecordRow.id))).scalar_one() == 1
    assert_ledger_consistent(p)


def test_stop_ends_gpu_billing_at_the_request(p: Platform, fake_clock: FakeClock) -> None:
    user = renter(p, "carol", "100.00")
    inst = instances.rent(p, user, "A100-80GB", 1, ["x"])
    fake_clock.advance(seconds=30)
    stopped = instances.stop(p, user, inst.id)
    assert stopped.status == "stopping"
    assert stopped.cost_minor == 30
    executor = p.backend
    assert isinstance(executor, RecordingBackend)
    assert executor.signals[-1] == (executor.last(), "term")
    fake_clock.advance(seconds=600)  # the process ignores SIGTERM for a while: not billed
    reconcile(p)
    meter_all(p)
    assert instances.show(p, user, inst.id).cost_minor == 30
    assert (executor.last(), "kill") in executor.signals  # grace (10 s) passed
    executor.die(executor.last())
    reconcile(p)
    view = instances.show(p, user, inst.id)
    assert view.status == "stopped" and view.cost_minor == 30 and view.gpu_indices == []
    assert_ledger_consistent(p)


def test_a_stop_the_backend_cannot_carry_out_now_is_refused_and_changes_nothing(
    p: Platform, fake_clock: FakeClock
) -> None:
    """Issue 28, finding 8: a stop accepted while the Slurm controller was down ended billing at once, but the
    job ran on until the controller came back and took the cancel, so Slurm ran longer than was billed. A
    stop the backend cannot reach is refused (503 backend_unavailable) and the rental runs on, billed by the
    backend's clock, until a stop reaches it."""
    user = renter(p, "dora", "100.00")
    inst = instances.rent(p, user, "A100-80GB", 1, ["x"])
    executor = p.backend
    assert isinstance(executor, RecordingBackend)
    fake_clock.advance(seconds=30)
    executor.unavailable = lambda: "the Slurm controller does not answer (scontrol ping: no answer)"  # type: ignore[method-assign]
    with pytest.raises(BackendUnavailable) as refused:
        instances.stop(p, user, inst.id)
    assert refused.value.code == "backend_unavailable" and "try again" in refused.value.message
    assert instances.show(p, user, inst.id).status == "running" and executor.signals == []
    fake_clock.advance(seconds=30)
    executor.unavailable = lambda: None  # type: ignore[method-assign]
    assert instances.stop(p, user, inst.id).cost_minor == 60  # billed to the stop that reached it


def test_a_run_whose_heartbeat_stopped_is_billed_to_its_last_heartbeat_not_to_the_backends_late_end(
    p: Platform, fake_clock: FakeClock
) -> None:
    """Issue 28, finding 8: a dead Slurm node's job stays RUNNING in Slurm until its SlurmdTimeout (300 s in
    production), and was billed all that time although the node's runner beats every 5 s. The meter bills a
    run no further than its last heartbeat, and a lost run ends there; a late heartbeat catches up."""
    user = renter(p, "nina", "100.00")
    inst = instances.rent(p, user, "A100-80GB", 1, ["x"])  # 1 fen per second
    backend = p.backend
    assert isinstance(backend, RecordingBackend)
    handle = backend.last()
    start = fake_clock.now_ms()
    backend.heartbeats[handle] = start + 20_000
    fake_clock.advance(seconds=30)

    def posted() -> int:
        with p.db.read() as s:
            return int(
                s.scalar(
                    select(func.coalesce(func.sum(UsageRecordRow.amount_minor), 0))
                    .join(AllocationRow, AllocationRow.id == UsageRecordRow.allocation_id)
                    .where(AllocationRow.instance_id == inst.id)
                )
            )

    meter_all(p)
    assert posted() == 20  # the beats were late: billed to the last one
    backend.heartbeats[handle] = start + 30_000
    meter_all(p)
    assert posted() == 30  # they came: billed on, nothing lost
    fake_clock.advance(seconds=300)  # the node died just after its last beat; Slurm says RUNNING meanwhile
    reconcile(p)
    meter_all(p)
    assert posted() == 30
    backend.states[handle] = RunState("lost", ended_ms=fake_clock.now_ms(), reason="Slurm job 7 ended NODE_FAIL")
    reconcile(p)
    view = instances.show(p, user, inst.id)
    assert (
        view.status == "lost" and posted() == view.cost_minor == 30 and "last seen alive" in (view.status_reason or "")
    )
    assert_ledger_consistent(p)


def test_a_command_that_ends_stops_billing_when_it_ended(p: Platform, fake_clock: FakeClock) -> None:
    user = renter(p, "dave", "100.00")
    inst = instances.rent(p, user, "A100-80GB", 1, ["x"])
    start = fake_clock.now_ms()
    fake_clock.advance(seconds=50)
    executor = p.backend
    assert isinstance(executor, RecordingBackend)
    executor.die(executor.last(), code=0, at_ms=start + 20_000)  # ended at 20 s
    reconcile(p)
    view = instances.show(p, user, inst.id)
    assert (view.status, view.exit_code, view.billed_seconds, view.cost_minor) == ("exited", 0, 20, 20)


def test_exhausted_balance_stops_instances_and_charges_nothing_beyond(p: Platform, fake_clock: FakeClock) -> None:
    user = renter(p, "erin", "1.00")  # 100 fen = 100 GPU-seconds of A100
    a = instances.rent(p, user, "A100-80GB", 1, ["x"])
    b = instances.rent(p, user, "T4", 1, ["y"])  # 0.1 fen/s
    fake_clock.advance(seconds=500)
    report = meter_all(p)
    with p.db.read() as s:
        assert report.exhausted_accounts == [personal_account(s, user.id).id]
    assert billing.balance(p, user).balance_minor == 0
    for inst in (a, b):
        assert instances.show(p, user, inst.id).status == "stopping"
    fake_clock.advance(seconds=100)
    meter_all(p)
    assert billing.balance(p, user).balance_minor == 0  # nothing charged beyond the balance
    total = instances.show(p, user, a.id).cost_minor + instances.show(p, user, b.id).cost_minor
    assert total == 100
    with pytest.raises(InsufficientFunds):
        instances.rent(p, user, "T4", 1, ["z"])
    assert_ledger_consistent(p)


def test_credit_limit_lets_a_balance_go_negative_up_to_the_limit(p: Platform, fake_clock: FakeClock) -> None:
    user = renter(p, "fay", None)
    with pytest.raises(InsufficientFunds):
        instances.rent(p, user, "A100-80GB", 1, ["x"])
    billing.set_credit_limit(p, "fay", "1.00")
    inst = instances.rent(p, user, "A100-80GB", 1, ["x"])
    fake_clock.advance(seconds=130)
    meter_all(p)
    assert billing.balance(p, user).balance_minor == -100
    assert instances.show(p, user, inst.id).status == "stopping"


def test_predicted_exhaustion_is_reported_for_the_loop(p: Platform, fake_clock: FakeClock) -> None:
    user = renter(p, "gus", "1.00")
    instances.rent(p, user, "A100-80GB", 1, ["x"])
    now = fake_clock.now_ms()
    report = meter_all(p)
    assert report.next_exhaustion_ms is not None
    assert 100_000 <= report.next_exhaustion_ms - now <= 101_000


def test_topup_is_idempotent_by_key(p: Platform) -> None:
    renter(p, "hal", None)
    first, created = billing.admin_topup(p, "hal", "5.00", "k1")
    again, created_again = billing.admin_topup(p, "hal", "5.00", "k1")
    assert created and not created_again
    assert first.balance_minor == again.balance_minor == 500
    assert_ledger_consistent(p)


def test_unsettled_allocations_survive_a_new_platform_object(
    p: Platform, fake_clock: FakeClock, tmp_path: Path
) -> None:
    """A server restart is a new Platform on the same database: metering continues exactly."""
    user = renter(p, "ivy", "10.00")
    instances.rent(p, user, "T4", 1, ["x"])
    fake_clock.advance(seconds=10)
    meter_all(p)
    p2 = Platform(db=p.db, clock=fake_clock, backend=p.backend, settings=p.settings)
    fake_clock.advance(seconds=10)
    meter_all(p2)
    with p.db.read() as s:
        alloc = s.scalars(select(AllocationRow)).one()
        assert alloc.billed_minor == 2


def test_usage_rows_tile_every_allocation_even_when_seconds_cost_nothing(p: Platform, fake_clock: FakeClock) -> None:
    """T4 at 3.60/h is 0.1 fen per second: most 1-second ticks rate 0 fen, yet every second is recorded."""
    user = renter(p, "tia", "10.00")
    inst = instances.rent(p, user, "T4", 1, ["x"])
    for _ in range(25):
        fake_clock.advance(seconds=1)
        meter_all(p)
    instances.stop(p, user, inst.id)
    with p.db.read() as s:
        alloc = s.scalars(select(AllocationRow)).one()
        rows = s.scalars(select(UsageRecordRow).order_by(UsageRecordRow.start_ms)).all()
        assert rows[0].start_ms == alloc.started_at_ms and rows[-1].end_ms == alloc.ended_at_ms
        assert all(a.end_ms == b.start_ms for a, b in pairwise(rows))
        assert sum(r.amount_minor for r in rows) == alloc.billed_minor == 3  # 2.5 fen, rounded once, half up
        assert any(r.transaction_id is None for r in rows) and all(
            (r.transaction_id is None) == (r.amount_minor == 0) for r in rows
        )
    assert_ledger_consistent(p)
