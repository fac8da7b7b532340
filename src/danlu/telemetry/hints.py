"""Efficiency hints (docs/telemetry.md "Efficiency hints"): when an instance's GPUs average low
utilisation while its process is busy, say so with the evidence and concrete fixes.

``advise`` is pure: the loop's ``hints`` phase and ``danlu show`` hand it what was measured over
the last ``WINDOW_S`` (the GPUs' mean utilisation, the run's CPU in cores, GPU memory used) and the
priced models. The rule: the GPUs averaged under ``LOW_GPU_PCT`` while the run kept at least
``BUSY_CORES`` of CPU busy. A saturated main thread with a starved GPU is the signature of an input
pipeline that cannot keep up (``DataLoader(num_workers=0)``), of Python overhead between small
kernels, or of host-device copies; the fixes below address those, in that order. A "cheaper GPU"
is one whose dense tensor rate still covers what this one delivered (its rate times the measured
utilisation) and whose memory holds what the run used, at a lower price.
"""

from __future__ import annotations

from dataclasses import dataclass

from danlu.catalog.gpu_models import GpuModel

WINDOW_S = 600
MIN_SAMPLES = 5
LOW_GPU_PCT = 60.0
BUSY_CORES = 0.9


@dataclass(frozen=True)
class Measured:
    gpu_model: str
    gpu_count: int
    gpu_util_pct: float  # mean over the window, all the instance's GPUs
    cpu_cores: float  # the run's CPU, in cores, mean over the window
    allotted_cores: float
    gpu_mem_mb: int | None  # peak per GPU (None: simulated, not measured)
    samples: int
    simulated: bool


def advise(m: Measured, models: dict[str, GpuModel], prices_minor: dict[str, int]) -> list[str]:
    """Hints for ``m``, most useful first; empty when the run uses its GPUs well (or too little was measured)."""
    if m.samples < MIN_SAMPLES or m.gpu_util_pct >= LOW_GPU_PCT or m.cpu_cores < BUSY_CORES:
        return []
    evidence = (
        f"over the last {WINDOW_S // 60} min the GPU{'s' if m.gpu_count > 1 else ''} averaged "
        f"{m.gpu_util_pct:.0f}% while the process kept {m.cpu_cores:.1f} of {m.allotted_cores:g} CPU cores busy"
        + (" (simulated GPUs: their utilisation is the run's CPU share)" if m.simulated else "")
    )
    workers = max(1, int(m.allotted_cores) - 1)
    out = [
        f"input-bound? {evidence}: load data in parallel, e.g. DataLoader(num_workers={workers}, pin_memory=True, "
        "persistent_workers=True, prefetch_factor=4), and move preprocessing onto the GPU",
        "mixed precision: torch.autocast('cuda', dtype=torch.bfloat16) (or fp16 with a GradScaler) halves the "
        "bytes each step moves and uses the tensor cores",
    ]
    here = models.get(m.gpu_model)
    if m.gpu_mem_mb is not None and here is not None and m.gpu_mem_mb < here.vram_gb * 1024 // 2:
        out.append(
            f"a larger batch (or gradient accumulation): it used {m.gpu_mem_mb / 1024:.1f} of {here.vram_gb} GB "
            "of GPU memory; fewer, larger steps spend less time in Python per sample"
        )
    else:
        out.append("a larger batch or gradient accumulation: fewer, larger steps spend less time in Python per sample")
    cheaper = cheaper_gpu(m, models, prices_minor)
    if cheaper is not None:
        out.append(cheaper)
    return out


def cheaper_gpu(m: Measured, models: dict[str, GpuModel], prices_minor: dict[str, int]) -> str | None:
    here = models.get(m.gpu_model)
    price = prices_minor.get(m.gpu_model)
    if here is None or price is None or here.tensor_tflops is None:
        return None
    delivered = here.tensor_tflops * m.gpu_util_pct / 100
    need_gb = (m.gpu_mem_mb or 0) * 1.2 / 1024
    fits = [
        (prices_minor[name], name, g)
        for name, g in models.items()
        if name in prices_minor
        and prices_minor[name] < price
        and g.tensor_tflops is not None
        and g.tensor_tflops >= delivered
        and g.vram_gb >= need_gb
        and (m.gpu_mem_mb is not None or g.vram_gb >= here.vram_gb)  # memory not measured: no smaller card
    ]
    if not fits:
        return None
    cost, name, g = min(fits, key=lambda f: (f[0], f[1]))
    return (
        f"a cheaper GPU: at {m.gpu_util_pct:.0f}% this {m.gpu_model} delivered about {delivered:.0f} of its "
        f"{here.tensor_tflops:.0f} dense TFLOPS; a {name} ({g.tensor_tflops:.0f} TFLOPS, {g.vram_gb} GB) would keep up "
        f"at {cost * 100 // price}% of the price (`danlu offers --gpu {name}`)"
    )
