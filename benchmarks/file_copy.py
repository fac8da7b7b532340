"""``danlu cp`` against the same bytes copied without the platform, in one run on this machine.

One platform built as ``danlu server`` builds it (SQLite, simulated T4s, the sandbox with network ``none``;
session_latency.build), served by uvicorn on a real port, one rental running ``sleep``. Ours: the real CLI
(``python -m danlu.cli.main cp``, a fresh process as a renter runs it) uploading a folder of one large random
file into the rental and downloading it back, each with its SHA-256 check. The reference: the same folder
through ``tar -c | tar -x`` on this host straight into a folder of the rental's workspace and back out (no HTTP,
no WebSocket, no sandbox, no check) and a plain ``sha256sum`` of it, which our check also costs. Then one file
resumably (``danlu cp --resumable``, over the HTTP files API: issue 26, item 1) against ``cp`` and ``sha256sum``
of that file. Rounds interleaved. Beside each, how much the server's resident memory grew at most meanwhile.

    python benchmarks/file_copy.py [--mib 256] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).parent))
from session_latency import build, served

from danlu.db.models import Instance

DANLU = [sys.executable, "-m", "danlu.cli.main"]


def timed(argv: list[str], env: dict[str, str] | None = None, shell: bool = False) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(argv if not shell else ["sh", "-c", *argv], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{argv} failed: {r.stderr[-1000:]}")
    return time.perf_counter() - t0


class RssPeak:
    """The most this process (the server's: uvicorn runs in a thread here) grew above its resident size at the
    start, sampled every 20 ms while the block runs (issue 26: ≤ 64 MiB for a 2 GiB copy)."""

    def __enter__(self) -> RssPeak:
        self.me = psutil.Process()
        self.start = self.peak = self.me.memory_info().rss
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self) -> None:
        while not self.done.wait(0.02):
            self.peak = max(self.peak, self.me.memory_info().rss)

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()

    @property
    def growth(self) -> int:
        return self.peak - self.start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="danlu-bench-copy-"))
    os.chmod(root, 0o711)
    p, token = build(root)
    with p.db.read() as s:
        inst = s.query(Instance).one()
        iid, workspace = inst.id, Path(str(inst.workspace))
    src = root / "src"
    src.mkdir()
    with open(src / "weights.bin", "wb") as f:
        for _ in range(args.mib):
            f.write(os.urandom(1 << 20))
    out = root / "out"
    (workspace / "ref").mkdir()  # the reference's own folder there (it writes as root)
    samples: dict[str, list[float]] = {}
    with served(p, root) as port:
        env = {"DANLU_URL": f"http://127.0.0.1:{port}", "DANLU_TOKEN": token, "PATH": os.environ["PATH"]}
        env["HOME"] = "/tmp"
        variants = {
            "reference: tar | tar into the workspace folder": lambda: timed(
                [f"tar -C {root} -cf - src | tar -C {workspace}/ref -xf - "
                 f"&& sha256sum {workspace}/ref/src/weights.bin >/dev/null"],
                shell=True,
            ),
            "danlu cp up (CLI, sandbox, SHA-256 both ends)": lambda: timed([*DANLU, "cp", str(src), f"{iid}:."], env),
            "reference: tar | tar out of the workspace folder": lambda: timed(
                [f"rm -rf {out} && mkdir {out} && tar -C {workspace}/ref -cf - src | tar -C {out} -xf - "
                 f"&& sha256sum {out}/src/weights.bin >/dev/null"],
                shell=True,
            ),
            "danlu cp down (CLI, sandbox, SHA-256 both ends)": lambda: timed(
                ["sh", "-c", f'rm -rf {out} && exec "$@"', "x", *DANLU, "cp", f"{iid}:src", str(out)], env
            ),
            "reference: cp + sha256sum of one file into the workspace": lambda: timed(
                [f"cp {src}/weights.bin {workspace}/ref/one.bin && sha256sum {workspace}/ref/one.bin >/dev/null"],
                shell=True,
            ),
            "danlu cp --resumable up (one file over HTTP)": lambda: timed(
                [*DANLU, "cp", "--resumable", f"{src}/weights.bin", f"{iid}:one.bin"], env
            ),
            "reference: cp + sha256sum of one file out of the workspace": lambda: timed(
                [f"cp {workspace}/ref/one.bin {root}/one.bin && sha256sum {root}/one.bin >/dev/null"], shell=True
            ),
            "danlu cp --resumable down (one file over HTTP)": lambda: timed(
                ["sh", "-c", f'rm -f {root}/one.bin && exec "$@"', "x", *DANLU, "cp", "--resumable", f"{iid}:one.bin",
                 f"{root}/one.bin"], env
            ),
        }  # fmt: skip
        samples = {k: [] for k in variants}
        growth: dict[str, list[int]] = {k: [] for k in variants}
        for _ in range(args.rounds):
            for name, fn in variants.items():
                with RssPeak() as peak:
                    samples[name].append(fn())
                growth[name].append(peak.growth)
    rows: list[dict[str, Any]] = []
    names = list(samples)
    for i, name in enumerate(names):
        sec = statistics.median(samples[name])
        ref = statistics.median(samples[names[i - 1 if i % 2 else i]])
        rows.append({"variant": name, "median_s": sec, "mib_per_s": args.mib / sec, "x_reference_speed": ref / sec,
                     "server_rss_growth_mib": max(growth[name]) / (1 << 20)})  # fmt: skip
    if args.json:
        print(json.dumps({"mib": args.mib, "rounds": args.rounds, "rows": rows, "load": os.getloadavg()}))
        return 0
    print(f"{args.mib} MiB of random bytes, median of {args.rounds} interleaved rounds, this machine "
          f"({os.cpu_count()} CPUs)")  # fmt: skip
    print(f"| {'variant':<50} | median s | MiB/s | × reference speed | server RSS growth, max MiB |")
    print(f"|{'-' * 52}|----------|-------|-------------------|----------------------------|")
    for r in rows:
        print(f"| {r['variant']:<50} | {r['median_s']:8.2f} | {r['mib_per_s']:5.0f} | {r['x_reference_speed']:17.2f} "
              f"| {r['server_rss_growth_mib']:26.1f} |")  # fmt: skip
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
