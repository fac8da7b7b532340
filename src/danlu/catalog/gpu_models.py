"""The GPU-model table shipped in ``gpu_models.csv`` and the mapping from NVML names onto it."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from danlu.core.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class GpuModel:
    name: str
    vram_gb: int
    fp32_tflops: float
    tensor_tflops: float | None
    mem_bw_gbps: float
    tdp_w: int
    architecture: str
    source: str
    nvml_patterns: tuple[re.Pattern[str], ...]
    l2_cache_mb: float  # L2 cache, MB (issue 31): a term of the advisor's time model
    l2_source: str


def _rows() -> list[dict[str, str]]:
    text = resources.files("danlu.catalog").joinpath("gpu_models.csv").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return list(csv.DictReader(lines))


@cache
def gpu_models() -> dict[str, GpuModel]:
    """All known GPU models by canonical name, in table order (newest and largest first)."""
    out: dict[str, GpuModel] = {}
    for row in _rows():
        out[row["model"]] = GpuModel(
            name=row["model"],
            vram_gb=int(row["vram_gb"]),
            fp32_tflops=float(row["fp32_tflops"]),
            tensor_tflops=float(row["tensor_tflops"]) if row["tensor_tflops"] else None,
            mem_bw_gbps=float(row["mem_bw_gbps"]),
            tdp_w=int(row["tdp_w"]),
            architecture=row["architecture"],
            source=row["source"],
            nvml_patterns=tuple(re.compile(p, re.IGNORECASE) for p in row["nvml_patterns"].split(";")),
            l2_cache_mb=float(row["l2_cache_mb"]),
            l2_source=row["l2_source"],
        )
    return out


def model_for_nvml_name(nvml_name: str) -> GpuModel | None:
    """Map an NVML device name ("NVIDIA A100-SXM4-80GB", "Tesla T4") to a table row, or None."""
    for model in gpu_models().values():
        if any(p.search(nvml_name) for p in model.nvml_patterns):
            return model
    return None


def resolve_model(name: str) -> GpuModel:
    """A user-typed model name (case-insensitive, '_' or ' ' for '-') to a table row."""
    key = name.strip().upper().replace("_", "-").replace(" ", "-")
    models = gpu_models()
    for model in models.values():
        if model.name.upper() == key:
            return model
    family = [m for m in models.values() if m.name.upper().startswith(key + "-")]
    if len(family) == 1:
        return family[0]
    if family:
        names = ", ".join(m.name for m in family)
        raise InvalidInput("ambiguous_gpu_model", f"{name!r} is a family ({names}); name one of them")
    known = ", ".join(models)
    raise InvalidInput("unknown_gpu_model", f"unknown GPU model {name!r}; known models: {known}")
