"""Read side of instances: what ``ps``, ``show``, ``events`` and ``logs`` see, with live cost.
Another tenant's instance, and a job's run, are indistinguishable from a missing one (404)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from danlu.billing.accounts import currency
from danlu.billing.metering import unbilled_minor
from danlu.billing.rating import billable_seconds
from danlu.compute.lifecycle import Status
from danlu.context import Platform
from danlu.core.errors import NotFound
from danlu.db.models import Allocation, Gpu, Instance, InstanceEvent, Price, User


@dataclass
class InstanceView:
    """What the API and CLI show about an instance, with live cost."""

    id: str
    name: str
    status: str
    status_reason: str
    gpu_model: str
    gpu_count: int
    gpu_indices: list[int]
    simulated: bool
    interruptible: bool
    command: list[str]
    exit_code: int | None
    billed_seconds: int
    cost_minor: int
    price_per_hour_minor: int | None
    currency: str
    created_at_ms: int
    image: str = "host"
    sandbox: dict[str, object] | None = None  # what the current/last run was given (uid, limits, network)


def get_owned(session: Session, user: User, instance_id: str, *, for_update: bool = False) -> Instance:
    """The user's instance; ``for_update`` locks its row for the rest of the transaction (every
    write path does, so concurrent start/stop/rm of one instance are serialised on PostgreSQL)."""
    inst = session.get(Instance, instance_id, with_for_update=for_update, populate_existing=for_update)
    if inst is None or inst.user_id != user.id or inst.status == Status.DESTROYED or inst.job_id is not None:
        # Another tenant's instance is indistinguishable from a missing one.
        raise NotFound("instance_not_found", f"no instance {instance_id!r}; list yours with `danlu ps`")
    return inst


@dataclass(frozen=True)
class _Context:
    """What every row of a listing shares, read once per request."""

    currency: str
    now_ms: int
    simulated_models: frozenset[str]
    prices: dict[str, int]

    @classmethod
    def read(cls, s: Session, now_ms: int) -> _Context:
        simulated = frozenset(s.scalars(select(Gpu.model).where(Gpu.simulated.is_(True)).distinct()))
        prices = {m: v for m, v in s.execute(select(Price.gpu_model, Price.price_per_hour_minor)).all()}
        return cls(currency(s), now_ms, simulated, prices)


def _view(inst: Instance, allocs: list[Allocation], ctx: _Context) -> InstanceView:
    now_ms = ctx.now_ms
    billed_seconds = sum(
        billable_seconds(a.started_at_ms, a.ended_at_ms if a.ended_at_ms is not None else now_ms) for a in allocs
    )
    cost = sum(a.billed_minor + (0 if a.settled else unbilled_minor(a, now_ms)) for a in allocs)
    current = next((a for a in allocs if a.id == inst.current_allocation_id), None)
    return InstanceView(
        id=inst.id,
        name=inst.name,
        status=inst.status,
        status_reason=inst.status_reason,
        gpu_model=inst.gpu_model,
        gpu_count=inst.gpu_count,
        gpu_indices=[int(i) for i in current.gpu_indices.split(",") if i] if current else [],
        simulated=inst.gpu_model in ctx.simulated_models,
        interruptible=inst.interruptible,
        command=json.loads(inst.command_json),
        exit_code=inst.exit_code,
        billed_seconds=billed_seconds,
        cost_minor=cost,
        price_per_hour_minor=current.price_per_hour_minor if current else ctx.prices.get(inst.gpu_model),
        currency=ctx.currency,
        created_at_ms=inst.created_at_ms,
        image=inst.image,
        sandbox=json.loads(inst.sandbox_json) if inst.sandbox_json else None,
    )


def show(p: Platform, user: User, instance_id: str) -> InstanceView:
    with p.db.read() as s:
        inst = get_owned(s, user, instance_id)
        allocs = list(s.scalars(select(Allocation).where(Allocation.instance_id == inst.id)))
        return _view(inst, allocs, _Context.read(s, p.clock.now_ms()))


def list_instances(p: Platform, user: User, include_destroyed: bool = False) -> list[InstanceView]:
    with p.db.read() as s:
        stmt = (
            select(Instance)
            .where(Instance.user_id == user.id, Instance.job_id.is_(None))
            .order_by(Instance.created_at_ms)
        )
        if not include_destroyed:
            stmt = stmt.where(Instance.status != Status.DESTROYED.value)
        insts = list(s.scalars(stmt))
        by_inst: dict[str, list[Allocation]] = {}
        if insts:
            ids = [i.id for i in insts]
            for a in s.scalars(select(Allocation).where(Allocation.instance_id.in_(ids))):
                by_inst.setdefault(a.instance_id, []).append(a)
        ctx = _Context.read(s, p.clock.now_ms())
        return [_view(i, by_inst.get(i.id, []), ctx) for i in insts]


def events(p: Platform, user: User, instance_id: str) -> list[InstanceEvent]:
    with p.db.read() as s:
        inst = get_owned(s, user, instance_id)
        return list(
            s.scalars(select(InstanceEvent).where(InstanceEvent.instance_id == inst.id).order_by(InstanceEvent.id))
        )


def read_log(p: Platform, user: User, instance_id: str, offset: int) -> tuple[str, int]:
    """A chunk of the instance's captured stdout/stderr from byte ``offset``; returns (text, next)."""
    with p.db.read() as s:
        get_owned(s, user, instance_id)
    return p.backend.read_output(instance_id, offset)
