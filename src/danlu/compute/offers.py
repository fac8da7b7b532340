"""Offers: what can be rented right now, per GPU model, with price and free/total counts."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select

from danlu.billing.accounts import currency
from danlu.catalog.gpu_models import gpu_models, resolve_model
from danlu.context import Platform
from danlu.core.errors import InvalidInput
from danlu.core.money import parse_amount
from danlu.db.models import Gpu, Host, Price


@dataclass
class Offer:
    gpu_model: str
    vram_gb: int
    free: int
    total: int
    max_per_host: int
    price_per_hour_minor: int | None
    currency: str
    simulated: bool
    interruptible_price_per_hour_minor: int | None = None
    # What one GPU of this offer comes with (the least any host of it gives), as peers list them.
    cpus_per_gpu_milli: int | None = None
    mem_per_gpu_mb: int | None = None
    disk_per_gpu_mb: int | None = None
    sandbox: str = "bubblewrap"  # bubblewrap | off | unavailable (danlu.compute.sandbox.status)


def list_offers(
    p: Platform, gpu: str | None = None, min_vram: int | None = None, max_price: str | None = None
) -> list[Offer]:
    """Offers sorted by price (unpriced models last: they cannot be rented until priced)."""
    model_filter = resolve_model(gpu).name if gpu else None
    if min_vram is not None and min_vram < 0:
        raise InvalidInput("invalid_min_vram", "--min-vram is a number of GB, 0 or more")
    with p.db.read() as s:
        cur = currency(s)
        max_minor = parse_amount(max_price, cur, field="max price") if max_price is not None else None
        rows = s.execute(
            select(
                Gpu.model,
                Gpu.host_id,
                func.count(),
                func.count(Gpu.allocation_id),
                func.max(Gpu.vram_mb),
                Gpu.simulated,
            )
            .where(Gpu.present.is_(True))
            .group_by(Gpu.model, Gpu.host_id, Gpu.simulated)
        ).all()
        price_rows = {pr.gpu_model: pr for pr in s.scalars(select(Price))}
        host_rows = {h.id: h for h in s.scalars(select(Host))}
        prices = {m: pr.price_per_hour_minor for m, pr in price_rows.items()}
        spot = {m: pr.interruptible_price_per_hour_minor for m, pr in price_rows.items()}
    table = gpu_models()
    agg: dict[str, Offer] = {}
    for model, host_id, total, busy, vram_mb, simulated in rows:
        vram_gb = table[model].vram_gb if model in table else int(vram_mb) // 1024
        o = agg.setdefault(
            model,
            Offer(
                model,
                vram_gb,
                0,
                0,
                0,
                prices.get(model),
                cur,
                bool(simulated),
                spot.get(model),
                sandbox=p.sandbox.mode,
            ),
        )
        host = host_rows.get(host_id)
        if host is not None:
            o.cpus_per_gpu_milli = min(o.cpus_per_gpu_milli or host.cpus_per_gpu_milli, host.cpus_per_gpu_milli)
            o.mem_per_gpu_mb = min(o.mem_per_gpu_mb or host.mem_per_gpu_mb, host.mem_per_gpu_mb)
            o.disk_per_gpu_mb = min(o.disk_per_gpu_mb or host.disk_per_gpu_mb, host.disk_per_gpu_mb)
        o.free += total - busy
        o.total += total
        o.max_per_host = max(o.max_per_host, total)
        o.simulated = o.simulated or bool(simulated)
    offers = [
        o
        for o in agg.values()
        if (model_filter is None or o.gpu_model == model_filter)
        and (min_vram is None or o.vram_gb >= min_vram)
        and (max_minor is None or (o.price_per_hour_minor is not None and o.price_per_hour_minor <= max_minor))
    ]
    return sorted(offers, key=lambda o: (o.price_per_hour_minor is None, o.price_per_hour_minor or 0, o.gpu_model))
