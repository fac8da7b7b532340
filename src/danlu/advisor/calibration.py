"""Fitting the time model's utilisation factors to measured throughputs (pure; no file access).

The model: the time of one training sample on one GPU is a sum of three parts, each bound by one
resource of the GPU (a "roofline sum"):

    t(g) = c_matrix / matrix_tflops(g) + c_vector / fp32_tflops(g)
           + (c_memory + c_l2_miss / l2_mb(g)) / mem_bw(g)

``matrix_tflops`` is the tensor-core peak for the precision (TF32 for fp32 on Ampere and later),
``fp32_tflops`` the plain ALU peak (elementwise work, normalisation), ``mem_bw`` the memory
bandwidth and ``l2_mb`` the L2 cache (issue 31): memory traffic is split into a part every GPU
moves through DRAM and a part that a larger L2 keeps on chip (capacity misses falling as 1/L2),
which is what made the RTX 4090 (72 MB) faster and the V100 (6 MB) slower than a bandwidth-only
model predicted. The four non-negative coefficients are fitted per (workload, precision) by least
squares on *relative* error, so a slow GPU's rows weigh as much as a fast one's. Scaling over
N GPUs: each GPU model's median per-GPU efficiency at each count it was measured at is kept; a GPU
scales as the most similar GPU measured at that count (its own measurements first; similarity =
dense fp16 matrix peak and memory bandwidth, ``spec_distance``), made monotone non-increasing and at
most 1.0 by an isotonic fit (issue 11: medians of a few machines rose past 8 GPUs, NCF's above 24),
interpolated in log2 N and extrapolated with the average loss per doubling. One median over every
GPU measured put the scaling of old V100/A100 machines on H100s and H200s, which scale near 1.0 on
every one of eight vendors' machines. The interconnect (advisor/interconnect.py) is charged on top,
by the advisor.
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
    # (gpu_model, gpu_count, median per-GPU efficiency) measured, as fitted: not capped, not made monotone
    scaling: tuple[tuple[str, int, float], ...]
    rows: int
    c_l2_miss: float = 0.0  # seconds·GB/s·MB: the memory traffic a larger L2 keeps on chip
    # (gpu_model, gpu_count, lowest, highest per-GPU efficiency, rows) where one GPU model was measured at one
    # count on SPREAD_MIN_ROWS machines or more: how differently identical GPUs scaled (issue 31)
    spread: tuple[tuple[str, int, float, float, int], ...] = ()


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


def features(model: GpuModel, precision: str, *, l2: bool = True) -> tuple[float, float, float, float]:
    """The four terms' per-GPU factors; ``l2=False`` zeroes the L2 term (the model before issue 31, which the
    accuracy benchmark reports beside the new one)."""
    l2_term = 1.0 / (model.l2_cache_mb * model.mem_bw_gbps) if l2 else 0.0
    return (1.0 / matrix_tflops(model, precision), 1.0 / model.fp32_tflops, 1.0 / model.mem_bw_gbps, l2_term)


def sample_seconds(factors: Factors, model: GpuModel) -> float:
    """Seconds of one sample of ``factors``' workload on one GPU of ``model``."""
    fm, fv, fb, fl = features(model, factors.precision)
    return factors.c_matrix * fm + factors.c_vector * fv + factors.c_memory * fb + factors.c_l2_miss * fl


def spec_distance(a: GpuModel, b: GpuModel) -> float:
    """How unlike two GPU models are, for borrowing a measured scaling curve: |ln| of the ratio of their dense
    fp16 matrix peaks plus |ln| of the ratio of their memory bandwidths (0 for the same specs)."""
    fp16 = matrix_tflops(a, "fp16") / matrix_tflops(b, "fp16")
    return abs(math.log(fp16)) + abs(math.log(a.mem_bw_gbps / b.mem_bw_gbps))


def scaling_points(factors: Factors, model: GpuModel, models: dict[str, GpuModel]) -> tuple[tuple[int, float], ...]:
    """The scaling curve of ``model``: at each GPU count measured on any GPU, the efficiency measured on the GPU
    most similar to ``model`` (``spec_distance``; its own when measured; ties by name), made non-increasing
    and at most 1.0 (``monotone_points``). GPU models not in ``models`` are ignored."""
    nearest: dict[int, tuple[float, str, float]] = {}
    for name, n, eff in factors.scaling:
        other = models.get(name)
        if other is None:
            continue
        cand = (spec_distance(other, model), name, eff)
        if n not in nearest or cand < nearest[n]:
            nearest[n] = cand
    return monotone_points([(n, nearest[n][2]) for n in sorted(nearest)])


def monotone_points(
    points: Sequence[tuple[int, float]], weights: Sequence[float] | None = None
) -> tuple[tuple[int, float], ...]:
    """Per-GPU efficiencies made non-increasing in GPU count and at most 1.0 (one GPU is 1.0 by definition).

    Weighted isotonic regression by pool-adjacent-violators: where a larger count measured a higher
    per-GPU efficiency than a smaller one (noise, or a machine with a faster link), the two are
    replaced by their weighted mean, so a rise never survives; then everything is capped at 1.0
    (super-linear scaling, e.g. a model that fits in cache once split, is not promised to renters).
    """
    ws = [1.0] * len(points) if weights is None else list(weights)
    triples = sorted((n, e, w) for (n, e), w in zip(points, ws, strict=True) if n > 1)
    pts = [(n, e) for n, e, _ in triples]
    blocks: list[list[float]] = []  # [weighted sum, weight, number of points]
    for _, e, w in triples:
        blocks.append([e * w, w, 1])
        while len(blocks) > 1 and blocks[-1][0] / blocks[-1][1] > blocks[-2][0] / blocks[-2][1]:
            s1, w1, c1 = blocks.pop()
            blocks[-1][0] += s1
            blocks[-1][1] += w1
            blocks[-1][2] += c1
    values = [min(1.0, s / w) for s, w, c in blocks for _ in range(int(c))]
    return tuple((n, round(v, 12)) for (n, _), v in zip(pts, values, strict=True))


