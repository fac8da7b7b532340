"""Memory model: bytes each GPU needs for a workload, broken down the way renters reason about it.

Model states follow the ZeRO paper's accounting (Rajbhandari et al. 2020): mixed-precision Adam
keeps 2 bytes of fp16/bf16 weights, 2 of gradients and K = 12 of optimizer state (fp32 master
weights, momentum, variance) per parameter: 16 bytes. ZeRO-1/2/3 (and FSDP) divide the optimizer
state, then gradients, then weights by the number of GPUs. Transformer activations follow
Korthikanti et al. 2022 (34·s·b·h bytes per layer in 16-bit with fused/flash attention; 2·s·b·h
per layer with full activation checkpointing). QLoRA stores the frozen base in 4-bit NF4 with
double-quantised constants, 4.127 bits per parameter (Dettmers et al. 2023).

Units: bytes inside; ``GB`` in results means 10^9 bytes, as in the ZeRO paper. A GPU's capacity is
its table VRAM in GiB (NVIDIA's "80GB" is 80 GiB) converted to the same unit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from danlu.advisor.workload import Workload
from danlu.catalog.gpu_models import GpuModel

GB = 1e9
GIB = 2**30
CUDA_CONTEXT_BYTES = 1.0 * GB  # CUDA context, cuBLAS/cuDNN workspaces (measured 0.5–1.5 GB in practice)
FRAGMENTATION = 0.05  # caching-allocator slack on top of states and activations

WEIGHT_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "int8": 1.0, "int4": 0.5}
NF4_BYTES = 4.127 / 8
# Optimizer state per trainable parameter: mixed precision includes the fp32 master copy (4 bytes).
OPTIMIZER_BYTES_MIXED = {"adamw": 12.0, "adam": 12.0, "sgd": 8.0, "adam8bit": 6.0}
OPTIMIZER_BYTES_FP32 = {"adamw": 8.0, "adam": 8.0, "sgd": 4.0, "adam8bit": 2.0}


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """Bytes per GPU."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    overhead: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.overhead

    def as_gb(self) -> dict[str, float]:
        return {
            "weights": round(self.weights / GB, 2),
            "gradients": round(self.gradients / GB, 2),
            "optimizer": round(self.optimizer / GB, 2),
            "activations": round(self.activations / GB, 2),
            "overhead": round(self.overhead / GB, 2),
            "total": round(self.total / GB, 2),
        }


def lora_params(w: Workload) -> float:
    """Adapter parameters: rank r on all linear layers of a LLaMA-like block, r·19·h per layer.

    (q, k, v, o: 4 × r·2h; gate, up, down with ffn = 8h/3: 3 × r·(h + 8h/3) = r·11h.) Conv nets: 1% of params.
    """
    if w.arch.kind == "transformer" and w.arch.hidden:
        return float(w.lora_rank * 19 * w.arch.hidden * w.arch.layers)
    return 0.01 * w.params


def model_states(w: Workload, gpu_count: int) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per GPU."""
    n = max(1, gpu_count)
    if not w.training:
        return w.params * WEIGHT_BYTES[w.precision] / n, 0.0, 0.0  # tensor/pipeline parallel split
    opt_table = OPTIMIZER_BYTES_MIXED if w.mixed else OPTIMIZER_BYTES_FP32
    grad_bytes = 2.0 if w.mixed else 4.0
    if w.adapter == "none":
        base, trainable = 0.0, w.params
        weight_bytes = 2.0 if w.mixed else 4.0
    else:
        trainable = lora_params(w)
        base = w.params * (NF4_BYTES if w.adapter == "qlora" else WEIGHT_BYTES[w.precision])
        weight_bytes = 4.0  # adapters are kept in fp32 (PEFT default), so no separate master copy
        opt_table = OPTIMIZER_BYTES_FP32
        grad_bytes = 4.0
    weights = base + trainable * weight_bytes
    grads = trainable * grad_bytes
    opt = trainable * opt_table[w.optimizer]
    stage = {"auto": 0, "ddp": 0, "zero1": 1, "zero2": 2, "zero3": 3}[w.sharding] if n > 1 else 0
    if stage >= 1:
        opt /= n
    if stage >= 2:
        grads /= n
    if stage >= 3:
        weights /= n
    return weights, grads, opt


def activation_bytes(w: Workload, gpu_count: int = 1) -> float:
    """Activation memory per GPU for one micro-batch (gradient accumulation does not add to it).

    Training is data parallel, so every GPU holds its own micro-batch's activations; inference splits
    the model (tensor parallel), so the KV cache is split over the GPUs too.
    """
    a = w.arch
    b = w.micro_batch
    scale = 1.0 if w.precision != "fp32" else 2.0
    if a.kind == "conv":
        per_sample = a.act_bytes_per_sample * (w.image_size / a.ref_image) ** 2 * scale
        if not w.training:
            return per_sample * b * 0.1  # no stored activations, only the live layer's buffers
        return per_sample * b * (0.3 if w.checkpointing else 1.0)
    s, h, layers = w.seq_len, a.hidden, a.layers
    if not w.training:
        kv_cache = 2 * layers * h * s * b * 2.0  # K and V per layer, fp16
        return kv_cache / max(1, gpu_count) + 34 * s * b * h * scale  # + one layer's working set
    logits = 6.0 * s * b * a.vocab  # bf16 logits + fp32 copy for the loss
    if w.checkpointing:
        return 2 * s * b * h * layers * scale + 34 * s * b * h * scale + logits
    return 34 * s * b * h * layers * scale + logits


def estimate(w: Workload, gpu_count: int = 1) -> MemoryBreakdown:
    weights, grads, opt = model_states(w, gpu_count)
    acts = activation_bytes(w, gpu_count)
    overhead = CUDA_CONTEXT_BYTES + FRAGMENTATION * (weights + grads + opt + acts)
    return MemoryBreakdown(weights, grads, opt, acts, overhead)


TIGHT_HEADROOM = 0.03  # under 3 % of the card left: fits on paper, but fragmentation or a longer batch will not


def capacity_bytes(gpu: GpuModel) -> float:
    """The card's memory: its name's "80GB" is binary (80 GiB = 85.9 GB); the CUDA context is in the
    estimate, and the driver's own reserve is well under 1 % (143,771 of 144,384 MiB on an H200)."""
    return gpu.vram_gb * GIB


