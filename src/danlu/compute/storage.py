"""A stopped rental's kept workspace (docs/billing.md "Stopped storage"): when the instance stops with its
workspace kept, the workspace is measured and billed per MiB at the storage plan's price from then on (a
storage allocation), until it starts again, is removed or released. Called by ``instances.transition``."""

from __future__ import annotations

from sqlalchemy.orm import Session

from danlu.billing import storage
from danlu.billing.accounts import lock_billing_account
from danlu.billing.metering import meter_account
from danlu.billing.price_plans import current_plan
from danlu.compute.views import workspace_bytes
from danlu.db.models import AllocationRow, Instance


def start_storage(session: Session, inst: Instance, now_ms: int) -> None:
    """The instance stopped with its workspace kept: measure it and bill it at the storage price
    plan from now (danlu.billing.storage); the retention clock starts."""
    inst.stopped_at_ms, inst.storage_warned_at_ms = now_ms, None
    if inst.workspace_released_at_ms is not None or inst.storage_allocation_id is not None:
        return
    row = current_plan(session, storage.MODEL, storage.PLAN)
    if row is None or row.price_per_hour_minor == 0:
        return  # free storage: retention still applies, nothing is measured or billed
    # Measured inside the write transaction, only when storage is priced: moving this after commit
    # (a measuring phase, the meter waiting for it) is left to issue 27's rest.
    size = workspace_bytes(inst.workspace)
    if storage.mib(size) == 0:
        return  # nothing stored
    alloc = AllocationRow(
        instance_id=inst.id,
        user_id=inst.user_id,
        billing_account_id=inst.billing_account_id,
        host_id=inst.host_id,
        gpu_model=storage.MODEL,
        gpu_count=storage.mib(size),
        gpu_indices="",
        plan=storage.PLAN,
        price_plan_id=row.id,
        price_per_hour_minor=row.price_per_hour_minor,
        discount_bp=0,
        tariffs_json="",
        currency=row.currency,
        started_at_ms=now_ms,
        ended_at_ms=None,
        billed_until_ms=now_ms,
        billed_minor=0,
        settled=False,
    )
    session.add(alloc)
    session.flush()
    inst.storage_allocation_id = alloc.id


def end_storage(session: Session, inst: Instance, end_ms: int) -> None:
    """Stop billing the stored workspace (the instance starts again, is removed, or released)."""
    inst.stopped_at_ms = None
    inst.storage_warned_at_ms = None
    if inst.storage_allocation_id is None:
        return
    lock_billing_account(session, inst.billing_account_id)
    alloc = session.get(AllocationRow, inst.storage_allocation_id, populate_existing=True)
    inst.storage_allocation_id = None
    if alloc is None:
        return
    if alloc.ended_at_ms is None:
        alloc.ended_at_ms = max(alloc.billed_until_ms, end_ms)
        session.flush()
    if not alloc.settled:
        meter_account(session, alloc.billing_account_id, [alloc], max(end_ms, alloc.billed_until_ms))
