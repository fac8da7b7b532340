"""Fitting the time model's utilisation factors to measured throughputs (pure; no file access).

The model: the time of one training sample on one GPU is a sum of three parts, each bound by one
resource of the GPU (a "roofline sum"):

    t(g) = c_matrix / matrix_tflops(g) + c_vector / fp32_tflops(g) + c_memory / mem_bw(g)

``matrix_tflops`` is the tensor-core peak for the precision (TF32 for fp32 on Ampere and later),
``fp32_tflops`` the plain ALU peak (elementwise work, normalisation) and ``mem_bw`` the memory
bandwidth. The three non-negative coefficients are fitted per (workload, precision) by least
squares on *relative* error, so a slow GPU's rows weigh as much as a fast one's. Scaling over
N GPUs is ``N / (1 + k·log2 N)`` with ``k`` fitted from multi-GPU rows of the same workload.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations, pairwise

from danlu.catalog.gpu_models import GpuModel


@dataclass(frozen=True, slots=True)
class Observation:
    """One measured throughput (samples/s, in the workload's own unit) on ``gpu_count`` GPUs."""

    gpu_model: str
    gpu_count: int
    precision: str  # "fp16" (mixed) or "fp32"
    workload: str
    throughput: float
    source: str = ""


@dataclass(frozen=True, slots=True)
class Factors:
    """Fitted coefficients of one (workload, precision): seconds·TFLOPS, seconds·TFLOPS, seconds·GB/s."""

    workload: str
    precision: str
    c_matrix: float
    c_vector: float
    c_memory: float
    scaling: tuple[tuple[int, float], ...]  # (gpu_count, efficiency) measured, ascending counts
    rows: int


def matrix_tflops(model: GpuModel, precision: str) -> float:
    """Dense tensor-core peak used for matrix work at ``precision``.

    Where the table has no tensor figure (RTX-3090, A10G, Pascal, Kepler) we use 2x FP32 for
    Turing and later (consumer Ampere's FP32-accumulate tensor rate), 2x FP32 for Pascal (packed
    FP16) and 1x for Kepler. For fp32, Ampere and later use TF32 at half the FP16 tensor rate
    (PyTorch enables TF32 for convolutions by default); older GPUs use FP32.
    """
    arch = model.architecture.lower()
    if precision == "fp32":
        if arch in {"ampere", "ada lovelace", "hopper", "blackwell"}:
            return max(model.fp32_tflops, matrix_tflops(model, "fp16") / 2)
        return model.fp32_tflops
    if model.tensor_tflops is not None:
        return model.tensor_tflops
    return model.fp32_tflops * (1.0 if arch == "kepler" else 2.0)


def features(model: GpuModel, precision: str) -> tuple[float, float, float]:
    return (1.0 / matrix_tflops(model, precision), 1.0 / model.fp32_tflops, 1.0 / model.mem_bw_gbps)


def scaling_efficiency(points: Sequence[tuple[int, float]], gpu_count: int) -> float:
    """Per-GPU efficiency at ``gpu_count``: interpolated in log2(count) between measured points
    (1 GPU = 1.0); beyond the last point, the last segment's slope continues, floored at 0.3."""
    pts = [(0.0, 1.0)] + [(math.log2(n), e) for n, e in points if n > 1]
    if gpu_count <= 1:
        return 1.0
    x = math.log2(gpu_count)
    for (x0, e0), (x1, e1) in pairwise(pts):
        if x <= x1:
            return e0 + (e1 - e0) * (x - x0) / (x1 - x0)
    (x0, e0), (x1, e1) = (pts[-2], pts[-1]) if len(pts) > 1 else ((0.0, 1.0), (1.0, 0.9))
    return max(0.3, e1 + (e1 - e0) / (x1 - x0) * (x - x1))


def predict(factors: Factors, model: GpuModel, gpu_count: int) -> float:
    """Predicted throughput (samples/s) of ``gpu_count`` GPUs of ``model``."""
    fm, fv, fb = features(model, factors.precision)
    seconds = factors.c_matrix * fm + factors.c_vector * fv + factors.c_memory * fb
    return gpu_count * scaling_efficiency(factors.scaling, gpu_count) / seconds


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None when singular."""
    n = len(b)
    m = [[*row[:], b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-30:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


def _nnls_relative(xs: Sequence[tuple[float, ...]], ys: Sequence[float], ws: Sequence[float]) -> list[float]:
    """min Σ w·(Σ c_k x_k / y − 1)² over c ≥ 0, by trying every support set (3 features: 7 sets)."""
    dims = len(xs[0])
    rows = [[x / y for x in xv] for xv, y in zip(xs, ys, strict=True)]
    best: tuple[float, list[float]] | None = None
    for size in range(1, dims + 1):
        for support in combinations(range(dims), size):
            ata = [[sum(w * r[i] * r[j] for r, w in zip(rows, ws, strict=True)) for j in support] for i in support]
            atb = [sum(w * r[i] for r, w in zip(rows, ws, strict=True)) for i in support]
            sol = _solve(ata, atb)
            if sol is None or any(c < 0 for c in sol):
                continue
            coef = [0.0] * dims
            for i, c in zip(support, sol, strict=True):
                coef[i] = c
            loss = sum(
                w * (sum(c * x for c, x in zip(coef, r, strict=True)) - 1) ** 2 for r, w in zip(rows, ws, strict=True)
            )
            if best is None or loss < best[0]:
                best = (loss, coef)
    if best is None:
        raise ValueError("no feasible fit")
    return best[1]


def fit(observations: Iterable[Observation], models: dict[str, GpuModel]) -> dict[tuple[str, str], Factors]:
    """Fit one :class:`Factors` per (workload, precision) present in ``observations``.

    Single-GPU rows fit the three coefficients (each GPU model weighs the same in total, so a
    GPU measured twenty times does not dominate); multi-GPU rows of models that also have a
    single-GPU row fit the scaling constant ``k``.
    """
    groups: dict[tuple[str, str], list[Observation]] = defaultdict(list)
    for obs in observations:
        if obs.throughput > 0 and obs.gpu_model in models:
            groups[(obs.workload, obs.precision)].append(obs)
    out: dict[tuple[str, str], Factors] = {}
    for (workload, precision), rows in groups.items():
        singles = [o for o in rows if o.gpu_count == 1]
        per_model: dict[str, int] = defaultdict(int)
        for o in singles:
            per_model[o.gpu_model] += 1
        if len(per_model) < 2:
            continue
        xs = [features(models[o.gpu_model], precision) for o in singles]
        ys = [1.0 / o.throughput for o in singles]
        ws = [1.0 / per_model[o.gpu_model] for o in singles]
        cm, cv, cb = _nnls_relative(xs, ys, ws)
        single_mean: dict[str, float] = {}
        for name in per_model:
            vals = [o.throughput for o in singles if o.gpu_model == name]
            single_mean[name] = sum(vals) / len(vals)
        effs: dict[int, list[float]] = defaultdict(list)
        for o in rows:
            if o.gpu_count > 1 and o.gpu_model in single_mean:
                effs[o.gpu_count].append(o.throughput / (o.gpu_count * single_mean[o.gpu_model]))
        scaling = tuple((n, round(quantile(v, 0.5), 4)) for n, v in sorted(effs.items()))
        out[(workload, precision)] = Factors(workload, precision, cm, cv, cb, scaling, len(rows))
    return out


def relative_errors(
    factors: dict[tuple[str, str], Factors], held_out: Iterable[Observation], models: dict[str, GpuModel]
) -> list[tuple[Observation, float]]:
    """|predicted time − measured time| / measured time for each held-out row with fitted factors."""
    out: list[tuple[Observation, float]] = []
    for obs in held_out:
        f = factors.get((obs.workload, obs.precision))
        if f is None or obs.throughput <= 0 or obs.gpu_model not in models:
            continue
        predicted = predict(f, models[obs.gpu_model], obs.gpu_count)
        # time ∝ 1/throughput, so relative time error = |measured/predicted − 1|
        out.append((obs, abs(obs.throughput / predicted - 1.0)))
    return out


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of a non-empty sequence."""
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)
