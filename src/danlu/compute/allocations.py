"""Claiming and releasing GPUs. A GPU is claimed by a conditional UPDATE (``allocation_id IS
NULL``) whose row count must match: two renters racing for the last GPU cannot both win. On
PostgreSQL the candidates are first locked with ``FOR UPDATE SKIP LOCKED`` so racers pick
different rows instead of queueing on the same ones; SQLite serialises writers (BEGIN IMMEDIATE)."""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from danlu.core.errors import InvalidInput, NoCapacity
from danlu.db.models import Gpu


def capacity(session: Session, gpu_model: str) -> tuple[int, int, int]:
    """(free, total, largest count on one host) of present GPUs of a model."""
    rows = session.execute(
        select(Gpu.host_id, func.count(), func.count(Gpu.allocation_id))
        .where(Gpu.model == gpu_model, Gpu.present.is_(True))
        .group_by(Gpu.host_id)
    ).all()
    total = sum(r[1] for r in rows)
    busy = sum(r[2] for r in rows)
    per_host = max((r[1] for r in rows), default=0)
    return total - busy, total, per_host


def claim(
    session: Session, gpu_model: str, count: int, allocation_id: int, host_id: int | None = None
) -> tuple[int, list[Gpu]]:
    """Bind ``count`` free GPUs of ``gpu_model`` on one host (``host_id`` if given, as the
    scheduler decided) to ``allocation_id``; all or none."""
    free, total, per_host = capacity(session, gpu_model)
    if total == 0:
        raise NoCapacity("model_not_offered", f"this platform has no {gpu_model} GPUs; see `danlu offers`")
    if count > per_host:
        raise InvalidInput(
            "count_exceeds_host",
            f"at most {per_host} {gpu_model} GPUs fit on one host; ask for --count {per_host} or fewer",
        )
    free_query = select(Gpu.host_id, func.count()).where(
        Gpu.model == gpu_model, Gpu.present.is_(True), Gpu.allocation_id.is_(None)
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
            .where(Gpu.id.in_(ids), Gpu.allocation_id.is_(None))
            .values(allocation_id=allocation_id)
            .execution_options(synchronize_session=False)
        )
        if result.rowcount == count:  # type: ignore[attr-defined]
            for g in gpus:
                session.expire(g)
            return candidate_host, sorted(gpus, key=lambda g: g.idx)
        raise NoCapacity("no_capacity", f"another rental took the free {gpu_model} GPUs; try again")
    raise NoCapacity(
        "no_capacity",
        f"only {free} of {total} {gpu_model} GPUs are free and {count} {'is' if count == 1 else 'are'} "
        "needed on one host; "
        "try fewer GPUs, another model (`danlu offers`), or later",
        free=free,
        total=total,
    )


def release(session: Session, allocation_id: int) -> None:
    session.execute(
        update(Gpu)
        .where(Gpu.allocation_id == allocation_id)
        .values(allocation_id=None)
        .execution_options(synchronize_session=False)
    )
