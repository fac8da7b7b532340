"""Bounded retention of samples (docs/telemetry.md): raw rows for ``raw_s``, then 1-minute rows for
``minute_s``, then 1-hour rows for ``hour_s``, then nothing. Each step folds whole buckets older
than its cutoff into one row per (instance, GPU, bucket) — averages weighted by sample count, the
utilisation's maximum kept — and deletes what it folded, in one transaction."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Integer, and_, case, cast, delete, func, insert, literal, select
from sqlalchemy.orm import Session

from danlu.context import Platform, Retention
from danlu.db.models import MetricSample

MINUTE_MS = 60_000
HOUR_MS = 3_600_000
FOLDED = ["instance_id", "gpu_index", "at_ms", "res", "samples", "util_pm", "util_max_pm", "mem_mb", "power_mw",
          "temp_c", "simulated", "disk_mb", "net_rx_bytes", "net_tx_bytes"]  # fmt: skip


def _weighted(column: Any) -> Any:
    weight = MetricSample.samples
    counted = func.sum(case((column.is_(None), None), else_=weight))  # rows that measured it
    return cast(func.round(func.sum(column * weight) * 1.0 / counted), Integer)


def _fold(s: Session, src: str, dst: str, bucket_ms: int, cutoff_ms: int) -> int:
    """Fold ``src`` rows of whole buckets before ``cutoff_ms`` into ``dst`` rows; returns rows folded."""
    old = and_(MetricSample.res == src, MetricSample.at_ms < cutoff_ms - cutoff_ms % bucket_ms)
    bucket = (MetricSample.at_ms // bucket_ms) * bucket_ms  # integer division on both databases
    folded = (
        select(
            MetricSample.instance_id,
            MetricSample.gpu_index,
            bucket,
            literal(dst),
            func.sum(MetricSample.samples),
            _weighted(MetricSample.util_pm),
            func.max(MetricSample.util_max_pm),
            _weighted(MetricSample.mem_mb),
            _weighted(MetricSample.power_mw),
            _weighted(MetricSample.temp_c),
            func.max(cast(MetricSample.simulated, Integer)) > 0,
            _weighted(MetricSample.disk_mb),
            func.max(MetricSample.net_rx_bytes),  # counters: the bucket's last reading is its largest
            func.max(MetricSample.net_tx_bytes),
        )
        .where(old)
        .group_by(MetricSample.instance_id, MetricSample.gpu_index, bucket)
    )
    s.execute(insert(MetricSample).from_select(FOLDED, folded))
    result = s.execute(delete(MetricSample).where(old).execution_options(synchronize_session=False))
    return int(result.rowcount)  # type: ignore[attr-defined]


def downsample(p: Platform, retention: Retention = Retention()) -> int:
    """One retention pass; returns how many rows were folded into coarser ones."""
    now = p.clock.now_ms()
    with p.db.write() as s:
        n = _fold(s, "raw", "1m", MINUTE_MS, now - retention.raw_s * 1000)
        n += _fold(s, "1m", "1h", HOUR_MS, now - retention.minute_s * 1000)
        s.execute(
            delete(MetricSample)
            .where(MetricSample.res == "1h", MetricSample.at_ms < now - retention.hour_s * 1000)
            .execution_options(synchronize_session=False)
        )
    return n
