"""Regenerate src/danlu/catalog/prices.csv from the public price data in ../shared/data/prices.

Run by a maintainer when the data is refreshed, never at test or run time (nothing is fetched):

    python tools/build_price_catalog.py [--data ../shared/data] [--out src/danlu/catalog/prices.csv]

Every price is USD per GPU-hour (instance price ÷ GPUs in the instance), rounded to 5 decimals and
written without exponent notation. Rows whose GPU is not in the shipped GPU-model table, or is
ambiguous (A100 without its memory size), are dropped, so the advisor can compute fit and time for
every row it ships.

``as_of`` is each row's own observation date. FSDL rows: the first of the dated versions of
cloud-gpus.csv in prices/fsdl_cloud_gpus_history from which the row, at that price, is in every
later version. SkyPilot and Vast rows carry no date: the day the lists were copied (SNAPSHOT).
FSDL's Lambda rows name no instance: each takes the instance type (and GPU variant) of the one
SkyPilot Lambda instance with the same GPUs, vCPUs, RAM and GPU memory (stderr lists the matches).
The loader (danlu.catalog.prices) marks superseded and outlier rows; this tool writes every row.
"""

from __future__ import annotations

import argparse
import ast
import csv
import io
import re
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SNAPSHOT = "2026-12-02"  # the day the sources below were copied into shared/data
FSDL_SRC = "the-full-stack/website @ 2bddc6d52544 docs/cloud-gpus/cloud-gpus.csv (MIT)"
# The comment lines above the CSV header; {versions}, {first}, {last} describe the FSDL history.
HEADER_TEXT = """\
# danlu public GPU price snapshot, snapshot {snapshot}. Prices: USD per GPU-hour.
# Derived from: the-full-stack/website @ 2bddc6d52544 docs/cloud-gpus/cloud-gpus.csv (MIT);
# skypilot-org/skypilot-catalog catalogs/v8 lambda and gcp, and @ 00690e7666c7 catalogs/v7/vast
# (Apache-2.0). as_of is each row's observation date. FSDL rows: the first of the {versions} dated versions of
# cloud-gpus.csv ({first} .. {last}, git commit dates) from which the row, with this price, is in
# every later version ({first} = on or before that day). SkyPilot and Vast rows: the sources carry no
# date, so only the list's date is known: the day it was retrieved into shared/data ({snapshot}).
# FSDL's Lambda rows name no instance: instance_type (and the GPU variant) is SkyPilot's Lambda instance
# with the same GPUs, vCPUs, RAM and GPU memory where exactly one matches (its "H100 (80 GB)", 26 vCPUs,
# 200 GB, is gpu_1x_h100_pcie; its "A10G" is gpu_1x_a10). Other H100 rows: PCIe where the source says so,
# else the SXM row (H100-80GB). The loader marks older rows of the same instance superseded and prices
# under 1/3 of the other providers' median outliers (docs/advisor.md).
"""
HEADER = "provider,region,gpu_model,gpus,price_per_gpu_hour,spot_per_gpu_hour,currency,instance_type,as_of,source"

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
    return format(value.normalize(), "f") if value else ""  # "f": 10, never 1E+1


def _num(text: str | None) -> Decimal | None:
    text = (text or "").replace("$", "").replace(",", "").strip()
    return Decimal(text) if text else None


FsdlKey = tuple[str, str, Decimal | None, str, Decimal | None, Decimal | None]


def _fsdl_key(row: dict[str, str]) -> FsdlKey:
    """An FSDL row as an offer at a price: the same key in two versions is the same observation."""
    return (
        row["Cloud"].strip(),
        row["GPU Type"].strip(),
        _num(row["GPUs"]),
        (row.get("Name") or "").strip(),
        _num(row["On-demand"]),
        _num(row.get("Spot")),
    )


def fsdl_history(data: Path) -> list[tuple[str, set[FsdlKey]]]:
    """The dated versions of FSDL's cloud-gpus.csv, oldest first: (git commit date, its rows)."""
    versions = []
    for f in sorted((data / "prices" / "fsdl_cloud_gpus_history").glob("cloud-gpus_*.csv")):
        found = re.search(r"\d{4}-\d{2}-\d{2}", f.name)
        if found is None:
            raise SystemExit(f"{f}: no date in the file name")
        with f.open(encoding="utf-8") as fh:
            versions.append((found.group(0), {_fsdl_key(r) for r in csv.DictReader(fh)}))
    if not versions:
        raise SystemExit(f"no cloud-gpus_*.csv in {data / 'prices' / 'fsdl_cloud_gpus_history'}")
    return versions


