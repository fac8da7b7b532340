"""danlu compare and danlu advise beside SkyPilot's optimizer, on the price rows both hold.

Issue 11: "danlu compare and danlu advise agree with each other and with SkyPilot's choices on the
rows both hold". SkyPilot 0.14.1 (the peer's tool, installed into its own virtual environment under
``.bench/`` from the package registry on first use; nothing is fetched at run time: its catalogs are
the shared data's copies of skypilot-catalog v8, written into a private ``~/.sky``) is asked, for
every (accelerator, count) its Lambda and GCP catalogs hold, what its optimizer launches:
``Cloud.get_feasible_launchable_resources`` on each cloud, then the cheapest ``get_cost(3600)``
(what ``sky launch --gpus ACC:N`` minimises with one node and no time estimate).

danlu's side: ``danlu compare GPU --gpus N`` (one machine with N GPUs) over the rows that came from
those same SkyPilot catalogs, top row; and ``danlu advise`` (a 1B-parameter fine-tune on that GPU)
on all rows: its cheapest on-demand public option with N GPUs against compare's top row on all rows.

    python benchmarks/skypilot_agreement.py [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

from danlu.advisor import service
from danlu.advisor.workload import build_workload
from danlu.catalog.prices import models_matching
from danlu.core.errors import InvalidInput

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data" / "prices" / "catalogs" / "skypilot_v8"
VENV = REPO / ".bench" / "skypilot-venv"
SKYPILOT = "skypilot==0.14.1"
# SkyPilot accelerator names -> danlu GPU models or families. SkyPilot's "A100" is the 40 GB part (80 GB is
# "A100-80GB"); its "H100" covers the SXM5 and the PCIe instances, danlu's family "H100" (H100-80GB, H100-PCIE);
# its GH200 is the 96 GB HBM3 part, which danlu's table (the 144 GB GH200) does not hold.
NAMES = {
    "A10": "A10",
    "A100": "A100-40GB",
    "A100-80GB": "A100-80GB",
    "A6000": "RTX-A6000",
    "B200": "B200",
    "H100": "H100",
    "V100": "V100",
}

SKY_SIDE = r"""
import json, sys
import sky
from sky import clouds
out = []
for acc, n in json.loads(sys.argv[1]):
    best = None
    for cloud in (clouds.Lambda(), clouds.GCP()):
        try:
            feasible = cloud.get_feasible_launchable_resources(sky.Resources(accelerators={acc: n}), num_nodes=1)
        except Exception as exc:  # a cloud that cannot offer it
            continue
        for r in feasible.resources_list:
            cost = r.get_cost(3600)
            if best is None or cost < best[2]:
                best = (str(cloud), r.instance_type, cost)
    out.append({"acc": acc, "count": n, "choice": best})
