"""The dated public GPU price snapshot (``prices.csv``): loading, operator import, and its age.

Offline always: the snapshot ships in the package. An operator may import a newer CSV in the same
format (``danlu prices import FILE``); it is validated, then stored at ``$DANLU_HOME/prices.csv``
(default ``~/.danlu``) and preferred over the bundled one. ``DANLU_PRICES_CSV`` names a file to
use instead of both. Prices are per-GPU-hour *rates* (``Decimal``, several decimals allowed);
totals become integer minor units only through :func:`danlu.core.money.round_minor`.

The loader also judges the rows (pure, :func:`judge_rows`); every row stays in the file:

* **newest wins**: a row is *superseded* when a row of the same provider, GPU model, GPUs per instance
  and instance type (a row naming no instance type matches every instance type of another source;
  region ``any`` matches every region) was observed later (``as_of``). Superseded rows are never used.
* **outliers**: a row in use whose on-demand rate is under 1/:data:`OUTLIER_DIVISOR` (a third) of the median
  of the *other* providers' rates for the same GPU model and currency (each provider counted once, at the
  median of its rows in use; at least :data:`OUTLIER_MIN_PROVIDERS` other providers) is an *outlier*:
  left out of rankings and default rates unless asked for, and marked wherever it is shown.
"""

from __future__ import annotations

import csv
import os
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import date
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from importlib import resources
from pathlib import Path

from danlu.catalog.gpu_models import gpu_models
from danlu.core.errors import InvalidInput
from danlu.core.money import exponent

COLUMNS = [
    "provider",
    "region",
    "gpu_model",
    "gpus",
    "price_per_gpu_hour",
    "spot_per_gpu_hour",
    "currency",
    "instance_type",
    "as_of",
    "source",
]
_SNAPSHOT_RE = re.compile(r"snapshot (\d{4}-\d{2}-\d{2})")
OUTLIER_DIVISOR = 3  # a rate under 1/3 of the other providers' median is an outlier
OUTLIER_MIN_PROVIDERS = 3  # other providers needed before a median means anything
ANY_REGION = frozenset({"", "any"})
_SKYPILOT_RE = re.compile(r"skypilot-catalog\b.*catalogs/v\d+/([a-z0-9_-]+)/", re.IGNORECASE)


def source_label(source: str) -> str:
    """A short name for a row's source, for tables: ``FSDL cloud-gpus``, ``SkyPilot lambda``, …"""
    if "the-full-stack/website" in source or "cloud-gpus.csv" in source:
        return "FSDL cloud-gpus"
    m = _SKYPILOT_RE.search(source)
    if m:
        return f"SkyPilot {m.group(1).lower()}"
    return source if len(source) <= 28 else source[:27] + "…"


@dataclass(frozen=True, slots=True)
class PriceRow:
    provider: str
    region: str
    gpu_model: str
    gpus: int  # GPUs in one instance
    price_per_gpu_hour: Decimal  # on-demand rate, major units of ``currency``
    spot_per_gpu_hour: Decimal | None
    currency: str
    instance_type: str
    as_of: date  # when this price was observed (see the catalog's header for how)
    source: str
    superseded: bool = False  # a later observation of the same instance exists: kept, never used
    outlier: bool = False  # far below the other providers' median: used only when asked for
    peer_median: Decimal | None = None  # the other providers' median it was judged against

    @property
    def source_label(self) -> str:
        return source_label(self.source)


def _same_instance(a: PriceRow, b: PriceRow) -> bool:
    """Two observations of one offer (caller has matched provider, GPU model and GPUs per instance). A row
    naming no instance type is any instance of that shape, but only for another source: within one list,
    unnamed rows are distinct offers."""
    named = bool(a.instance_type and b.instance_type)
    same_type = a.instance_type == b.instance_type if named else a.source != b.source
    same_region = a.region == b.region or a.region in ANY_REGION or b.region in ANY_REGION
    return same_type and same_region


