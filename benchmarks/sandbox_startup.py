"""Sandbox start-up cost: rent → first line of output, sandboxed against the same rental unsandboxed.

Three platforms in one process on SQLite, each built as ``danlu server`` builds it: the plain
backend (``--no-sandbox``), the sandbox with network ``none``, and the sandbox with ``outbound``
(slirp4netns + nftables, where this host can). Rentals are interleaved round-robin, so all
three see the same machine load. Each sample is the wall time from calling
``danlu.compute.instances.rent`` (one transaction, claim, launch, record, start) until the
command's first output line is in its log (``echo ready``), polled every 0.5 ms; then the
instance is removed.

    python benchmarks/sandbox_startup.py [--rounds 60] [--json]

Target (issue 7): the sandbox adds at most 150 ms at p50.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from danlu.accounts.service import create_user
from danlu.billing import service as billing
from danlu.compute import instances as svc
from danlu.compute.gpus import parse_simulated_spec
from danlu.compute.sandbox.probe import make_local_backend, sandbox_dir_for
from danlu.context import Platform, Settings
from danlu.core.clock import SystemClock
from danlu.db.engine import open_database
from danlu.db.models import User
from danlu.server.bootstrap import bootstrap

TARGET_MS = 150.0


def build(root: Path, name: str, no_sandbox: bool, network: str) -> tuple[Platform, User]:
    data = root / name
    data.mkdir(parents=True)
    backend, status = make_local_backend(data, no_sandbox=no_sandbox, network=network)
    sdir = sandbox_dir_for(data, status)
    db = open_database(f"sqlite:///{data / 'danlu.db'}")
    clock = SystemClock()
    host = {"network_policy": status.network} if status.sandboxed else {}
    spec = parse_simulated_spec("T4:8", "local")
    bootstrap(db, data, "CNY", spec, clock.now_ms(), host_settings=host, sandbox=status, sandbox_dir=sdir)
    p = Platform(
        db=db, clock=clock, backend=backend, settings=Settings(data_dir=data, sandbox_dir=sdir), sandbox=status
    )
    billing.set_price(p, "T4", "3.60")
    with p.db.write() as s:
        user, _ = create_user(s, "bench", clock.now_ms())
        s.expunge(user)
    billing.admin_topup(p, "bench", "1000.00", "seed")
    return p, user


def one(p: Platform, user: User) -> float:
    t0 = time.perf_counter()
    view = svc.rent(p, user, "T4", 1, ["sh", "-c", "echo ready; exec sleep 30"])
    while "ready" not in p.backend.read_output(view.id, 0)[0]:
        if time.perf_counter() - t0 > 20:
            raise RuntimeError(f"{view.id} printed nothing in 20 s: {view.status} {view.status_reason}")
        time.sleep(0.0005)
    elapsed = (time.perf_counter() - t0) * 1000
    svc.destroy(p, user, view.id)
    return elapsed


def summary(samples: list[float]) -> dict[str, float]:
    qs = statistics.quantiles(samples, n=20)
    return {"p50_ms": statistics.median(samples), "p90_ms": qs[17], "max_ms": max(samples), "n": len(samples)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="danlu-bench-sandbox-"))
    os.chmod(root, 0o711)
    variants: dict[str, tuple[Platform, User]] = {"unsandboxed (--no-sandbox)": build(root, "plain", True, "none")}
    sandboxed, _ = make_local_backend(root / "probe", network="none")
    skipped = []
    if sandboxed.sandbox is None:
        skipped.append("sandbox: bubblewrap is not usable here")
    else:
        variants["sandbox, network none"] = build(root, "none", False, "none")
        try:
            variants["sandbox, network outbound"] = build(root, "outbound", False, "outbound")
        except OSError as exc:
            skipped.append(f"outbound: {exc}")
    samples: dict[str, list[float]] = {k: [] for k in variants}
    try:
        for _ in range(3):  # warm-up: imports, page cache, first cgroup
            for p, u in variants.values():
                one(p, u)
        for _ in range(args.rounds):
            for name, (p, u) in variants.items():
                samples[name].append(one(p, u))
    finally:
        for p, _u in variants.values():
            p.db.engine.dispose()
        shutil.rmtree(root, ignore_errors=True)
    base = statistics.median(samples["unsandboxed (--no-sandbox)"])
    rows: list[dict[str, Any]] = []
    for name, xs in samples.items():
        s = summary(xs)
        rows.append({"variant": name, **s, "added_p50_ms": s["p50_ms"] - base, "ratio_p50": s["p50_ms"] / base})
    worst = max(r["added_p50_ms"] for r in rows)
    verdict = "MET" if worst <= TARGET_MS else "MISSED"
    if args.json:
        print(json.dumps({"rows": rows, "target_added_p50_ms": TARGET_MS, "verdict": verdict,
                          "skipped": skipped, "load": os.getloadavg()}, indent=2))  # fmt: skip
        return 0
    print(f"rent → first output line, {args.rounds} rounds interleaved, SQLite, this machine ({os.cpu_count()} CPUs)")
    print(f"| {'variant':<28} | p50 ms | p90 ms | max ms | added p50 ms | × unsandboxed |")
    print(f"|{'-' * 30}|--------|--------|--------|--------------|---------------|")
    for r in rows:
        print(
            f"| {r['variant']:<28} | {r['p50_ms']:6.1f} | {r['p90_ms']:6.1f} | {r['max_ms']:6.1f} "
            f"| {r['added_p50_ms']:12.1f} | {r['ratio_p50']:13.2f} |"
        )
    print(f"target: the sandbox adds ≤ {TARGET_MS:.0f} ms at p50 → {verdict} (worst {worst:.1f} ms)")
    for s in skipped:
        print(f"skipped: {s}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
