"""Time model: FLOPs of the work × fitted seconds-per-FLOP of a GPU, scaled over N GPUs.

Training FLOPs are 6·P per token (Kaplan et al. 2020: 2 forward + 4 backward), plus 2·P with
activation checkpointing (one more forward); LoRA/QLoRA skip the frozen weights' gradient, 4·P.
Inference is 2·P per token, or the time to stream the weights once per decoding step when that is
longer (memory-bound decoding). The seconds-per-FLOP of each GPU come from the utilisation
factors in ``throughput_factors.csv``, fitted on Lambda's measured throughputs
(benchmarks/advisor_accuracy.py): transformers use the BERT-large factors, conv nets ResNet-50's.
Over N GPUs each GPU runs at ``efficiency``: the scaling curve measured on the GPU, or on the most
similar measured GPU (calibration.scaling_points: monotone, at most 1.0) times the share of a
training step not lost to moving gradients and parameters over the GPUs' link
(advisor/interconnect.py). One GPU is pure compute.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

from danlu.advisor import interconnect
from danlu.advisor.calibration import Factors, sample_seconds, scaling_efficiency, scaling_points
from danlu.advisor.memory import WEIGHT_BYTES
from danlu.advisor.workload import Workload
from danlu.catalog.gpu_models import GpuModel, gpu_models
from danlu.core.errors import InvalidInput

# FLOPs of one Lambda benchmark sample, to turn per-sample factors into per-FLOP ones.
REFERENCE_WORKLOADS = {
    "transformer": ("bert_large_squad", 6 * 335e6 * 384),  # BERT-large, SQuAD sequence length 384
    "conv": ("resnet50", 3 * 8.2e9),  # ResNet-50 at 224², 4.1 GMACs forward
}


@cache
def shipped_factors() -> dict[tuple[str, str], Factors]:
    text = resources.files("danlu.advisor").joinpath("throughput_factors.csv").read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    out: dict[tuple[str, str], Factors] = {}
    for ln in lines[1:]:
        w, p, cm, cv, cb, cl, scaling, spread, rows = ln.split(",")
        pts = tuple((g, int(n), float(e)) for g, n, e in (x.split(":") for x in scaling.split(";") if x))
        cells = (x.split(":") for x in spread.split(";") if x)
        band = tuple((g, int(n), float(lo), float(hi), int(k)) for g, n, lo, hi, k in cells)
        out[(w, p)] = Factors(w, p, float(cm), float(cv), float(cb), pts, int(rows), float(cl), band)
    return out


@cache
def _curve(workload: str, precision: str, gpu: str) -> tuple[tuple[int, float], ...]:
    """The shipped scaling curve of one GPU model (cached: the advisor asks for it per option and count)."""
    models = gpu_models()
    return scaling_points(shipped_factors()[(workload, precision)], models[gpu], models)


def scaling_curve(w: Workload, gpu: GpuModel) -> tuple[tuple[int, float], ...]:
    """(gpu_count, per-GPU efficiency) points of ``w``'s reference workload on ``gpu``, before the interconnect."""
    f = _factors_for(w)
    return _curve(f.workload, f.precision, gpu.name)


@dataclass(frozen=True, slots=True)
class Spread:
    """How differently identical GPUs scaled: the lowest and highest per-GPU efficiency measured on ``machines``
    machines of one GPU model at one GPU count, for the workload the advisor's estimate is built on (issue 31).
    The estimate itself uses their median."""

    lowest: float
    highest: float
    machines: int
    workload: str

    def text(self, gpu_count: int) -> str:
        return (
            f"{gpu_count} GPUs: {self.lowest:.2f}–{self.highest:.2f} per GPU measured on {self.machines} machines "
            f"of this model ({self.workload})"
        )


def measured_spread(w: Workload, gpu: GpuModel, gpu_count: int) -> Spread | None:
    """The measured spread of ``gpu_count`` × ``gpu`` on ``w``'s reference workload, where the data has one."""
    f = _factors_for(w)
    for name, n, lo, hi, k in f.spread:
        if name == gpu.name and n == gpu_count:
            return Spread(lo, hi, k, f"{f.workload} {f.precision}")
    return None


