"""Deadline-aware deferral to cheaper tariff windows.

Before starting a job, compare the exact price of running it now with running it from each of
the next few tariff-window openings, as the one rater (:mod:`danlu.billing.rating`) would bill
it (exact amounts, before the rounding). If a later start is strictly cheaper and still finishes
before the job's deadline (or within the policy's horizon when it has none), defer to it.
"""

from __future__ import annotations

from fractions import Fraction

from danlu.billing.pricing import Plan, PriceBook, tariff_boundaries
from danlu.billing.rating import rate_interval
from danlu.scheduling.model import JobRequest

MAX_CANDIDATES = 6


def cheaper_start(
    prices: PriceBook, job: JobRequest, model: str, duration_ms: int, now_ms: int, horizon_ms: int
) -> int | None:
    """The start time in ``(now, now + horizon]`` that minimises the job's price, if cheaper than now."""
    plan: Plan = job.plan
    tariffs = [t for t in prices.tariffs if t.applies_to(plan)]
    if not tariffs or horizon_ms <= 0 or duration_ms <= 0:
        return None
    starts = tariff_boundaries(tariffs, now_ms, now_ms + horizon_ms + 1)[:MAX_CANDIDATES]
    if not starts:
        return None

    def price(start: int) -> Fraction:
        return rate_interval(prices, model, plan, start, start + duration_ms, job.gpus).exact

    best_start, best_price = now_ms, price(now_ms)
    for start in starts:
        candidate = price(start)
        if candidate < best_price:
            best_start, best_price = start, candidate
    return best_start if best_start > now_ms else None


def horizon_for(job: JobRequest, duration_ms: int, now_ms: int, default_ms: int) -> int:
    if job.deadline_ms is None:
        return default_ms
    return job.deadline_ms - duration_ms - now_ms
