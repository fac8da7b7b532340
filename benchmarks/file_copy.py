"""``danlu cp`` against the same bytes copied without the platform, in one run on this machine.

One platform built as ``danlu server`` builds it (SQLite, simulated T4s, the sandbox with network ``none``;
session_latency.build), served by uvicorn on a real port, one rental running ``sleep``. Ours: the real CLI
(``python -m danlu.cli.main cp``, a fresh process as a renter runs it) uploading a folder of one large random
file into the rental and downloading it back, each with its SHA-256 check. The reference: the same folder
through ``tar -c | tar -x`` on this host straight into a folder of the rental's workspace and back out (no HTTP,
no WebSocket, no sandbox, no check) and a plain ``sha256sum`` of it, which our check also costs. Rounds
interleaved.

    python benchmarks/file_copy.py [--mib 256] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

sys.path.insert(0, str(Path(__file__).parent))
from session_latency import build

from danlu.db.models import Instance
from danlu.server.app import create_app

DANLU = [sys.executable, "-m", "danlu.cli.main"]


def timed(argv: list[str], env: dict[str, str] | None = None, shell: bool = False) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(argv if not shell else ["sh", "-c", *argv], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{argv} failed: {r.stderr[-1000:]}")
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="danlu-bench-copy-"))
    os.chmod(root, 0o711)
    p, token = build(root)
    server = uvicorn.Server(uvicorn.Config(create_app(p), host="127.0.0.1", port=0, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    with p.db.read() as s:
        inst = s.query(Instance).one()
        iid, workspace = inst.id, Path(str(inst.workspace))
    src = root / "src"
    src.mkdir()
    with open(src / "weights.bin", "wb") as f:
        for _ in range(args.mib):
            f.write(os.urandom(1 << 20))
    env = {"DANLU_URL": f"http://127.0.0.1:{port}", "DANLU_TOKEN": token, "PATH": os.environ["PATH"], "HOME": "/tmp"}
    out = root / "out"
    (workspace / "ref").mkdir()  # the reference's own folder there (it writes as root)
    variants = {
        "reference: tar | tar into the workspace folder": lambda: timed(
            [
                f"tar -C {root} -cf - src | tar -C {workspace}/ref -xf - "
                f"&& sha256sum {workspace}/ref/src/weights.bin >/dev/null"
            ],
            shell=True,
        ),
        "danlu cp up (CLI, sandbox, SHA-256 both ends)": lambda: timed([*DANLU, "cp", str(src), f"{iid}:."], env),
        "reference: tar | tar out of the workspace folder": lambda: timed(
            [
                f"rm -rf {out} && mkdir {out} && tar -C {workspace}/ref -cf - src | tar -C {out} -xf - "
                f"&& sha256sum {out}/src/weights.bin >/dev/null"
            ],
            shell=True,
        ),
        "danlu cp down (CLI, sandbox, SHA-256 both ends)": lambda: timed(
            ["sh", "-c", f'rm -rf {out} && exec "$@"', "x", *DANLU, "cp", f"{iid}:src", str(out)], env
        ),
    }
    samples: dict[str, list[float]] = {k: [] for k in variants}
    try:
        for _ in range(args.rounds):
            for name, fn in variants.items():
                samples[name].append(fn())
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        with p.db.read() as s:
            handles = [i.run_handle for i in s.query(Instance).all() if i.run_handle]
        for h in handles:
            p.backend.kill(h)
        p.db.engine.dispose()
        shutil.rmtree(root, ignore_errors=True)
    rows: list[dict[str, Any]] = []
    names = list(samples)
    for i, name in enumerate(names):
        sec = statistics.median(samples[name])
        ref = statistics.median(samples[names[i - 1 if i % 2 else i]])
        rows.append({"variant": name, "median_s": sec, "mib_per_s": args.mib / sec, "x_reference_speed": ref / sec})
    if args.json:
        print(json.dumps({"mib": args.mib, "rounds": args.rounds, "rows": rows, "load": os.getloadavg()}))
        return 0
    print(f"{args.mib} MiB of random bytes, median of {args.rounds} interleaved rounds, this machine "
          f"({os.cpu_count()} CPUs)")  # fmt: skip
    print(f"| {'variant':<50} | median s | MiB/s | × reference speed |")
    print(f"|{'-' * 52}|----------|-------|-------------------|")
    for r in rows:
        print(f"| {r['variant']:<50} | {r['median_s']:8.2f} | {r['mib_per_s']:5.0f} | {r['x_reference_speed']:17.2f} |")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
