"""The Slurm backend against the local one, on the development cluster (`make slurm-dev`).

1. **Rent → first output line**, the same sandboxed rental through the local backend and through
   Slurm (sbatch --hold, scontrol release, wait for RUNNING, the node's runner builds the same
   sandbox), interleaved round-robin on one machine, SQLite. Slurm's part is its submit, release,
   scheduling and slurmstepd's job launch.
2. **Reconciliation of N Slurm jobs** (default 1,000): N jobs are submitted held (`sbatch --hold
   --wrap true`, no GPU), then one control-loop `poll` of N handles is timed: wall time, and CPU of
   this process plus its children (`scontrol ping` + `squeue`); beside it the bare `squeue` call
   it makes, as the reference. Target (issue 13): under 1 s of control-plane CPU per tick.

    python benchmarks/slurm.py [--rounds 15] [--jobs 1000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from danlu.accounts.service import create_user
from danlu.billing import service as billing
from danlu.compute import instances as svc
from danlu.compute.backends.slurm import SlurmBackend, SlurmCli, SlurmConfig, discover
from danlu.compute.backends.slurm_parse import SQUEUE_FORMAT
from danlu.compute.gpus import parse_simulated_spec
from danlu.compute.sandbox.probe import make_local_backend, sandbox_dir_for
from danlu.context import Platform, Settings
from danlu.core.clock import SystemClock
from danlu.db.engine import open_database
from danlu.db.models import User
from danlu.server.bootstrap import bootstrap

ROOT = Path(__file__).resolve().parents[1]
TARGET_CPU_S = 1.0


def cluster_conf() -> Path:
    done = subprocess.run(["bash", str(ROOT / "tools" / "slurm-dev.sh"), "start"], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the development Slurm cluster did not start:\n{done.stderr}")
    flags = done.stdout.split()
    return Path(flags[flags.index("--slurm-conf") + 1])


def build(root: Path, name: str, conf: Path | None) -> tuple[Platform, User, str]:
    data = root / name
    data.mkdir(parents=True)
    local, status = make_local_backend(data, network="none")
    sdir = sandbox_dir_for(data, status)
    db = open_database(f"sqlite:///{data / 'danlu.db'}")
    clock = SystemClock()
    backend: Any = local
    if conf is None:
        gpus, model = parse_simulated_spec("A100-80GB:4", "local"), "A100-80GB"
    else:
        config = SlurmConfig(conf=conf, partition="gpu")
        gpus, config.gres_types = discover(SlurmCli(config), {"a100": "A100-80GB"}, simulated=True)
        backend, model = SlurmBackend(data, config, sandboxed=status.sandboxed), "A100-80GB"
    host = {"network_policy": "none"} if status.sandboxed else {}
    bootstrap(db, data, "CNY", gpus, clock.now_ms(), host_settings=host, sandbox=status, sandbox_dir=sdir)
    settings = Settings(data_dir=data, sandbox_dir=sdir)
    p = Platform(db=db, clock=clock, backend=backend, settings=settings, sandbox=status)
    billing.set_price(p, model, "36.00")
    with p.db.write() as s:
        user, _ = create_user(s, "bench", clock.now_ms())
        s.expunge(user)
    billing.admin_topup(p, "bench", "1000.00", "seed")
    return p, user, model


def first_output(p: Platform, user: User, model: str) -> float:
    t0 = time.perf_counter()
    view = svc.rent(p, user, model, 1, ["sh", "-c", "echo ready; exec sleep 30"])
    while "ready" not in p.backend.read_output(view.id, 0)[0]:
        if time.perf_counter() - t0 > 30:
            raise RuntimeError(f"{view.id} printed nothing in 30 s: {view.status} {view.status_reason}")
        time.sleep(0.001)
    elapsed = (time.perf_counter() - t0) * 1000
    svc.destroy(p, user, view.id)
    return elapsed


def cpu_now() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def reconcile_cost(conf: Path, root: Path, n: int) -> dict[str, Any]:
    config = SlurmConfig(conf=conf)
    cli = SlurmCli(config)
    backend = SlurmBackend(root / "reconcile", config)
    ids: list[str] = []
    t0 = time.perf_counter()
    for i in range(n):
        out = cli.run(
            "sbatch", "--parsable", "--hold", f"--job-name=danlu-bench-{i}", "--output=/dev/null", "--wrap=true"
        )
        ids.append(out.strip().split(";")[0])
    submit_s = time.perf_counter() - t0
    handles = [json.dumps({"job": job, "run": f"bench-{i}", "log": "bench"}) for i, job in enumerate(ids)]
    try:
        polls, bare = [], []
        for _ in range(5):
            c0, w0 = cpu_now(), time.perf_counter()
            states = backend.poll(handles)
            polls.append((cpu_now() - c0, time.perf_counter() - w0))
            c0, w0 = cpu_now(), time.perf_counter()
            cli.run("squeue", "-h", "-t", "all", "-o", SQUEUE_FORMAT)
            bare.append((cpu_now() - c0, time.perf_counter() - w0))
        # every job was found in squeue's answer (none judged "Slurm no longer knows its job")
        assert len(states) == n and not [s for s in states.values() if "no longer knows" in s.reason]
    finally:
        for k in range(0, len(ids), 200):
            cli.run("scancel", *ids[k : k + 200], check=False)
    poll_cpu = statistics.median(c for c, _ in polls)
    bare_cpu = statistics.median(c for c, _ in bare)
    return {
        "jobs": n,
        "submit_s": submit_s,
        "poll_cpu_s": poll_cpu,
        "poll_wall_s": statistics.median(w for _, w in polls),
        "bare_squeue_cpu_s": bare_cpu,
        "bare_squeue_wall_s": statistics.median(w for _, w in bare),
        "ratio_cpu": poll_cpu / bare_cpu if bare_cpu else None,
        "verdict": "MET" if poll_cpu < TARGET_CPU_S else "MISSED",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    conf = cluster_conf()
    root = Path(tempfile.mkdtemp(prefix="danlu-bench-slurm-"))
    os.chmod(root, 0o711)
    variants = {
        "local sandbox": build(root, "local", None),
        "slurm (same sandbox on the node)": build(root, "slurm", conf),
    }
    samples: dict[str, list[float]] = {k: [] for k in variants}
    try:
        for p, u, m in variants.values():  # warm-up
            first_output(p, u, m)
        for _ in range(args.rounds):
            for name, (p, u, m) in variants.items():
                samples[name].append(first_output(p, u, m))
        recon = reconcile_cost(conf, root, args.jobs)
    finally:
        for p, _u, _m in variants.values():
            p.db.engine.dispose()
        shutil.rmtree(root, ignore_errors=True)
    base = statistics.median(samples["local sandbox"])
    rows = [
        {
            "variant": k,
            "p50_ms": statistics.median(v),
            "max_ms": max(v),
            "n": len(v),
            "ratio_p50": statistics.median(v) / base,
        }
        for k, v in samples.items()
    ]
    if args.json:
        print(json.dumps({"first_output": rows, "reconcile": recon, "load": os.getloadavg()}, indent=2))
        return 0
    print(f"rent → first output line, {args.rounds} rounds interleaved, SQLite, {os.cpu_count()} CPUs")
    print(f"| {'backend':<34} | p50 ms | max ms | × local |")
    print(f"|{'-' * 36}|--------|--------|---------|")
    for r in rows:
        print(f"| {r['variant']:<34} | {r['p50_ms']:6.0f} | {r['max_ms']:6.0f} | {r['ratio_p50']:7.2f} |")
    print()
    took = f"submitting them took {recon['submit_s']:.1f} s"
    print(f"reconciliation: one poll of {recon['jobs']} Slurm jobs (median of 5; {took})")
    print("| what                              | CPU s | wall s |")
    print("|-----------------------------------|-------|--------|")
    print(f"| danlu poll (ping + squeue + judge) | {recon['poll_cpu_s']:5.3f} | {recon['poll_wall_s']:6.3f} |")
    bare = f"{recon['bare_squeue_cpu_s']:5.3f} | {recon['bare_squeue_wall_s']:6.3f}"
    print(f"| bare squeue (reference)           | {bare} |")
    ratio = f"{recon['ratio_cpu']:.2f}" if recon["ratio_cpu"] else "n/a"
    print(f"poll CPU × bare squeue: {ratio}; target < {TARGET_CPU_S:.0f} s CPU per tick → {recon['verdict']}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