def judge_rows(rows: tuple[PriceRow, ...]) -> tuple[PriceRow, ...]:
    """``rows`` with ``superseded``, ``outlier`` and ``peer_median`` set (pure; order kept)."""
    groups: dict[tuple[str, str, int], list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        groups[(r.provider, r.gpu_model, r.gpus)].append(i)
    superseded = set()
    for idx in groups.values():
        for i in idx:
            if any(rows[j].as_of > rows[i].as_of and _same_instance(rows[i], rows[j]) for j in idx if j != i):
                superseded.add(i)
    by_model: dict[tuple[str, str], dict[str, list[Decimal]]] = defaultdict(lambda: defaultdict(list))
    for i, r in enumerate(rows):
        if i not in superseded:
            by_model[(r.gpu_model, r.currency)][r.provider].append(r.price_per_gpu_hour)
    provider_rate = {key: {p: statistics.median(v) for p, v in provs.items()} for key, provs in by_model.items()}
    out = []
    for i, r in enumerate(rows):
        if i in superseded:
            out.append(replace(r, superseded=True))
            continue
        others = [v for p, v in provider_rate[(r.gpu_model, r.currency)].items() if p != r.provider]
        if len(others) < OUTLIER_MIN_PROVIDERS:
            out.append(r)
            continue
        peer = statistics.median(others)
        out.append(replace(r, outlier=r.price_per_gpu_hour * OUTLIER_DIVISOR < peer, peer_median=peer))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class PriceCatalog:
    rows: tuple[PriceRow, ...]
    snapshot: date
    origin: str  # "bundled", or the path it was read from
    attribution: str

    def usable(self, include_outliers: bool = False) -> tuple[PriceRow, ...]:
        """The rows rankings and default rates use: never superseded ones; outliers only if asked."""
        return tuple(r for r in self.rows if not r.superseded and (include_outliers or not r.outlier))

    def age_days(self, today: date) -> int:
        """Days since the *oldest* price in use was observed; the catalog is as old as its oldest row
        (superseded rows, kept for the record, do not count)."""
        return (today - min((r.as_of for r in self.usable(True)), default=self.snapshot)).days


def _rate(text: str, field: str, line: int) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise InvalidInput("invalid_price_catalog", f"line {line}: {field} {text!r} is not a decimal") from None
    if not value.is_finite() or value < 0:
        raise InvalidInput("invalid_price_catalog", f"line {line}: {field} must be a non-negative decimal")
    return value


def parse_catalog(text: str, origin: str) -> PriceCatalog:
    """Parse and validate catalog text; any defect is an InvalidInput naming the line and the fix."""
    comments = [ln for ln in text.splitlines() if ln.startswith("#")]
    m = next((_SNAPSHOT_RE.search(c) for c in comments if _SNAPSHOT_RE.search(c)), None)
    if m is None:
        raise InvalidInput(
            "invalid_price_catalog",
            "the catalog needs a header comment line containing 'snapshot YYYY-MM-DD'",
        )
    body = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    reader = csv.DictReader(body)
    if reader.fieldnames != COLUMNS:
        raise InvalidInput("invalid_price_catalog", f"the column header must be exactly: {','.join(COLUMNS)}")
    known = gpu_models()
    rows: list[PriceRow] = []
    for i, raw in enumerate(reader, start=2):
        if raw["gpu_model"] not in known:
            raise InvalidInput(
                "invalid_price_catalog",
                f"line {i}: unknown gpu_model {raw['gpu_model']!r}; use a name from the GPU table",
            )
        exponent(raw["currency"])  # raises unknown_currency
        try:
            gpus = int(raw["gpus"])
            as_of = date.fromisoformat(raw["as_of"])
        except ValueError:
            raise InvalidInput("invalid_price_catalog", f"line {i}: gpus must be an integer, as_of a date") from None
        if gpus < 1:
            raise InvalidInput("invalid_price_catalog", f"line {i}: gpus must be at least 1")
        spot = raw["spot_per_gpu_hour"]
        rows.append(
            PriceRow(
                raw["provider"],
                raw["region"],
                raw["gpu_model"],
                gpus,
                _rate(raw["price_per_gpu_hour"], "price_per_gpu_hour", i),
                _rate(spot, "spot_per_gpu_hour", i) if spot else None,
                raw["currency"].upper(),
                raw["instance_type"],
                as_of,
                raw["source"],
            )
        )
    if not rows:
        raise InvalidInput("invalid_price_catalog", "the catalog has no price rows")
    attribution = "\n".join(c[1:].strip() for c in comments)
    return PriceCatalog(judge_rows(tuple(rows)), date.fromisoformat(m.group(1)), origin, attribution)


def operator_catalog_path() -> Path:
    explicit = os.environ.get("DANLU_PRICES_CSV")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("DANLU_HOME", str(Path.home() / ".danlu"))) / "prices.csv"


@lru_cache(maxsize=8)
def _load(path: str | None, mtime_ns: int) -> PriceCatalog:
    if path is None:
        text = resources.files("danlu.catalog").joinpath("prices.csv").read_text(encoding="utf-8")
        return parse_catalog(text, "bundled")
    return parse_catalog(Path(path).read_text(encoding="utf-8"), path)


def price_catalog() -> PriceCatalog:
    """The catalog in force: the operator's imported file if present, else the bundled snapshot (cached)."""
    path = operator_catalog_path()
    if path.is_file():
        return _load(str(path), path.stat().st_mtime_ns)
    if os.environ.get("DANLU_PRICES_CSV"):
        raise InvalidInput("price_catalog_missing", f"DANLU_PRICES_CSV names {path}, which does not exist")
    return _load(None, 0)


def import_catalog(source: Path) -> PriceCatalog:
    """Validate ``source`` and install it as the operator catalog; refuses one older than the one in use."""
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput("price_catalog_unreadable", f"cannot read {source}: {exc.strerror}") from None
    new = parse_catalog(text, str(source))
    current = price_catalog()
    if new.snapshot < current.snapshot:
        raise InvalidInput(
            "price_catalog_older",
            f"{source} is a {new.snapshot} snapshot, older than the {current.snapshot} one in use",
        )
    dest = operator_catalog_path()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(dest)
    return price_catalog()


def models_matching(name: str) -> list[str]:
    """GPU models a user-typed name means: the exact model, or a family ("A100" → A100-80GB, A100-40GB)."""
    key = name.strip().upper().replace("_", "-").replace(" ", "-")
    names = list(gpu_models())
    exact = [n for n in names if n.upper() == key]
    if exact:
        return exact
    family = [n for n in names if n.upper().startswith(key + "-")]
    if family:
        return family
    raise InvalidInput("unknown_gpu_model", f"unknown GPU model {name!r}; known models: {', '.join(names)}")
