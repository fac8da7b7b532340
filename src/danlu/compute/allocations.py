"""Claiming and releasing GPUs. A GPU is claimed by a conditional UPDATE (``allocation_id IS
NULL``) whose row count must match: two renters racing for the last GPU cannot both win. On
PostgreSQL the candidates are first locked with ``FOR UPDATE SKIP LOCKED`` so racers pick
different rows instead of queueing on the same ones; SQLite serialises writers (BEGIN IMMEDIATE)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import case, func, or_, select, update
from sqlalchemy.orm import Session

from danlu.compute.lifecycle import HoldState
from danlu.core.errors import InvalidInput, NoCapacity
from danlu.db.models import Gpu, Hold

# Per group: GPUs in use or held (a held GPU in use counts once). Offers and the scheduler count so too.
# A GPU the cluster's own jobs hold (Slurm) is busy too.
BUSY = func.sum(
    case((or_(Gpu.allocation_id.is_not(None), Gpu.hold_id.is_not(None), Gpu.held_by_cluster.is_(True)), 1), else_=0)
)


def capacity(session: Session, gpu_model: str) -> tuple[int, int, int]:
    """(free, total, largest count on one host) of present GPUs of a model; a GPU kept by a
    package or reservation (``hold_id``) is not free, even while nothing runs on it."""
    rows = session.execute(
        select(Gpu.host_id, func.count(), BUSY)
        .where(Gpu.model == gpu_model, Gpu.present.is_(True))
        .group_by(Gpu.host_id)
    ).all()
    total = sum(r[1] for r in rows)
    busy = sum(int(r[2] or 0) for r in rows)
    per_host = max((r[1] for r in rows), default=0)
    return total - busy, total, per_host


def host_totals(session: Session, gpu_model: str) -> dict[int, int]:
    """Host id -> its present GPUs of ``gpu_model``."""
    rows = session.execute(
        select(Gpu.host_id, func.count()).where(Gpu.model == gpu_model, Gpu.present.is_(True)).group_by(Gpu.host_id)
    ).all()
    return {int(host_id): int(n) for host_id, n in rows}


def _fits(session: Session, gpu_model: str, count: int) -> tuple[int, int]:
    """(free, total) of the model, after checking it exists here and ``count`` fit on one host."""
    free, total, per_host = capacity(session, gpu_model)
    if total == 0:
        raise NoCapacity("model_not_offered", f"this platform has no {gpu_model} GPUs; see `danlu offers`")
    if count > per_host:
        raise InvalidInput(
            "count_exceeds_host",
            f"at most {per_host} {gpu_model} GPUs fit on one host; ask for --count {per_host} or fewer",
        )
    return free, total


def claim(
    session: Session,
    gpu_model: str,
    count: int,
    allocation_id: int,
    host_id: int | None = None,
    *,
    hold_id: str | None = None,
) -> tuple[int, list[Gpu]]:
    """Bind ``count`` free GPUs of ``gpu_model`` on one host (``host_id`` if given, as the
    scheduler decided) to ``allocation_id``; all or none. With ``hold_id``: GPUs that hold keeps
    and nothing runs on (a rental on its account's package or reservation)."""
    free, total = _fits(session, gpu_model, count)
    pool = Gpu.hold_id.is_(None) if hold_id is None else Gpu.hold_id == hold_id
    found = _take(session, gpu_model, count, host_id, pool, {"allocation_id": allocation_id})
    if found is not None:
        return found
    raise NoCapacity(
        "no_capacity",
        f"only {free} of {total} {gpu_model} GPUs are free and {count} {'is' if count == 1 else 'are'} "
        "needed on one host; "
        "try fewer GPUs, another model (`danlu offers`), or later",
        free=free,
        total=total,
    )


def hold(session: Session, gpu_model: str, count: int, hold_id: str) -> tuple[int, list[Gpu]]:
    """Keep ``count`` free GPUs of ``gpu_model`` on one host for ``hold_id`` (a package or a
    reservation); all or none, by the same conditional UPDATE as a claim."""
    free, total = _fits(session, gpu_model, count)
    found = _take(session, gpu_model, count, None, Gpu.hold_id.is_(None), {"hold_id": hold_id})
    if found is not None:
        return found
    raise NoCapacity(
        "no_capacity",
        f"only {free} of {total} {gpu_model} GPUs are free now and a hold needs {count} on one host; "
        "try fewer GPUs, another model (`danlu offers`), or later",
        free=free,
        total=total,
    )


def _take(
    session: Session, gpu_model: str, count: int, host_id: int | None, pool: Any, values: dict[str, object]
) -> tuple[int, list[Gpu]] | None:
    """Set ``values`` on ``count`` GPUs of ``pool`` with nothing running on them, on one host
    (best fit); None when no host has enough. Racers lose by the guarded UPDATE's row count."""
    free_query = select(Gpu.host_id, func.count()).where(
        Gpu.model == gpu_model, Gpu.present.is_(True), Gpu.allocation_id.is_(None), Gpu.held_by_cluster.is_(False), pool
    )
    if host_id is not None:
        free_query = free_query.where(Gpu.host_id == host_id)
    free_by_host = session.execute(
        free_query.group_by(Gpu.host_id)
        .having(func.count() >= count)
        .order_by(func.count())  # best fit: keep big hosts free for big gangs
    ).all()
    for candidate_host, _ in free_by_host:
        stmt = (
            select(Gpu)
            .where(
                Gpu.host_id == candidate_host,
                Gpu.model == gpu_model,
                Gpu.present.is_(True),
                Gpu.allocation_id.is_(None),
                Gpu.held_by_cluster.is_(False),
                pool,
            )
            .order_by(Gpu.idx)
            .limit(count)
        )
        if session.bind is not None and session.bind.dialect.name == "postgresql":
            stmt = stmt.with_for_update(skip_locked=True)
        gpus = list(session.scalars(stmt))
        if len(gpus) < count:
            continue
        ids = [g.id for g in gpus]
        result = session.execute(
            update(Gpu)
            .where(Gpu.id.in_(ids), Gpu.allocation_id.is_(None), Gpu.held_by_cluster.is_(False), pool)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        if result.rowcount == count:  # type: ignore[attr-defined]
            for g in gpus:
                session.expire(g)
            return candidate_host, sorted(gpus, key=lambda g: g.idx)
        raise NoCapacity("no_capacity", f"another rental took the free {gpu_model} GPUs; try again")
    return None


def unhold(session: Session, hold_id: str) -> None:
    """The hold ended: its GPUs are free again once nothing runs on them."""
    session.execute(
        update(Gpu).where(Gpu.hold_id == hold_id).values(hold_id=None).execution_options(synchronize_session=False)
    )


def release(session: Session, allocation_id: int) -> None:
    session.execute(
        update(Gpu)
        .where(Gpu.allocation_id == allocation_id)
        .values(allocation_id=None)
        .execution_options(synchronize_session=False)
    )


def usable_hold(session: Session, billing_account_id: int, gpu_model: str, count: int, now_ms: int) -> Hold | None:
    """An active hold (package or reservation) of the payer with ``count`` of its GPUs idle, for a
    rental of ``gpu_model`` to run on, locked (the caller holds the payer's cash row); the one
    ending first. None when there is none (the rental takes free GPUs at its own plan)."""
    candidates = session.scalars(
        select(Hold.id)
        .where(
            Hold.billing_account_id == billing_account_id,
            Hold.gpu_model == gpu_model,
            Hold.state == HoldState.ACTIVE,
            Hold.starts_at_ms <= now_ms,
            Hold.ends_at_ms > now_ms,
            Hold.gpu_count >= count,
        )
        .order_by(Hold.ends_at_ms, Hold.id)
    ).all()
    for hold_id in candidates:
        h = session.get(Hold, hold_id, with_for_update=True, populate_existing=True)
        if h is None or h.state != HoldState.ACTIVE or h.ends_at_ms <= now_ms:
            continue
        idle = session.execute(
            select(func.count(Gpu.id)).where(Gpu.hold_id == h.id, Gpu.allocation_id.is_(None), Gpu.present.is_(True))
        ).scalar_one()
        if idle >= count:
            return h
    return None
