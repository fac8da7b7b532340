"""Issue 29, target 3: a run's accounting cost must follow its own processes, not every process on the host.

One run in a cgroup of its own (the project's ``CgroupV1``/``CgroupV2``, as a sandbox gets one) holding a
process tree of 4 ``sleep``; then the two readings the local backend makes of a running sandbox, each timed
(median of ``--calls``):

* the **CPU and memory reading**: ours reads the processes the run's cgroup lists (``_procs_usage``); the
  reference is how it was read before (``_tree_usage``: one pass over every process on the host, then the
  tree under the run's supervisor);
* the **disk watcher's process list** (deleted-but-open files): ours is the cgroup's list; the reference
  ``descendants`` (psutil's recursive ``children``, every process on the host read).

Each with no unrelated processes and with ``--others`` unrelated ``sleep`` processes on the host. The
ratio that matters is each reading's time with the others over its time without them: ours stays ~1.0.

    .venv/bin/python benchmarks/run_accounting.py [--others 2000] [--calls 30] [--json]

Needs root and a cgroup controller the server may use (as `danlu server` does); says so and exits 2 without.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from danlu.backend import Limits
from danlu.compute.backends.local import _procs_usage, _tree_usage
from danlu.compute.sandbox.cgroups import detect
from danlu.compute.sandbox.disk import descendants


def timed(fn: Callable[[], object], calls: int) -> float:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--others", type=int, default=2000)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cgroups = detect(f"danlu-bench-{os.getpid()}") if os.geteuid() == 0 else None
    if cgroups is None:
        print("needs root and a usable cgroup hierarchy (cgroup v1 memory/pids/cpu or v2 delegated)", file=sys.stderr)
        return 2
    name = "run-1"
    cgroups.create(name, Limits(cpus_milli=1000, memory_bytes=1 << 30, pids=64, disk_bytes=1 << 30))
    run = subprocess.Popen(["sh", "-c", "sleep 600 & sleep 600 & sleep 600 & sleep 600 & wait"])
    cgroups.attach(name, run.pid)
    time.sleep(0.2)  # its children are forked into the group
    for _ in range(50):
        if len(cgroups.procs(name)) >= 5:
            break
        time.sleep(0.05)
    readings = {
        "CPU + memory: cgroup's processes (ours)": lambda: _procs_usage([run.pid, *cgroups.procs(name)]),
        "CPU + memory: every process, then the tree (before)": lambda: _tree_usage({"h": run.pid}),
        "disk watcher's list: cgroup's (ours)": lambda: cgroups.procs(name),
        "disk watcher's list: psutil descendants (before)": lambda: descendants(run.pid),
    }
    rows: dict[str, dict[str, float]] = {k: {} for k in readings}
    others: list[subprocess.Popen[bytes]] = []
    try:
        for label in readings:
            rows[label]["alone_ms"] = timed(readings[label], args.calls)
        others = [subprocess.Popen(["sleep", "600"]) for _ in range(args.others)]
        for label in readings:
            rows[label]["with_others_ms"] = timed(readings[label], args.calls)
    finally:
        for proc in [*others, run]:
            proc.kill()
        for proc in [*others, run]:
            proc.wait()
        subprocess.run(["pkill", "-KILL", "-P", str(run.pid)], check=False)
        time.sleep(0.2)
        cgroups.remove(name)
    for row in rows.values():
        row["x_alone"] = row["with_others_ms"] / row["alone_ms"] if row["alone_ms"] else float("inf")
    ours = [rows[k]["x_alone"] for k in rows if "(ours)" in k]
    ok = all(x <= 2.0 for x in ours)
    if args.json:
        print(json.dumps({"others": args.others, "rows": rows, "pass": ok}, indent=2))
        return 0 if ok else 1
    print(f"one run of 5 processes in its own {cgroups.kind} group; {args.others} unrelated processes added")
    print(f"{'reading':55} {'alone ms':>9} {'+others ms':>11} {'x alone':>8}")
    for label, row in rows.items():
        print(f"{label:55} {row['alone_ms']:9.3f} {row['with_others_ms']:11.3f} {row['x_alone']:8.2f}")
    print(f"target: ours x alone <= 2.0 (independent of unrelated processes): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
