"""Efficiency hints from the samples (the I/O around danlu.telemetry.hints): what an instance's
last ``WINDOW_S`` measured, its hints for ``danlu show``, and the loop's ``hints`` phase that puts
them in the event feed once per run (``efficiency_hint``)."""

from __future__ import annotations

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from danlu.catalog.gpu_models import gpu_models
from danlu.compute.lifecycle import Status
from danlu.context import Platform
from danlu.db.models import AllocationRow, Event, Instance, MetricSample, Price
from danlu.telemetry.hints import WINDOW_S, Measured, advise
from danlu.telemetry.sampler import RUN, allotted_cores


def measure(s: Session, inst: Instance, now_ms: int) -> Measured:
    since = now_ms - WINDOW_S * 1000
    rows = s.execute(
        select(
            MetricSample.gpu_index,
            func.avg(MetricSample.util_pm),
            func.max(MetricSample.mem_mb),
            func.count(),
            func.sum(case((MetricSample.simulated, 1), else_=0)),
        )
        .where(MetricSample.instance_id == inst.id, MetricSample.res == "raw", MetricSample.at_ms > since)
        .group_by(MetricSample.gpu_index)
    ).all()
    cores = allotted_cores(inst.sandbox_json, inst.gpu_count)
    run = next((r for r in rows if r[0] == RUN), None)
    gpus = [r for r in rows if r[0] != RUN]
    util = sum(float(r[1] or 0) for r in gpus) / len(gpus) / 10 if gpus else 0.0
    mems = [int(r[2]) for r in gpus if r[2] is not None]
    return Measured(
        gpu_model=inst.gpu_model,
        gpu_count=inst.gpu_count,
        gpu_util_pct=util,
        cpu_cores=float(run[1] or 0) / 1000 * cores if run else 0.0,
        allotted_cores=cores,
        gpu_mem_mb=max(mems) if mems else None,
        samples=min((int(r[3]) for r in rows), default=0),
        simulated=any(bool(r[4]) for r in gpus),
    )


def _prices(s: Session) -> dict[str, int]:
    return {m: int(v) for m, v in s.execute(select(Price.gpu_model, Price.price_per_hour_minor)).all()}


def _hints(s: Session, instance_id: str, now_ms: int, prices: dict[str, int]) -> list[str]:
    inst = s.get(Instance, instance_id)
    if inst is None or inst.status != Status.RUNNING.value:
        return []
    return advise(measure(s, inst, now_ms), gpu_models(), prices)


def hints_for(p: Platform, instance_id: str) -> list[str]:
    """The hints a running instance's samples give now ([] when stopped or using its GPUs well)."""
    with p.db.read() as s:
        return _hints(s, instance_id, p.clock.now_ms(), _prices(s))


def emit(p: Platform) -> int:
    """An ``efficiency_hint`` event for each running instance whose run earned hints and has none
    yet in this run (its current allocation's start); returns how many were added."""
    now = p.clock.now_ms()
    added = 0
    with p.db.read() as s:
        running = s.execute(
            select(Instance.id, AllocationRow.started_at_ms)
            .join(AllocationRow, AllocationRow.id == Instance.current_allocation_id)
            .where(Instance.status == Status.RUNNING.value, AllocationRow.started_at_ms <= now - WINDOW_S * 1000)
        ).all()
        prices = _prices(s) if running else {}
        hinted = [(i, start, h) for i, start in running if (h := _hints(s, i, now, prices))]
    for instance_id, run_start, hints in hinted:
        with p.db.write() as s:
            said = s.execute(
                select(Event.id).where(
                    Event.instance_id == instance_id, Event.kind == "efficiency_hint", Event.at_ms >= run_start
                )
            ).first()
            inst = s.get(Instance, instance_id)
            if said is not None or inst is None:
                continue
            s.add(Event.about_instance(inst, "efficiency_hint", "; ".join(hints), now))
            added += 1
    return added
