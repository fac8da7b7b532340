"""Scenario files: a cluster, its prices and tariffs, a throughput table, reference results."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from danlu.billing.pricing import Plan, PriceBook, Tariff, parse_tariff
from danlu.catalog.gpu_models import resolve_model
from danlu.core.errors import InvalidInput
from danlu.core.money import parse_amount
from danlu.scheduling.model import Host
from danlu.scheduling.speed import ThroughputTable, load_throughputs

DEFAULT_SPREAD_SLOWDOWN = 1.25


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    currency: str
    start_ms: int
    hosts: tuple[Host, ...]
    prices: PriceBook
    throughputs: ThroughputTable
    reference: tuple[dict[str, str], ...]
    trace_paths: tuple[Path, ...]
    # how much slower a gang spread over hosts runs when the throughput table has no measured spread
    # figure for it: the scenario's declared assumption ("spread_slowdown", default 1.25)
    spread_slowdown: float = DEFAULT_SPREAD_SLOWDOWN

    @property
    def models(self) -> list[str]:
        return sorted({h.gpu_model for h in self.hosts})

    @property
    def total_gpus(self) -> int:
        return sum(h.total_gpus for h in self.hosts)

    @property
    def synthetic_tariffs(self) -> list[Tariff]:
        return [t for t in self.prices.tariffs if t.synthetic]


def load_scenario(path: Path) -> Scenario:
    try:
        raw: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidInput("bad_scenario", f"cannot read scenario {path}: {exc}") from None
    base = path.parent
    currency = str(raw.get("currency", "USD"))
    timezone = str(raw.get("timezone", "UTC"))
    start = datetime.fromisoformat(str(raw["start_time"]))
    start_ms = int(start.timestamp()) * 1000
    hosts: list[Host] = []
    prices: dict[tuple[str, Plan], int] = {}
    for pool in raw["pools"]:
        model = resolve_model(str(pool["gpu_model"])).name
        for i in range(int(pool["hosts"])):
            gpus = int(pool["gpus_per_host"])
            hosts.append(Host(f"{model.lower()}-{i}", model, gpus, gpus))
        prices[(model, Plan.ON_DEMAND)] = parse_amount(str(pool["price_per_gpu_hour"]), currency)
        if "spot_price_per_gpu_hour" in pool:
            prices[(model, Plan.INTERRUPTIBLE)] = parse_amount(str(pool["spot_price_per_gpu_hour"]), currency)
    tariffs = tuple(parse_tariff(t, timezone) for t in raw.get("tariffs", []))
    throughputs = load_throughputs(base / raw["throughputs"]) if raw.get("throughputs") else ThroughputTable()
    try:
        spread_slowdown = float(raw.get("spread_slowdown", DEFAULT_SPREAD_SLOWDOWN))
    except (TypeError, ValueError):
        spread_slowdown = 0.0
    if not 1.0 <= spread_slowdown <= 100.0:
        raise InvalidInput(
            "bad_scenario",
            f"scenario {path}: spread_slowdown must be a number from 1 to 100 (how much slower a gang "
            f"spread over hosts runs), got {raw.get('spread_slowdown')!r}",
        )
    reference: tuple[dict[str, str], ...] = ()
    if raw.get("reference") and (base / raw["reference"]).exists():
        with (base / raw["reference"]).open(newline="", encoding="utf-8") as handle:
            reference = tuple(csv.DictReader(handle))
    return Scenario(
        name=str(raw.get("name", path.stem)),
        currency=currency,
        start_ms=start_ms,
        hosts=tuple(hosts),
        prices=PriceBook(currency, prices, tariffs),
        throughputs=throughputs,
        reference=reference,
        trace_paths=tuple(base / p for p in raw.get("traces", [])),
        spread_slowdown=spread_slowdown,
    )
