"""Versioned price plans: a price change inserts a new row and marks the old one superseded, so
an allocation (which points at the row it started with) is never re-rated (docs/billing.md).

``prices`` stays the operator's current price list for offers; ``price_plans`` is its history,
and the rows the meter rates by. Both change together, in :func:`record_price`.
"""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from danlu.core.errors import InvalidInput
from danlu.db.models import PricePlan

KINDS = ("on-demand", "interruptible", "storage", "held")
HELD = "held"  # usage on a package's or reservation's GPUs: prepaid with the hold, so 0 per second


def current_plan(session: Session, gpu_model: str, kind: str) -> PricePlan | None:
    return session.scalars(
        select(PricePlan)
        .where(PricePlan.gpu_model == gpu_model, PricePlan.kind == kind, PricePlan.superseded_at_ms.is_(None))
        .order_by(PricePlan.id.desc())
    ).first()


def plan_for_usage(session: Session, gpu_model: str, kind: str) -> PricePlan:
    """The plan row usage of ``kind`` is rated by now. A preemption notice is billed at the
    interruptible price where the operator set one, else at the on-demand price (its row)."""
    row = current_plan(session, gpu_model, kind)
    if row is None and kind == "interruptible":
        row = current_plan(session, gpu_model, "on-demand")
    if row is None:
        raise InvalidInput(
            "no_price",
            f"{gpu_model} has no price yet; the operator sets one with `danlu admin price set {gpu_model} PRICE`",
        )
    return row


def record_price(session: Session, gpu_model: str, kind: str, minor: int | None, cur: str, now_ms: int) -> None:
    """Make ``minor`` the current ``kind`` price of ``gpu_model`` (None: no longer offered)."""
    if kind not in KINDS:
        raise ValueError(kind)
    row = current_plan(session, gpu_model, kind)
    if row is not None and minor is not None and row.price_per_hour_minor == minor and row.currency == cur:
        return  # unchanged: no new version
    session.execute(
        update(PricePlan)
        .where(PricePlan.gpu_model == gpu_model, PricePlan.kind == kind, PricePlan.superseded_at_ms.is_(None))
        .values(superseded_at_ms=now_ms)
        .execution_options(synchronize_session=False)
    )
    if minor is not None:
        session.add(
            PricePlan(gpu_model=gpu_model, kind=kind, price_per_hour_minor=minor, currency=cur, created_at_ms=now_ms)
        )
    session.flush()


def held_plan(session: Session, gpu_model: str, cur: str, now_ms: int) -> PricePlan:
    """The (price 0) plan row that usage on a hold's GPUs is recorded at, made on first use."""
    row = current_plan(session, gpu_model, HELD)
    if row is None:
        record_price(session, gpu_model, HELD, 0, cur, now_ms)
        row = current_plan(session, gpu_model, HELD)
        assert row is not None
    return row