def work_flops(w: Workload) -> float:
    """Total FLOPs of the workload (all epochs)."""
    units = w.work_tokens()
    if w.arch.kind == "conv":
        per = w.arch.fwd_flops_per_sample * (w.image_size / w.arch.ref_image) ** 2
        mult = 1.0 if not w.training else (3.0 + (1.0 if w.checkpointing else 0.0))
        return units * per * mult
    if not w.training:
        return 2.0 * w.params * units
    mult = 6.0 if w.adapter == "none" else 4.0
    return units * w.params * (mult + (2.0 if w.checkpointing else 0.0))


def _factors_for(w: Workload) -> Factors:
    name, _ = REFERENCE_WORKLOADS[w.arch.kind]
    precision = "fp32" if w.precision == "fp32" else "fp16"
    return shipped_factors()[(name, precision)]


def seconds_per_flop(w: Workload, gpu: GpuModel) -> float:
    f = _factors_for(w)
    _, ref_flops = REFERENCE_WORKLOADS[w.arch.kind]
    return sample_seconds(f, gpu) / ref_flops


def step_compute_seconds(w: Workload, gpu: GpuModel) -> float:
    """Compute seconds of one optimizer step on one GPU: ``grad_accum`` micro-batches of ``micro_batch``
    sequences of ``seq_len`` tokens (transformers) or ``micro_batch`` images (conv nets)."""
    units = w.micro_batch * (w.seq_len if w.arch.kind == "transformer" else 1)
    return w.grad_accum * units * work_flops(w) / w.work_tokens() * seconds_per_flop(w, gpu)


def efficiency(
    w: Workload,
    gpu: GpuModel,
    gpu_count: int,
    link: interconnect.Link | None = None,
    machines: int = 1,
) -> float:
    """Per-GPU efficiency of ``gpu_count`` × ``gpu`` (1.0 on one GPU): the fitted scaling curve times the
    interconnect term over ``link`` (default: the model's usual link), across ``machines`` machines."""
    curve = scaling_efficiency(scaling_curve(w, gpu), gpu_count)
    if gpu_count <= 1:
        return curve
    comm = interconnect.comm_seconds(w, gpu_count, link or interconnect.link_for(gpu), machines)
    return curve * interconnect.step_efficiency(step_compute_seconds(w, gpu), comm)


def relative_speed(
    w: Workload, gpu: GpuModel, gpu_count: int, link: interconnect.Link | None = None, machines: int = 1
) -> float:
    """Work per second of ``gpu_count`` × ``gpu`` in arbitrary but consistent units."""
    return gpu_count * efficiency(w, gpu, gpu_count, link, machines) / seconds_per_flop(w, gpu)


@dataclass(frozen=True, slots=True)
class Measured:
    """A throughput the renter measured: ``per_second`` tokens (or samples) on ``gpu_count`` × ``gpu``."""

    per_second: float
    gpu: GpuModel
    gpu_count: int = 1

    def __post_init__(self) -> None:
        if not self.per_second > 0:
            raise InvalidInput("invalid_measured", "measured throughput must be greater than zero")


def estimate_hours(
    w: Workload,
    gpu: GpuModel,
    gpu_count: int = 1,
    measured: Measured | None = None,
    *,
    link: interconnect.Link | None = None,
    machines: int = 1,
) -> float:
    """Wall-clock hours of the whole workload on ``gpu_count`` × ``gpu`` (no queueing, no preemption), the
    GPUs joined by ``link`` (default: the model's usual one) and spread over ``machines`` machines."""
    if not 1 <= machines <= max(1, gpu_count):
        raise InvalidInput("invalid_machines", f"machines must be between 1 and the GPU count (got {machines})")
    if measured is not None:
        ref = relative_speed(w, measured.gpu, measured.gpu_count)
        rate = measured.per_second * relative_speed(w, gpu, gpu_count, link, machines) / ref
        return w.work_tokens() / rate / 3600.0
    seconds = work_flops(w) / relative_speed(w, gpu, gpu_count, link, machines)
    if not w.training and w.arch.kind == "transformer":
        # decoding streams every weight once per step for a micro-batch of sequences
        steps = w.work_tokens() / w.micro_batch
        stream = steps * w.params * WEIGHT_BYTES[w.precision] / (gpu.mem_bw_gbps * 1e9 * gpu_count * 0.7)
        seconds = max(seconds, stream)
    return seconds / 3600.0