def headroom(need_bytes: float, capacity: float) -> float:
    """The fraction of the card left after ``need_bytes`` (negative: does not fit)."""
    return 1.0 - need_bytes / capacity


def fits(w: Workload, gpu: GpuModel, gpu_count: int = 1) -> bool:
    return estimate(w, gpu_count).total <= capacity_bytes(gpu)


def min_gpus_to_fit(w: Workload, gpu: GpuModel, limit: int = 64) -> int | None:
    """Smallest power-of-two GPU count that fits with ZeRO-3 sharding (inference: tensor parallel)."""
    sharded = w.with_(sharding="zero3") if w.training else w
    n = 1
    while n <= limit:
        if fits(sharded, gpu, n):
            return n
        n *= 2
    return None


def fixes(w: Workload, gpu: GpuModel, gpu_count: int) -> list[str]:
    """Single changes, cheapest in effort first, each of which would make ``w`` fit on ``gpu`` × count."""
    candidates: list[tuple[str, Workload]] = []
    if w.precision == "fp32":
        candidates.append(("use bf16 mixed precision (--precision bf16)", w.with_(precision="bf16")))
    if w.training and not w.checkpointing:
        candidates.append(
            ("turn on activation checkpointing (--checkpointing, ~33% slower)", w.with_(checkpointing=True))
        )
    if w.micro_batch > 1:
        accum = w.grad_accum * w.micro_batch
        candidates.append(
            (
                f"micro-batch 1 with gradient accumulation {accum} (--micro-batch 1 --grad-accum {accum})",
                w.with_(micro_batch=1, grad_accum=accum),
            )
        )
    if w.training and w.optimizer in ("adam", "adamw"):
        candidates.append(("use 8-bit Adam (--optimizer adam8bit)", w.with_(optimizer="adam8bit")))
    if w.training and gpu_count > 1 and w.sharding not in ("zero3", "auto"):
        candidates.append(("shard all states with ZeRO-3/FSDP (--sharding zero3)", w.with_(sharding="zero3")))
    if w.training and w.adapter == "none":
        candidates.append(("fine-tune with LoRA adapters (--adapter lora)", w.with_(adapter="lora")))
    if w.training and w.adapter != "qlora":
        candidates.append(
            (
                "fine-tune with QLoRA (--adapter qlora --checkpointing)",
                w.with_(adapter="qlora", checkpointing=True),
            )
        )
    if not w.training and w.precision not in ("int8", "int4"):
        candidates.append(("quantise weights to int8 (--precision int8)", w.with_(precision="int8")))
        candidates.append(("quantise weights to int4 (--precision int4)", w.with_(precision="int4")))
    out = [text for text, changed in candidates if fits(changed, gpu, gpu_count)]
    more = min_gpus_to_fit(w, gpu)
    if more is not None and more > gpu_count:
        out.append(f"use {more} GPUs" + (" with --sharding zero3" if w.training else ""))
    return out


def round_up_gb(value_bytes: float) -> float:
    return math.ceil(value_bytes / GB * 100) / 100
