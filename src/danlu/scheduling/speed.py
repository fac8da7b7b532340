"""How long a job runs on each GPU model: measured throughput when known, else GPU specs.

* Measured: steps/s per (job type, GPU count) and GPU model (Gavel's isolated throughputs);
  duration = remaining steps / steps per second. A throughput of 0 means "cannot run there".
* Specs: a duration measured (or estimated by the user) on a reference model scales by the ratio
  of FP32 TFLOPS from :mod:`danlu.catalog.gpu_models` (the only figure every row has).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from danlu.catalog.gpu_models import gpu_models, resolve_model


@dataclass(frozen=True, slots=True)
class ThroughputTable:
    """steps/s by (job type, gpus) then GPU model name. ``spread``: the same, measured with the
    gang's GPUs on different servers (Gavel's "unconsolidated" columns), where the table has it."""

    rates: Mapping[tuple[str, int], Mapping[str, float]] = field(default_factory=dict)
    spread: Mapping[tuple[str, int], Mapping[str, float]] = field(default_factory=dict)

    def lookup(self, job_type: str, gpus: int) -> Mapping[str, float] | None:
        return self.rates.get((job_type, gpus))

    def lookup_spread(self, job_type: str, gpus: int) -> Mapping[str, float]:
        return self.spread.get((job_type, gpus), {})


def load_throughputs(path: Path) -> ThroughputTable:
    """Read Gavel's flattened CSV (``job_type, scale_factor, k80_steps_per_s, …,
    k80_unconsolidated_steps_per_s, …``); an empty or missing cell is "not measured"."""
    rates: dict[tuple[str, int], dict[str, float]] = {}
    spread: dict[tuple[str, int], dict[str, float]] = {}
    with path.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            key = (row["job_type"], int(row["scale_factor"]))
            per_model: dict[str, float] = {}
            per_model_spread: dict[str, float] = {}
            for column, value in row.items():
                if not column.endswith("_steps_per_s") or not (value or "").strip():
                    continue
                name = column.removesuffix("_steps_per_s")
                if name.endswith("_unconsolidated"):
                    if key[1] > 1 and float(value) > 0:  # one GPU is never spread
                        per_model_spread[resolve_model(name.removesuffix("_unconsolidated")).name] = float(value)
                else:
                    per_model[resolve_model(name).name] = float(value)
            rates[key] = per_model
            if per_model_spread:
                spread[key] = per_model_spread
    return ThroughputTable(rates, spread)


def spec_speed(model: str) -> float:
    row = gpu_models().get(model) or resolve_model(model)
    return row.fp32_tflops


def durations_from_steps(steps: float, rates: Mapping[str, float], models: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for model in models:
        rate = rates.get(model, 0.0)
        if rate > 0 and steps > 0:
            out[model] = max(1, round(steps / rate * 1000))
    return out


def durations_from_reference(duration_ms: int, reference_model: str, models: Iterable[str]) -> dict[str, int]:
    ref = spec_speed(reference_model)
    return {m: max(1, round(duration_ms * ref / spec_speed(m))) for m in models}