print(json.dumps(out))
"""


def ensure_skypilot() -> Path:
    python = VENV / "bin" / "python"
    if not python.exists():
        venv.EnvBuilder(with_pip=True).create(VENV)
        subprocess.run([str(python), "-m", "pip", "install", "-q", SKYPILOT], check=True, stderr=subprocess.DEVNULL)
    return python


def sky_requests() -> list[tuple[str, int]]:
    import csv

    pairs = set()
    for cloud in ("lambda", "gcp"):
        with (DATA / cloud / "vms.csv").open(encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                acc = row.get("AcceleratorName") or ""
                if acc and row.get("AcceleratorCount"):
                    pairs.add((acc, int(float(row["AcceleratorCount"]))))
    return sorted(pairs)


def sky_choices(python: Path, requests: list[tuple[str, int]]) -> list[dict[str, Any]]:
    home = Path(tempfile.mkdtemp(prefix="danlu-sky-"))
    try:
        for cloud in ("lambda", "gcp", "common"):
            target = home / ".sky" / "catalogs" / "v8" / cloud
            target.mkdir(parents=True)
            for f in (DATA / cloud).glob("*.csv"):
                shutil.copy(f, target / f.name)
        env = {**os.environ, "HOME": str(home)}
        done = subprocess.run(
            [str(python), "-c", SKY_SIDE, json.dumps(requests)], env=env, capture_output=True, text=True, check=True
        )
        return list(json.loads(done.stdout.strip().splitlines()[-1]))
    finally:
        shutil.rmtree(home, ignore_errors=True)


def danlu_compare(model: str, n: int, *, skypilot_rows: bool) -> dict[str, Any] | None:
    try:
        rows = service.compare(model, hours=1, count=n)
    except InvalidInput:
        return None
    if skypilot_rows:
        rows = [r for r in rows if r["source_label"] in ("SkyPilot lambda", "SkyPilot gcp")]
    return rows[0] if rows else None


def danlu_advise(model: str, n: int) -> Any:
    names = set(models_matching(model))  # a family ("H100") is every model in it
    result = service.advise(build_workload(params=1e9, tokens=1e8), today=date(2026, 12, 2))
    options = [
        o for o in result.options if o.gpu_model in names and o.gpu_count == n and o.plan == "on-demand" and o.source
    ]
    return min(options, key=lambda o: o.cost_minor) if options else None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    requests = sky_requests()
    choices = sky_choices(ensure_skypilot(), requests)
    rows = []
    for c in choices:
        model = NAMES.get(c["acc"])
        sky = c["choice"]
        ours = danlu_compare(model, c["count"], skypilot_rows=True) if model else None
        every = danlu_compare(model, c["count"], skypilot_rows=False) if model else None
        adv = danlu_advise(model, c["count"]) if model and every else None
        row: dict[str, Any] = {
            "request": f"{c['acc']}:{c['count']}",
            "danlu_model": model or "(not in danlu's table)",
            "skypilot": None if sky is None else {"cloud": sky[0], "instance": sky[1], "per_hour": round(sky[2], 4)},
            "danlu_compare": None
            if ours is None
            else {"provider": ours["provider"], "instance": ours["instance_type"], "per_hour": ours["price_per_hour"]},
        }
        row["same_instance"] = bool(sky and ours and sky[1] == ours["instance_type"])
        row["same_price"] = bool(
            sky and ours and abs(Decimal(str(sky[2])) - Decimal(ours["price_per_hour"])) < Decimal("0.005")
        )
        if every is not None and adv is not None:
            row["advise_matches_compare"] = (adv.provider, adv.as_of, adv.source) == (
                every["provider"],
                every["as_of"],
                every["source"],
            )
        rows.append(row)
    held = [r for r in rows if r["skypilot"] and r["danlu_compare"]]
    summary = {
        "requests": len(rows),
        "both_hold": len(held),
        "same_price": sum(r["same_price"] for r in held),
        "same_instance_and_price": sum(r["same_instance"] and r["same_price"] for r in held),
        "advise_matches_compare": sum(1 for r in rows if r.get("advise_matches_compare")),
        "advise_checked": sum(1 for r in rows if "advise_matches_compare" in r),
    }
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=2))
        return 0
    print("SkyPilot 0.14.1 optimizer vs danlu compare/advise on skypilot-catalog v8 (Lambda, GCP A100)")
    print("| request | SkyPilot launches | $/h | danlu compare (same rows) | $/h | same | advise = compare |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        s, d = r["skypilot"], r["danlu_compare"]
        same = "yes" if r["same_instance"] and r["same_price"] else ("price" if r["same_price"] else "no")
        agree = r.get("advise_matches_compare")
        print(
            f"| {r['request']} → {r['danlu_model']} | {s['cloud'] + ' ' + s['instance'] if s else '—'} | "
            f"{s['per_hour'] if s else '—'} | {d['provider'] + ' ' + d['instance'] if d else '—'} | "
            f"{d['per_hour'] if d else '—'} | {same} | {'—' if agree is None else ('yes' if agree else 'no')} |"
        )
    print(
        f"both hold {summary['both_hold']} of {summary['requests']}: same instance and price "
        f"{summary['same_instance_and_price']}, same price {summary['same_price']}; advise's cheapest = compare's top "
        f"{summary['advise_matches_compare']} of {summary['advise_checked']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
