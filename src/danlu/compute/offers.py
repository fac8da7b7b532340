"""Offers: what can be rented right now, per GPU model, with price and free/total counts."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, TypeVar, cast

from sqlalchemy import Pool, func, select

from danlu.accounts.payers import currency
from danlu.billing import tariffs
from danlu.billing.pricing import Plan
from danlu.billing.rating import round_half_up
from danlu.catalog.gpu_models import gpu_models, resolve_model
from danlu.compute import allocations
from danlu.compute.views import ReadCache
from danlu.context import Platform
from danlu.core.errors import InvalidInput
from danlu.core.money import parse_amount
from danlu.db.models import Gpu, HostRow, Price


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
    sandbox: str = "bubblewrap"  # bubblewrap | off | unavailable (danlu.backend.SandboxStatus)
    # The on-demand price in force now under the operator's tariffs, and the next cheaper window.
    price_now_minor: int | None = None
    tariff_now: str | None = None
    next_cheaper_at_ms: int | None = None
    next_cheaper_price_minor: int | None = None


_OFFERS: ReadCache[str, tuple[str, tuple[Offer, ...]]] = ReadCache(
    ("gpus", "prices", "hosts", "settings", "tariff_rules"), ttl_s=1.0
)


def list_offers(
    p: Platform, gpu: str | None = None, min_vram: int | None = None, max_price: str | None = None
) -> list[Offer]:
    """Offers sorted by price (unpriced models last: they cannot be rented until priced).

    All offers are read with three Core selects and kept until a GPU, price, host or setting is
    written in this process (a claim or release of a GPU included) or a second passes."""
    return _select(p, _OFFERS.get(p.db.engine, _key(p), lambda: _read_offers(p)), gpu, min_vram, max_price)


def _key(p: Platform) -> str:
    """Tariff windows open and close on whole local minutes: the minute is part of the key, so the
    price now is never a window stale (reads within one minute share the cached offers)."""
    return f"{p.sandbox.mode}@{p.clock.now_ms() // 60_000}"


def _select(
    p: Platform, read: tuple[str, tuple[Offer, ...]], gpu: str | None, min_vram: int | None, max_price: str | None
) -> list[Offer]:
    model_filter = resolve_model(gpu).name if gpu else None
    if min_vram is not None and min_vram < 0:
        raise InvalidInput("invalid_min_vram", "--min-vram is a number of GB, 0 or more")
    cur, every = read
    max_minor = parse_amount(max_price, cur, field="max price") if max_price is not None else None
    return [
        replace(o)
        for o in every
        if (model_filter is None or o.gpu_model == model_filter)
        and (min_vram is None or o.vram_gb >= min_vram)
        and (max_minor is None or (o.price_per_hour_minor is not None and o.price_per_hour_minor <= max_minor))
    ]


R = TypeVar("R")
_RENDERED: weakref.WeakKeyDictionary[Pool, dict[Hashable, tuple[object, Any]]] = weakref.WeakKeyDictionary()


def rendered_offers(
    p: Platform,
    gpu: str | None = None,
    min_vram: int | None = None,
    max_price: str | None = None,
    kind: str = "",
    aged: bool = False,
) -> object | None:
    """What :func:`render_offers` would answer from its memo without reading anything, else None
    (the API serves a hit on the event loop and sends a miss to the thread pool). ``aged``: also
    one past its TTL that nothing in this process made out of date (ReadCache.peek)."""
    memo = _RENDERED.get(p.db.engine.pool)
    hit = memo.get((_key(p), gpu, min_vram, max_price, kind)) if memo is not None else None
    if hit is not None and hit[0] is _OFFERS.peek(p.db.engine, _key(p), aged):
        return cast(object, hit[1])
    return None


def render_offers(
    p: Platform,
    render: Callable[[list[Offer]], R],
    gpu: str | None = None,
    min_vram: int | None = None,
    max_price: str | None = None,
    kind: str = "",
) -> R:
    """``render(list_offers(...))`` (e.g. the response's JSON bytes), computed again only when the
    offers were read again (see ``list_offers``). ``kind`` names the rendering; the value is shared
    by every caller until then, so it must be immutable (bytes)."""
    memo = _RENDERED.get(p.db.engine.pool)
    if memo is None:
        memo = _RENDERED.setdefault(p.db.engine.pool, {})
    key = (_key(p), gpu, min_vram, max_price, kind)
    hit = memo.get(key)
    # The cache hands out the same tuple until something changed; the memo holds it (identity is safe).
    if hit is not None and hit[0] is _OFFERS.peek(p.db.engine, _key(p)):
        return cast(R, hit[1])
    read = _OFFERS.get(p.db.engine, _key(p), lambda: _read_offers(p))
    value = render(_select(p, read, gpu, min_vram, max_price))  # validates the filters
    if len(memo) >= 1024:
        memo.clear()
    memo[key] = (read, value)
    return value


def _read_offers(p: Platform) -> tuple[str, tuple[Offer, ...]]:
    with p.db.read() as s:
        cur = currency(s)
        conn = s.connection()
        rows = conn.execute(
            select(
                Gpu.model,
                Gpu.host_id,
                func.count(),
                allocations.BUSY,
                func.max(Gpu.vram_mb),
                Gpu.simulated,
            )
            .where(Gpu.present.is_(True))
            .group_by(Gpu.model, Gpu.host_id, Gpu.simulated)
        ).all()
        prices = {
            m: (on_demand, spot)
            for m, on_demand, spot in conn.execute(
                select(Price.gpu_model, Price.price_per_hour_minor, Price.interruptible_price_per_hour_minor)
            )
        }
        hosts = {
            h.id: h
            for h in conn.execute(
                select(HostRow.id, HostRow.cpus_per_gpu_milli, HostRow.mem_per_gpu_mb, HostRow.disk_per_gpu_mb)
            )
        }
        now = p.clock.now_ms()
        window_now = tariffs.price_now(tariffs.current_tariffs(s, now), Plan.ON_DEMAND, now)
    table = gpu_models()
    agg: dict[str, Offer] = {}
    for model, host_id, total, busy, vram_mb, simulated in rows:
        vram_gb = table[model].vram_gb if model in table else int(vram_mb) // 1024
        price, spot = prices.get(model, (None, None))
        o = agg.setdefault(
            model,
            Offer(model, vram_gb, 0, 0, 0, price, cur, bool(simulated), spot, sandbox=p.sandbox.mode),
        )
        host = hosts.get(host_id)
        if host is not None:
            o.cpus_per_gpu_milli = min(o.cpus_per_gpu_milli or host.cpus_per_gpu_milli, host.cpus_per_gpu_milli)
            o.mem_per_gpu_mb = min(o.mem_per_gpu_mb or host.mem_per_gpu_mb, host.mem_per_gpu_mb)
            o.disk_per_gpu_mb = min(o.disk_per_gpu_mb or host.disk_per_gpu_mb, host.disk_per_gpu_mb)
        window = window_now
        if price is not None:
            o.price_now_minor = round_half_up(Fraction(window.multiplier) * price)
            o.tariff_now = window.tariff
            o.next_cheaper_at_ms = window.next_cheaper_ms
            if window.next_multiplier is not None:
                o.next_cheaper_price_minor = round_half_up(Fraction(window.next_multiplier) * price)
        o.free += total - int(busy or 0)
        o.total += total
        o.max_per_host = max(o.max_per_host, total)
        o.simulated = o.simulated or bool(simulated)
    ordered = sorted(
        agg.values(), key=lambda o: (o.price_per_hour_minor is None, o.price_per_hour_minor or 0, o.gpu_model)
    )
    return cur, tuple(ordered)
