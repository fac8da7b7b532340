"""Issue 26, item 4: snapshots are priced per GB-month of what they restore, like a stopped workspace, from
their creation to their removal, on the invoice as their own line; an account's snapshots together stay
within the operator's quota (one over it is refused and nothing of it stays stored); a retention period
removes them, warned first; a workspace due for release can be snapshotted first (and is kept where that
fails). Real restic, a recording backend and a fake clock, SQLite and PostgreSQL."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from sqlalchemy import select

from danlu.accounts.service import create_user
from danlu.billing import service as billing
from danlu.billing import storage
from danlu.billing.invoices import invoices_of
from danlu.compute import instances, snapshots
from danlu.compute.reconcile import meter_all, reconcile, storage_retention
from danlu.context import Platform
from danlu.core.clock import FakeClock, iso
from danlu.core.errors import Conflict, InvalidInput
from danlu.db.models import AllocationRow, Event, Instance, LedgerTransaction, User
from tests.fakes import RecordingBackend

MIB = 1 << 20
DAY_S = 86_400


@pytest.fixture(autouse=True)
def _restic() -> None:
    if shutil.which("restic") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("restic is not installed (CI=true: `make test` installs it)")
        pytest.skip("restic is not installed (Debian package restic)")


@pytest.fixture
def p(platform: Platform) -> Platform:
    platform.backend = RecordingBackend()
    billing.set_price(platform, "T4", "3.60")
    return platform


def _stopped(p: Platform, name: str, size: int) -> tuple[User, str]:
    """A renter's rental stopped with ``size`` bytes (one sparse file) in its workspace."""
    with p.db.write() as s:
        user, _ = create_user(s, name, 0)
        s.expunge(user)
    billing.admin_topup(p, name, "100.00", "seed")
    inst = instances.rent(p, user, "T4", 1, ["nb"])
    with p.db.read() as s:
        workspace = Path(s.get(Instance, inst.id).workspace)  # type: ignore[union-attr]
    workspace.mkdir(parents=True, exist_ok=True)  # the recording backend makes none
    with open(workspace / "data", "wb") as f:
        f.truncate(size)
    instances.stop(p, user, inst.id)
    executor = p.backend
    assert isinstance(executor, RecordingBackend)
    executor.die(executor.last(), code=0, at_ms=p.clock.now_ms())
    reconcile(p)
    return user, inst.id


def _alloc(p: Platform, snapshot_id: str) -> AllocationRow:
    from danlu.db.models import Snapshot

    with p.db.read() as s:
        row = s.get(Snapshot, snapshot_id)
        alloc = s.get(AllocationRow, row.allocation_id) if row is not None and row.allocation_id else None
        assert alloc is not None
        s.expunge(alloc)
        return alloc


def test_a_snapshot_is_billed_per_gb_month_from_creation_to_removal(p: Platform, fake_clock: FakeClock) -> None:
    pol = storage.configure(p, snapshot_price_gb_month="48.00")  # 64 MiB: 3.00 a month, 0.10 a day
    assert (pol.snapshot_price_gb_month_minor, pol.price_gb_month_minor) == (4800, 0)  # stopped storage stays free
    user, inst_id = _stopped(p, "sia", 64 * MIB)
    snap = snapshots.create(p, user, inst_id, "weights")
    assert snap.size_bytes == 64 * MIB and (snap.per_day_minor, snap.currency) == (10, "CNY")
    assert [v.per_day_minor for v in snapshots.list_snapshots(p, user)] == [10]
    created = fake_clock.now_ms()
    alloc = _alloc(p, snap.id)
    assert (alloc.gpu_model, alloc.plan, alloc.gpu_count, alloc.started_at_ms) == ("snapshot", "storage", 64, created)
    assert alloc.instance_id == inst_id
    fake_clock.advance(seconds=30 * DAY_S)
    meter_all(p)
    assert _alloc(p, snap.id).billed_minor == 300  # 30 days of 64 MiB at 48.00 per GB-month, exactly
    fake_clock.advance(seconds=DAY_S)
    alloc = _alloc(p, snap.id)
    snapshots.remove(p, user, snap.id)  # billed to the moment it goes, then never again
    with p.db.read() as s:
        ended = s.get(AllocationRow, alloc.id)
        assert ended is not None and ended.ended_at_ms == fake_clock.now_ms() and ended.billed_minor == 310
    fake_clock.advance(seconds=10 * DAY_S)
    meter_all(p)
    with p.db.read() as s:
        assert s.get(AllocationRow, alloc.id).billed_minor == 310  # type: ignore[union-attr]
        memos = list(s.scalars(select(LedgerTransaction.memo).where(LedgerTransaction.kind == "usage")))
    assert any(f"{inst_id} (64 MiB snapshot, " in m for m in memos), memos
    lines = [line for inv in invoices_of(p, user) for line in inv.lines if "snapshot" in line.description]
    assert {line.description for line in lines} == {f"64 MiB snapshot (price per GB-month), instance {inst_id}"}
    assert sum(line.amount_minor for line in lines) == 310  # its own line on each month's invoice
    total, _ = billing.ledger_totals(p)
    assert total == 0