def fsdl_first_seen(versions: list[tuple[str, set[FsdlKey]]]) -> dict[FsdlKey, str]:
    """Each row of the newest version → the first version from which it is in every later one."""
    out = {}
    for key in versions[-1][1]:
        for day, keys in reversed(versions):
            if key not in keys:
                break
            out[key] = day
    return out


def lambda_shapes(data: Path) -> dict[tuple[float, float, float, int], set[str]]:
    """SkyPilot's Lambda instances by shape: (GPUs, vCPUs, RAM GiB, GiB per GPU) → instance types."""
    shapes: dict[tuple[float, float, float, int], set[str]] = {}
    with (data / "prices" / "catalogs" / "skypilot_v8" / "lambda" / "vms.csv").open(encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            if not r["AcceleratorName"]:
                continue
            per_gpu_gib = ast.literal_eval(r["GpuInfo"])["Gpus"][0]["MemoryInfo"]["SizeInMiB"] / 1024
            shape = (float(r["AcceleratorCount"]), float(r["vCPUs"]), float(r["MemoryGiB"]), round(per_gpu_gib))
            shapes.setdefault(shape, set()).add(r["InstanceType"])
    return shapes


def fsdl(data: Path) -> Iterator[list[str]]:
    versions = fsdl_history(data)
    first_seen = fsdl_first_seen(versions)
    shapes = lambda_shapes(data)
    lambda_models = {row[7]: row[2] for row in skypilot_lambda(data)}  # instance type → GPU model
    with (data / "prices" / "fsdl_cloud-gpus_latest.csv").open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            model = _map(row["GPU Type"], FSDL_NAMES)
            itype = row["Name"]
            gpus = float(row["GPUs"])
            if row["Cloud"] == "Lambda" and row["vCPUs"] and row["RAM"] and row["GPU RAM"]:
                shape = (gpus, float(row["vCPUs"]), float(row["RAM"]), round(float(row["GPU RAM"]) / gpus))
                match = shapes.get(shape, set())
                what = f"Lambda {row['GPU Type']} x{int(gpus)}"
                if len(match) == 1:
                    (itype,) = match
                    model = lambda_models.get(itype)
                    print(f"{what} -> {itype} ({model or 'GPU not in the model table: dropped'})", file=sys.stderr)
                else:
                    print(f"{what}: {len(match)} matches {sorted(match)}; kept", file=sys.stderr)
            if model is None or not row["On-demand"]:
                continue
            as_of = first_seen.get(_fsdl_key(row))
            if as_of is None:
                raise SystemExit(
                    f"FSDL row {_fsdl_key(row)} of fsdl_cloud-gpus_latest.csv is not in the newest history "
                    f"version ({versions[-1][0]}): add that version to fsdl_cloud_gpus_history"
                )
            spot = _per_gpu(row["Spot"], gpus) if row["Spot"] else ""
            yield [
                row["Cloud"],
                "any",
                model,
                str(int(gpus)),
                _per_gpu(row["On-demand"], gpus),
                spot,
                "USD",
                itype,
                as_of,
                FSDL_SRC,
            ]


def skypilot_lambda(data: Path) -> Iterator[list[str]]:
    src = "skypilot-org/skypilot-catalog catalogs/v8/lambda/vms.csv (Apache-2.0)"
    with (data / "prices" / "catalogs" / "skypilot_v8" / "lambda" / "vms.csv").open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            acc, itype = row["AcceleratorName"], row["InstanceType"]
            if not acc:
                continue
            model: str | None
            if acc.startswith("A100"):
                model = "A100-80GB" if ("80" in acc or "81920" in row["GpuInfo"]) else "A100-40GB"
            elif acc == "H100":
                model = "H100-PCIE" if "pcie" in itype else "H100-80GB"
            else:
                # Lambda's GH200 is the 96 GB HBM3 part (GpuInfo 98304 MiB); the table's GH200 is the 144 GB one
                model = {"A10": "A10", "V100": "V100", "A6000": "RTX-A6000", "B200": "B200", "GH200": None}.get(acc)
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
        # 16 A100s come only as a2-megagpu-16g (SkyPilot's optimizer picks it for A100:16)
        vm = vms.get((f"a2-megagpu-{n}g" if n == 16 else f"a2-highgpu-{n}g", r["AvailabilityZone"]))
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
    versions = [day for day, _ in fsdl_history(data)]
    out.write(HEADER_TEXT.format(snapshot=SNAPSHOT, versions=len(versions), first=versions[0], last=versions[-1]))
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
