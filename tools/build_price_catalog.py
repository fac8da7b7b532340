"""Regenerate src/danlu/catalog/prices.csv from the public price data in ../shared/data/prices.

Run by a maintainer when the data is refreshed, never at test or run time (nothing is fetched):

    python tools/build_price_catalog.py [--data ../shared/data] [--out src/danlu/catalog/prices.csv]

Every price is USD per GPU-hour (instance price ÷ GPUs in the instance), rounded to 5 decimals.
Rows whose GPU is not in the shipped GPU-model table, or is ambiguous (A100 without its memory
size), are dropped, so the advisor can compute fit and time for every row it ships.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT = "2026-12-02"  # the day the sources below were copied into shared/data
FSDL_AS_OF = "2025-03-07"  # date of the newest fsdl_cloud_gpus_history file, identical to _latest
HEADER = (
    "provider,region,gpu_model,gpus,price_per_gpu_hour,spot_per_gpu_hour,currency,instance_type,as_of,source"
)

FSDL_NAMES = [
    (r"^A100 \(80", "A100-80GB"),
    (r"^A100 \(40", "A100-40GB"),
    (r"^H100 PCIe", "H100-PCIE"),
    (r"^H100", "H100-80GB"),
    (r"^A10G", "A10G"),
    (r"^A10\b", "A10"),
    (r"^T4", "T4"),
    (r"^V100 \(32", "V100-32GB"),
    (r"^V100", "V100"),
    (r"^K80", "K80"),
    (r"^P100", "P100"),
    (r"^L4\b", "L4"),
    (r"^L40S", "L40S"),
    (r"^H200", "H200"),
]
VAST_NAMES = [
    (r"H100_SXM", "H100-80GB"),
    (r"H100_PCIE", "H100-PCIE"),
    (r"H200", "H200"),
    (r"RTX_4090", "RTX-4090"),
    (r"RTX_3090", "RTX-3090"),
    (r"L40S", "L40S"),
    (r"-A10-", "A10"),
    (r"V100", "V100"),
]


def _map(name: str, rules: list[tuple[str, str]]) -> str | None:
    return next((model for pattern, model in rules if re.search(pattern, name)), None)


def _per_gpu(price: str, gpus: float) -> str:
    value = (Decimal(price) / Decimal(str(gpus))).quantize(Decimal("0.00001"))
    return str(value.normalize()) if value else ""


def fsdl(data: Path) -> Iterator[list[str]]:
    src = "the-full-stack/website @ 2bddc6d52544 docs/cloud-gpus/cloud-gpus.csv (MIT)"
    with (data / "prices" / "fsdl_cloud-gpus_latest.csv").open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            model = _map(row["GPU Type"], FSDL_NAMES)
            if model is None or not row["On-demand"]:
                continue
            gpus = float(row["GPUs"])
            spot = _per_gpu(row["Spot"], gpus) if row["Spot"] else ""
            yield [
                row["Cloud"],
                "any",
                model,
                str(int(gpus)),
                _per_gpu(row["On-demand"], gpus),
                spot,
                "USD",
                row["Name"],
                FSDL_AS_OF,
                src,
            ]


def skypilot_lambda(data: Path) -> Iterator[list[str]]:
    src = "skypilot-org/skypilot-catalog catalogs/v8/lambda/vms.csv (Apache-2.0)"
    with (data / "prices" / "catalogs" / "skypilot_v8" / "lambda" / "vms.csv").open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            acc, itype = row["AcceleratorName"], row["InstanceType"]
            if not acc:
                continue
            if acc.startswith("A100"):
                model = "A100-80GB" if ("80" in acc or "81920" in row["GpuInfo"]) else "A100-40GB"
            elif acc == "H100":
                model = "H100-PCIE" if "pcie" in itype else "H100-80GB"
            else:
                model = {"A10": "A10", "V100": "V100", "GH200": None}.get(acc)
            if model is None:
                continue
            gpus = float(row["AcceleratorCount"])
            yield [
                "Lambda",
                row["Region"],
                model,
                str(int(gpus)),
                _per_gpu(row["Price"], gpus),
                "",
                "USD",
                itype,
                SNAPSHOT,
                src,
            ]


def skypilot_gcp(data: Path) -> Iterator[list[str]]:
    """GCP lists A100 GPU prices apart from the a2 VM that carries them; a GPU-hour costs both."""
    src = "skypilot-org/skypilot-catalog catalogs/v8/gcp/vms.csv (Apache-2.0)"
    with (data / "prices" / "catalogs" / "skypilot_v8" / "gcp" / "vms.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    vms = {(r["InstanceType"], r["AvailabilityZone"]): r for r in rows if r["InstanceType"]}
    seen: set[tuple[str, str, int]] = set()
    for r in rows:
        if r["InstanceType"] or not r["AcceleratorName"].startswith("A100") or "40960" not in r["GpuInfo"]:
            continue
        n = int(float(r["AcceleratorCount"]))
        vm = vms.get((f"a2-highgpu-{n}g", r["AvailabilityZone"]))
        if vm is None or (r["Region"], vm["InstanceType"], n) in seen:
            continue
        seen.add((r["Region"], vm["InstanceType"], n))
        price = str(Decimal(r["Price"]) + Decimal(vm["Price"]))
        spot = ""
        if r["SpotPrice"] and vm["SpotPrice"]:
            spot = _per_gpu(str(Decimal(r["SpotPrice"]) + Decimal(vm["SpotPrice"])), n)
        yield [
            "GCP",
            r["Region"],
            "A100-40GB",
            str(n),
            _per_gpu(price, n),
            spot,
            "USD",
            vm["InstanceType"],
            SNAPSHOT,
            src,
        ]


def vast(data: Path) -> Iterator[list[str]]:
    src = "skypilot-org/skypilot-catalog @ 00690e7666c7 catalogs/v7/vast/vms.csv (Apache-2.0)"
    with (data / "prices" / "catalogs" / "vast_vms_v7_00690e76_condensed.csv").open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            model = _map(row["InstanceType"], VAST_NAMES)
            if model is None:
                continue
            gpus = float(row["AcceleratorCount"])
            yield [
                "Vast.ai",
                row["Region"],
                model,
                str(int(gpus)),
                _per_gpu(row["Price_usd_per_hr"], gpus),
                "",
                "USD",
                row["InstanceType"],
                SNAPSHOT,
                src,
            ]


def build(data: Path) -> str:
    out = io.StringIO()
    out.write(f"# danlu public GPU price snapshot, snapshot {SNAPSHOT}. Prices: USD per GPU-hour.\n")
    out.write("# Derived from: the-full-stack/website @ 2bddc6d52544 docs/cloud-gpus/cloud-gpus.csv (MIT);\n")
    out.write(
        "# skypilot-org/skypilot-catalog catalogs/v8 lambda and gcp, and @ 00690e7666c7 catalogs/v7/vast\n"
    )
    out.write(
        "# (Apache-2.0). Regenerate with tools/build_price_catalog.py. as_of: when the price was observed\n"
    )
    out.write("# (FSDL: its commit date) or, where the source carries no date, retrieved.\n")
    out.write(HEADER + "\n")
    writer = csv.writer(out, lineterminator="\n")
    seen: set[tuple[str, ...]] = set()
    for gen in (fsdl, skypilot_lambda, skypilot_gcp, vast):
        for row in gen(data):
            key = tuple(row[:8])
            if key not in seen and row[4]:
                seen.add(key)
                writer.writerow(row)
    return out.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--out", type=Path, default=REPO / "src" / "danlu" / "catalog" / "prices.csv")
    args = ap.parse_args()
    args.out.write_text(build(args.data), encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
