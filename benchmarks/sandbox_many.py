"""100 sandboxed instances at once on one host, with the escape checks still holding.

One platform on SQLite, built as ``danlu server`` builds it (sandbox, the host's default network
policy, cgroups where the host has them). 100 instances of 10 renters each write a secret into
their workspace and sleep. Measured: rent latency while they pile up, one control-loop tick
(reconcile + scheduling + meter) with all of them running, processes and memory they take. Then
an attacker rents one more and tries, from inside, to read every one of the 100 secrets, to see
or SIGKILL their processes (by their host pids) and to reach the database and the control-plane
port on 127.0.0.1; every instance must still be running afterwards.

    python benchmarks/sandbox_many.py [--instances 100] [--json]
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

import psutil

from danlu.accounts.service import create_user
from danlu.billing import service as billing
from danlu.compute import instances as svc
from danlu.compute.gpus import parse_simulated_spec
from danlu.compute.reconcile import reconcile
from danlu.compute.sandbox.probe import make_local_backend, sandbox_dir_for
from danlu.context import Platform, Settings
from danlu.core.clock import SystemClock
from danlu.db.engine import open_database
from danlu.db.models import User
from danlu.server.bootstrap import bootstrap
from danlu.server.loop import ControlLoop


def build(data: Path, n: int) -> Platform:
    data.mkdir(parents=True)
    backend, status = make_local_backend(data)
    if not status.sandboxed:
        raise SystemExit(f"no sandbox here: {status.detail}")
    sdir = sandbox_dir_for(data, status)
    db = open_database(f"sqlite:///{data / 'danlu.db'}")
    clock = SystemClock()
    gpus = parse_simulated_spec(",".join(["T4:64"] * ((n + 64) // 64)), "local")
    host = {"network_policy": status.network, "mem_per_gpu_mb": 512, "pids_per_gpu": 64}
    bootstrap(db, data, "CNY", gpus, clock.now_ms(), host_settings=host, sandbox=status, sandbox_dir=sdir)
    p = Platform(
        db=db, clock=clock, backend=backend, settings=Settings(data_dir=data, sandbox_dir=sdir), sandbox=status
    )
    billing.set_price(p, "T4", "3.60")
    return p


def user(p: Platform, name: str) -> User:
    with p.db.write() as s:
        u, _ = create_user(s, name, p.clock.now_ms())
        s.expunge(u)
    billing.admin_topup(p, name, "1000.00", f"seed-{name}")
    return u


ATTACK = r"""
import json, os, socket, sys
paths, pids, ports = json.loads(os.environ["TARGETS"])
out = {"read": 0, "killed": 0, "connected": 0, "procs_seen": len([d for d in os.listdir("/proc") if d.isdigit()])}
for p in paths:
    try:
        open(p).read(); out["read"] += 1
    except OSError:
        pass
for pid in pids:
    try:
        os.kill(pid, 9); out["killed"] += 1
    except OSError:
        pass
for port in ports:
    s = socket.socket(); s.settimeout(2)
    try:
        s.connect(("127.0.0.1", port)); out["connected"] += 1
    except OSError:
        pass
print(json.dumps(out))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instances", type=int, default=100)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    n = args.instances
    root = Path(tempfile.mkdtemp(prefix="danlu-bench-many-"))
    os.chmod(root, 0o711)
    p = build(root / "data", n)
    renters = [user(p, f"renter{i}") for i in range(10)]
    procs0, mem0 = len(psutil.pids()), psutil.virtual_memory().used
    rent_ms: list[float] = []
    ids: list[tuple[User, str]] = []
    try:
        for i in range(n):
            u = renters[i % len(renters)]
            t0 = time.perf_counter()
            v = svc.rent(p, u, "T4", 1, ["sh", "-c", "echo secret-$DANLU_INSTANCE_ID > s; exec sleep 600"])
            rent_ms.append((time.perf_counter() - t0) * 1000)
            ids.append((u, v.id))
        time.sleep(1.0)
        loop = ControlLoop(p)
        ticks = []
        for _ in range(5):
            t0 = time.perf_counter()
            loop.run_once()
            ticks.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        alive = reconcile(p).alive
        reconcile_ms = (time.perf_counter() - t0) * 1000
        procs, mem = len(psutil.pids()) - procs0, psutil.virtual_memory().used - mem0
        paths = [str(p.workspaces / iid / "s") for _, iid in ids]
        victims = [pr.pid for pr in psutil.process_iter(["cmdline"]) if pr.info["cmdline"] == ["sleep", "600"]]
        targets = json.dumps([paths, victims, [5432, 8000]])
        attacker = user(p, "mallory")
        a = svc.rent(p, attacker, "T4", 1, ["python3", "-c", ATTACK], env={"TARGETS": targets})
        deadline = time.monotonic() + 60
        while svc.show(p, attacker, a.id).status == "running" and time.monotonic() < deadline:
            time.sleep(0.2)
            reconcile(p)
        out = p.backend.read_output(a.id, 0)[0].strip()
        try:
            attack = json.loads(out.splitlines()[-1])
        except (ValueError, IndexError):
            raise SystemExit(f"the attacker's probe printed no result: {out!r}") from None
        still = sum(1 for u, iid in ids if svc.show(p, u, iid).status == "running")
        readable_by_host = sum(1 for x in paths if Path(x).exists())
    finally:
        for u, iid in ids:
            try:
                svc.destroy(p, u, iid)
            except Exception as exc:  # report, keep cleaning
                print(f"could not remove {iid}: {exc}", file=sys.stderr)
        p.db.engine.dispose()
        shutil.rmtree(root, ignore_errors=True)
    ok = attack["read"] == attack["killed"] == attack["connected"] == 0 and still == n
    result: dict[str, Any] = {
        "instances": n,
        "sandbox": p.sandbox.banner(),
        "rent_p50_ms": statistics.median(rent_ms),
        "rent_first10_p50_ms": statistics.median(rent_ms[:10]),
        "rent_last10_p50_ms": statistics.median(rent_ms[-10:]),
        "loop_tick_ms_p50": statistics.median(ticks),
        "reconcile_ms": reconcile_ms,
        "alive_seen_by_reconcile": alive,
        "extra_processes": procs,
        "extra_processes_per_instance": procs / n,
        "extra_memory_mb": mem / 2**20,
        "extra_memory_mb_per_instance": mem / 2**20 / n,
        "secrets_written": readable_by_host,
        "attack": attack,
        "still_running_after_attack": still,
        "escape_checks": "PASS" if ok else "FAIL",
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{n} sandboxed instances at once — {result['sandbox']}")
        print("| measure | value |\n|---|---|")
        for k, v in result.items():
            if k not in ("sandbox",):
                print(f"| {k} | {v:.1f} |" if isinstance(v, float) else f"| {k} | {v} |")
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
