"""A long-tailed, open-arrival trace and the 48-GPU, three-type cluster it is replayed on (issue 11).

The generator (seeded, so a seed names a trace):

* **arrivals**: a Poisson stream over ``days`` (default 42: six weeks), so the queue is an open
  stream, never a closed batch;
* **gangs**: 1 GPU (70 %), 2 (12 %), 4 (10 %) or 8 (8 %);
* **work** in GPU-hours on the reference type (V100): a log-normal body with median ``median_gpu_h``
  (default 3.5) and sigma 1.6, and with probability ``tail_p`` (5 %) a Pareto tail instead
  (scale 100 GPU-h, shape 1.0, capped at 5,000 GPU-h), which gives a handful of jobs of 1,000 GPU-h
  and more, like the per-team production trace the issue describes (~950 jobs over 76 days, median
  ~3.7 GPU-h, a few jobs over 1,000 GPU-h);
* each job's run time on V100 is its GPU-hours / its gang size; other types scale by their specs
  (danlu.scheduling.speed), as for any trace measured on one reference type.

The cluster: 16 V100 (4 servers of 4), 16 P100 (4 of 4), 16 K80 (2 of 8), Gavel's three types at
gavel48's GCP prices (on-demand / spot USD per GPU-hour: 2.95 / 0.84, 1.93 / 0.53, 0.92 / 0.14).
"""

from __future__ import annotations

import random

from danlu.billing.pricing import Plan, PriceBook, parse_tariff
from danlu.core.money import parse_amount
from danlu.scheduling.model import Host
from danlu.scheduling.simulator import SimSetup
from danlu.scheduling.speed import ThroughputTable
from danlu.scheduling.traces import TraceJob

GANGS = ((1, 0.70), (2, 0.12), (4, 0.10), (8, 0.08))
REFERENCE_MODEL = "V100"
CLUSTER = (("V100", 4, 4), ("P100", 4, 4), ("K80", 2, 8))  # (model, servers, GPUs each)


PRICES = {"V100": ("2.95", "0.84"), "P100": ("1.93", "0.53"), "K80": ("0.92", "0.14")}


def hosts() -> tuple[Host, ...]:
    return tuple(
        Host(f"{model.lower()}-{i}", model, gpus, gpus) for model, servers, gpus in CLUSTER for i in range(servers)
    )


START_MS = 1_767_603_600_000  # 2026-01-05 09:00 UTC, a Monday


# gavel48's declared synthetic off-peak tariff: every night 00:00-08:00 UTC at 0.6x
OFF_PEAK = {"name": "off-peak", "synthetic": True, "days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
            "from": "00:00", "to": "08:00", "price_multiplier": "0.6"}  # fmt: skip


def sim_setup(off_peak: bool = False) -> SimSetup:
    """The cluster, its prices (with the off-peak tariff, if asked) and the reference type."""
    prices: dict[tuple[str, Plan], int] = {}
    for model, (on_demand, spot) in PRICES.items():
        prices[(model, Plan.ON_DEMAND)] = parse_amount(on_demand, "USD")
        prices[(model, Plan.INTERRUPTIBLE)] = parse_amount(spot, "USD")
    tariffs = (parse_tariff(OFF_PEAK),) if off_peak else ()
    return SimSetup(hosts(), PriceBook("USD", prices, tariffs), START_MS, ThroughputTable(), REFERENCE_MODEL)


def generate(
    seed: int,
    n: int = 950,
    days: float = 42.0,
    median_gpu_h: float = 3.5,
    sigma: float = 1.6,
    tail_p: float = 0.05,
    tail_scale_gpu_h: float = 100.0,
    tail_shape: float = 1.0,
    cap_gpu_h: float = 5000.0,
) -> list[TraceJob]:
    rng = random.Random(seed)
    rate = n / (days * 86_400)
    sizes = [g for g, _ in GANGS]
    weights = [w for _, w in GANGS]
    t = 0.0
    jobs: list[TraceJob] = []
    for i in range(n):
        t += rng.expovariate(rate)
        gpus = rng.choices(sizes, weights)[0]
        if rng.random() < tail_p:
            gpu_h = tail_scale_gpu_h * rng.paretovariate(tail_shape)
        else:
            gpu_h = rng.lognormvariate(0.0, sigma) * median_gpu_h
        gpu_h = min(max(gpu_h, 0.01), cap_gpu_h)
        jobs.append(TraceJob(id=f"L{i}", arrival_s=t, gpus=gpus, duration_s=gpu_h * 3600 / gpus, user=f"u{i % 12}"))
    return jobs