def scaling_efficiency(points: Sequence[tuple[int, float]], gpu_count: int) -> float:
    """Per-GPU efficiency at ``gpu_count``, never rising with the count and never above 1.0.

    The points are clamped to their running minimum (and 1.0) first, so even a hand-edited table
    cannot make more GPUs look better per GPU; then interpolated in log2(count) between them (1 GPU
    = 1.0). Beyond the last point the curve keeps falling at the average rate per doubling over the
    measured range (the last segment alone is one noisy median), floored at 0.3 (or the last point,
    if lower)."""
    if gpu_count <= 1:
        return 1.0
    pts = [(0.0, 1.0)]
    for n, e in sorted(p for p in points if p[0] > 1):
        pts.append((math.log2(n), min(e, pts[-1][1])))
    x = math.log2(gpu_count)
    for (x0, e0), (x1, e1) in pairwise(pts):
        if x <= x1:
            return e0 + (e1 - e0) * (x - x0) / (x1 - x0)
    x1, e1 = pts[-1]
    if x1 == 0.0:  # nothing measured: 10% per doubling
        return max(0.3, 1.0 - 0.1 * x)
    slope = (e1 - 1.0) / x1  # ≤ 0
    return max(min(0.3, e1), e1 + slope * (x - x1))


def predict(factors: Factors, model: GpuModel, gpu_count: int, models: dict[str, GpuModel]) -> float:
    """Predicted throughput (samples/s) of ``gpu_count`` GPUs of ``model``; ``models`` holds the specs of the
    GPUs whose scaling was measured."""
    seconds = sample_seconds(factors, model)
    return gpu_count * scaling_efficiency(scaling_points(factors, model, models), gpu_count) / seconds


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
    """min Σ w·(Σ c_k x_k / y − 1)² over c ≥ 0, by trying every support set (4 features: 15 sets; a feature
    that is zero on every row makes its sets singular, so it gets 0)."""
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


SPREAD_MIN_ROWS = 3  # machines of one GPU model at one count before their lowest..highest is shown


def fit(
    observations: Iterable[Observation], models: dict[str, GpuModel], *, l2: bool = True
) -> dict[tuple[str, str], Factors]:
    """Fit one :class:`Factors` per (workload, precision) present in ``observations``.

    Single-GPU rows fit the four coefficients (each GPU model weighs the same in total, so a
    GPU measured twenty times does not dominate; ``l2=False`` leaves the L2 term out); multi-GPU
    rows of models that also have a single-GPU row give that model's median per-GPU efficiency at
    each count (``scaling``) and, measured on ``SPREAD_MIN_ROWS`` machines or more, its range (``spread``).
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
        xs = [features(models[o.gpu_model], precision, l2=l2) for o in singles]
        ys = [1.0 / o.throughput for o in singles]
        ws = [1.0 / per_model[o.gpu_model] for o in singles]
        cm, cv, cb, cl = _nnls_relative(xs, ys, ws)
        single_mean: dict[str, float] = {}
        for name in per_model:
            vals = [o.throughput for o in singles if o.gpu_model == name]
            single_mean[name] = sum(vals) / len(vals)
        effs: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for o in rows:
            if o.gpu_count > 1 and o.gpu_model in single_mean:
                effs[o.gpu_count][o.gpu_model].append(o.throughput / (o.gpu_count * single_mean[o.gpu_model]))
        scaling = tuple(
            sorted((name, n, round(quantile(v, 0.5), 4)) for n, per in effs.items() for name, v in per.items())
        )
        spread = tuple(
            sorted(
                (name, n, round(min(v), 4), round(max(v), 4), len(v))
                for n, per in effs.items()
                for name, v in per.items()
                if len(v) >= SPREAD_MIN_ROWS
            )
        )
        out[(workload, precision)] = Factors(workload, precision, cm, cv, cb, scaling, len(rows), cl, spread)
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
        predicted = predict(f, models[obs.gpu_model], obs.gpu_count, models)
        # time ∝ 1/throughput, so relative time error = |measured/predicted − 1|
        out.append((obs, abs(obs.throughput / predicted - 1.0)))
    return out


def weighted_quantile(values: Sequence[float], weights: Sequence[float], q: float) -> float:
    """Quantile of ``values`` where each carries a weight (1 / rows of its GPU model: every GPU model counts
    the same however many rows it has). Each value sits at the centre of its share of the total weight
    (Hazen plotting positions) and the quantile interpolates linearly between those centres, clamped at
    the ends; with equal weights the median is the ordinary median."""
    pairs = sorted((v, w) for v, w in zip(values, weights, strict=True) if w > 0)
    if not pairs:
        raise ValueError("no positive weight")
    total = sum(w for _, w in pairs)
    centres, acc = [], 0.0
    for _, w in pairs:
        centres.append((acc + w / 2) / total)
        acc += w
    if q <= centres[0]:
        return pairs[0][0]
    for (p0, (v0, _)), (p1, (v1, _)) in pairwise(zip(centres, pairs, strict=True)):
        if q <= p1:
            return v0 + (v1 - v0) * (q - p0) / (p1 - p0)
    return pairs[-1][0]


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of a non-empty sequence."""
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)
