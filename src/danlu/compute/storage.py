"""A stopped rental's kept workspace (docs/billing.md "Stopped storage"): when the instance stops with its
workspace kept, the workspace is measured and billed per MiB at the storage plan's price from then on (a
storage allocation), until it starts again, is removed or released. ``start_storage``/``end_storage`` are
called by ``instances.transition`` inside its transaction; ``measure_stored`` is the loop's ``storage`` phase;
``release_workspace`` ends a warned workspace (the meter's retention pass, or the snapshots phase after its
snapshot). ``open_stored``/``close_stored`` are any storage allocation's, snapshots' too."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from danlu.backend import LaunchError
from danlu.billing import storage
from danlu.billing.accounts import lock_billing_account
from danlu.billing.metering import meter_account
from danlu.billing.price_plans import current_plan
from danlu.compute import fstree
from danlu.compute.lifecycle import KEEPS_WORKSPACE
from danlu.compute.sandbox import crypt, volume
from danlu.compute.workspace_size import workspace_bytes
from danlu.context import Platform
from danlu.core.clock import iso
from danlu.core.errors import Conflict
from danlu.db.models import AllocationRow, Event, Instance


def start_storage(session: Session, inst: Instance, now_ms: int) -> None:
    """The instance stopped with its workspace kept: the retention clock starts and, where storage is
    priced, the workspace waits to be measured (``measure_stored``, after this transaction commits: a walk
    of the renter's files inside it would hold every writer on SQLite) and billed from now."""
    inst.stopped_at_ms, inst.storage_warned_at_ms = now_ms, None
    if inst.workspace_released_at_ms is not None or inst.storage_allocation_id is not None:
        return
    row = current_plan(session, storage.MODEL, storage.PLAN)
    if row is None or row.price_per_hour_minor == 0:
        return  # free storage: retention still applies, nothing is measured or billed
    inst.storage_measure_from_ms = now_ms


def measure_stored(p: Platform) -> int:
    """The loop's ``storage`` phase: measure each workspace stopped since the last pass, outside any
    transaction, then open its storage allocation back-dated to the stop (the meter bills it from there).
    A workspace started, removed or released in between is left alone. Returns how many were opened."""
    with p.db.read() as s:
        due = s.execute(
            select(Instance.id, Instance.workspace, Instance.storage_measure_from_ms).where(
                Instance.storage_measure_from_ms.is_not(None)
            )
        ).all()
    opened = 0
    for inst_id, workspace, since in due:
        if since is None:
            continue
        size = workspace_bytes(workspace)
        with p.db.write() as s:
            inst = s.get(Instance, inst_id, with_for_update=True, populate_existing=True)
            if inst is None or inst.storage_measure_from_ms != since:
                continue  # started again (or stopped again) since it was read
            inst.storage_measure_from_ms = None
            if inst.workspace_released_at_ms is not None or inst.storage_allocation_id is not None:
                continue
            opened += _open(s, inst, size, since)
    return opened


def _open(session: Session, inst: Instance, size: int, since_ms: int) -> int:
    alloc = open_stored(session, inst, storage.MODEL, size, since_ms)
    if alloc is None:
        return 0
    inst.storage_allocation_id = alloc.id
    return 1


def open_stored(session: Session, inst: Instance, model: str, size: int, since_ms: int) -> AllocationRow | None:
    """A storage allocation of ``size`` bytes (in MiB) at ``model``'s current storage price (``workspace``: a
    stopped rental's; ``snapshot``: one of its snapshots), billed to the instance's payer from ``since_ms``;
    None where that storage is free or nothing is stored."""
    row = current_plan(session, model, storage.PLAN)
    if row is None or row.price_per_hour_minor == 0 or storage.mib(size) == 0:
        return None  # storage made free since the stop, or nothing stored
    alloc = AllocationRow(
        instance_id=inst.id,
        user_id=inst.user_id,
        billing_account_id=inst.billing_account_id,
        host_id=inst.host_id,
        gpu_model=model,
        gpu_count=storage.mib(size),
        gpu_indices="",
        plan=storage.PLAN,
        price_plan_id=row.id,
        price_per_hour_minor=row.price_per_hour_minor,
        discount_bp=0,
        tariffs_json="",
        currency=row.currency,
        started_at_ms=since_ms,
        ended_at_ms=None,
        billed_until_ms=since_ms,
        billed_minor=0,
        settled=False,
    )
    session.add(alloc)
    session.flush()
    return alloc


def end_storage(session: Session, inst: Instance, end_ms: int) -> None:
    """Stop billing the stored workspace (the instance starts again, is removed, or released)."""
    inst.stopped_at_ms = None
    inst.storage_warned_at_ms = None
    inst.storage_measure_from_ms = None  # not measured yet: nothing was billed
    if inst.storage_allocation_id is None:
        return
    alloc_id, inst.storage_allocation_id = inst.storage_allocation_id, None
    close_stored(session, inst.billing_account_id, alloc_id, end_ms)


def close_stored(session: Session, account_id: int, alloc_id: int, end_ms: int) -> None:
    """End a storage allocation at ``end_ms`` and bill it to there, under its payer's lock."""
    lock_billing_account(session, account_id)
    alloc = session.get(AllocationRow, alloc_id, populate_existing=True)
    if alloc is None:
        return
    if alloc.ended_at_ms is None:
        alloc.ended_at_ms = max(alloc.billed_until_ms, end_ms)
        session.flush()
    if not alloc.settled:
        meter_account(session, alloc.billing_account_id, [alloc], max(end_ms, alloc.billed_until_ms))


def due_for_release(p: Platform, now: int) -> list[tuple[str, int, int, str]]:
    """Stopped rentals whose workspace's warning is ``release_after`` old (the release is due): each one's id,
    renter, payer and workspace folder."""
    with p.db.read() as s:
        pol = storage.policy(s)
        return list(
            s.execute(
                select(Instance.id, Instance.user_id, Instance.billing_account_id, Instance.workspace).where(
                    Instance.storage_warned_at_ms.is_not(None),
                    Instance.storage_warned_at_ms <= now - pol.release_after_s * 1000,
                    Instance.workspace_released_at_ms.is_(None),
                    Instance.status.in_([st.value for st in KEEPS_WORKSPACE]),
                    Instance.job_id.is_(None),
                )
            ).tuples()
        )


def release_workspace(p: Platform, inst_id: str, now: int, snapshot_id: str | None = None) -> int:
    """Release a warned stopped rental's workspace: storage billing ends, its files go (``snapshot_id``: the
    snapshot taken of it first, named in the event). Returns 1, or 0 where it was started or released since."""
    with p.db.write() as s:
        inst = s.get(Instance, inst_id, with_for_update=True, populate_existing=True)
        if inst is None or inst.storage_warned_at_ms is None or inst.workspace_released_at_ms is not None:
            return 0
        warned_at = inst.storage_warned_at_ms
        end_storage(s, inst, now)
        inst.workspace_released_at_ms = now
        inst.status_reason = f"workspace released at {iso(now)} (stopped past the retention period)"
        message = f"{inst.id}'s workspace was released, as warned at {iso(warned_at)}"
        if snapshot_id is not None:
            message += f"; snapshot {snapshot_id} keeps it (`danlu rent --from {snapshot_id}`)"
        s.add(
            Event(
                user_id=inst.user_id,
                billing_account_id=inst.billing_account_id,
                instance_id=inst.id,
                kind="storage_released",
                message=message,
                at_ms=now,
            )
        )
        workspace = inst.workspace
    p.end_transfers(inst_id)
    remove_workspace(p, Path(workspace))
    return 1


def new_workspace(p: Platform, dest: Path) -> None:
    """An empty workspace folder to copy into before the rental's first start: encrypted from the first byte
    where the server encrypts workspaces (its kernel-limited image is made at the first start)."""
    if p.sandbox.encrypt and p.sandbox.keys is not None:
        try:
            crypt.unlock(dest, p.sandbox.keys)
        except LaunchError as exc:
            volume.release(dest, p.sandbox.keys)
            raise Conflict("copy_failed", f"could not make an encrypted workspace: {exc}") from None
    else:
        dest.mkdir(parents=True, exist_ok=True)


def remove_workspace(p: Platform, folder: Path) -> None:
    """A workspace folder goes with its own file systems, its encrypted store and its key."""
    volume.release(folder, p.sandbox.keys)
    fstree.remove_tree(folder)