def test_free_snapshots_open_no_allocation(p: Platform) -> None:
    user, inst_id = _stopped(p, "fay", MIB)
    snap = snapshots.create(p, user, inst_id)
    assert (snap.per_day_minor, snap.currency) == (0, None)
    with p.db.read() as s:
        assert s.scalars(select(AllocationRow).where(AllocationRow.gpu_model == "snapshot")).all() == []


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # restic's work; the money test takes both
def test_a_snapshot_past_the_accounts_quota_is_refused_and_not_kept(p: Platform) -> None:
    storage.configure(p, snapshot_quota_gb=1)
    user, inst_id = _stopped(p, "quin", 600 * MIB)
    first = snapshots.create(p, user, inst_id)
    with pytest.raises(Conflict) as refused:  # 600 + 600 MiB > 1 GB
        snapshots.create(p, user, inst_id)
    assert refused.value.code == "snapshot_quota_exceeded" and "danlu snapshot rm" in refused.value.message
    assert [v.id for v in snapshots.list_snapshots(p, user)] == [first.id]
    repo, key = snapshots._repo(p, _account(p, user))
    assert snapshots._restic(p, repo, key, "snapshots", "--json").count('"id"') == 1  # forgotten in restic too
    snapshots.remove(p, user, first.id)
    assert snapshots.create(p, user, inst_id).size_bytes == 600 * MIB  # room again
    with pytest.raises(InvalidInput):
        storage.configure(p, snapshot_quota_gb=-1)


def _account(p: Platform, user: User) -> int:
    with p.db.read() as s:
        return int(s.scalars(select(Instance.billing_account_id).where(Instance.user_id == user.id)).first() or 0)


def _events(p: Platform, kind: str) -> list[str]:
    with p.db.read() as s:
        return list(s.scalars(select(Event.message).where(Event.kind == kind).order_by(Event.id)))


def test_a_snapshot_goes_at_the_end_of_its_retention_warned_first(p: Platform, fake_clock: FakeClock) -> None:
    storage.configure(p, snapshot_retention_s=30 * DAY_S, snapshot_price_gb_month="48.00")  # notice: 7 days
    user, inst_id = _stopped(p, "rex", 64 * MIB)
    snap = snapshots.create(p, user, inst_id)
    end = fake_clock.now_ms() + 30 * DAY_S * 1000
    assert snapshots.retention(p) == (0, 0)
    fake_clock.advance(seconds=23 * DAY_S - 1)
    assert snapshots.retention(p) == (0, 0)
    fake_clock.advance(seconds=1)  # 7 days before its end: the renter is told when
    assert snapshots.retention(p) == (1, 0)
    assert _events(p, "snapshot_retention_warning") == [
        f"snapshot {snap.id} of {inst_id} will be removed at {iso(end)}, at the end of its retention period; "
        f"rent from it to keep what you need (`danlu rent --from {snap.id}`)"
    ]
    assert snapshots.retention(p) == (0, 0)  # warned once
    fake_clock.advance(seconds=7 * DAY_S - 1)
    assert snapshots.retention(p) == (0, 0)
    fake_clock.advance(seconds=1)
    assert snapshots.retention(p) == (0, 1)
    assert snapshots.list_snapshots(p, user) == []
    [removed] = _events(p, "snapshot_removed")
    assert removed.startswith(f"snapshot {snap.id} of {inst_id} was removed at the end of its retention period")
    repo, key = snapshots._repo(p, _account(p, user))
    assert '"id"' not in snapshots._restic(p, repo, key, "snapshots", "--json")  # gone from restic too
    meter_all(p)
    with p.db.read() as s:  # billed for exactly its 30 days at 0.10 a day
        billed = s.scalars(select(AllocationRow.billed_minor).where(AllocationRow.gpu_model == "snapshot")).one()
    assert billed == 300


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # restic's work; the money test takes both
def test_a_workspace_due_for_release_is_snapshotted_first_or_kept(
    p: Platform, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage.configure(p, warn_after_s=3600, release_after_s=3600, snapshot_before_release=True)
    user, inst_id = _stopped(p, "ria", MIB)
    with p.db.read() as s:
        workspace = Path(s.get(Instance, inst_id).workspace)  # type: ignore[union-attr]
    (workspace / "result.txt").write_text("42\n")
    fake_clock.advance(seconds=3600)
    assert storage_retention(p) == (1, 0)  # warned
    fake_clock.advance(seconds=3600)
    assert storage_retention(p) == (0, 0)  # due, but the snapshots phase releases it, after its snapshot

    real = snapshots._restic

    def failing(p: Platform, repo: Path, key: Path, *args: str) -> str:
        if args[0] == "backup":
            raise snapshots.SnapshotFailed("snapshot_failed", "restic backup failed: disk full")
        return real(p, repo, key, *args)

    monkeypatch.setattr(snapshots, "_restic", failing)
    assert snapshots.before_release(p) == (0, 1)
    assert (workspace / "result.txt").read_text() == "42\n"  # kept: nothing is released unsaved
    monkeypatch.setattr(snapshots, "_restic", real)
    assert snapshots.before_release(p) == (1, 0)
    [snap] = snapshots.list_snapshots(p, user)
    assert snap.name == "before release" and snap.instance_id == inst_id
    assert not workspace.exists()
    [released] = _events(p, "storage_released")
    assert released.endswith(f"; snapshot {snap.id} keeps it (`danlu rent --from {snap.id}`)")
    restored = p.workspaces / "i-restored"
    snapshots.restore(p, user, snap.id, restored)
    assert (restored / "result.txt").read_text() == "42\n"
    assert snapshots.before_release(p) == (0, 0)
