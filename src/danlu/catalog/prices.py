"""The dated public GPU price snapshot (``prices.csv``): loading, operator import, and its age.

Offline always: the snapshot ships in the package. An operator may import a newer CSV in the same
format (``danlu prices import FILE``); it is validated, then stored at ``$DANLU_HOME/prices.csv``
(default ``~/.danlu``) and preferred over the bundled one. ``DANLU_PRICES_CSV`` names a file to
use instead of both. Prices are per-GPU-hour *rates* (``Decimal``, several decimals allowed);
totals become integer minor units only through :func:`danlu.core.money.round_minor`.
"""

from __future__ import annotations

import csv
import os
import re
from dataclasses import dataclass
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
    as_of: date
    source: str


@dataclass(frozen=True, slots=True)
class PriceCatalog:
    rows: tuple[PriceRow, ...]
    snapshot: date
    origin: str  # "bundled", or the path it was read from
    attribution: str

    def age_days(self, today: date) -> int:
        """Days since the *oldest* price row was observed; the catalog is as old as its oldest row."""
        return (today - min((r.as_of for r in self.rows), default=self.snapshot)).days


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
    return PriceCatalog(tuple(rows), date.fromisoformat(m.group(1)), origin, "\n".join(c[1:].strip() for c in comments))


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
