"""Exec round trip: ``danlu exec ID -- true`` through the real server, against the same command in
a fresh bubblewrap sandbox started directly (the reference), in one run on this machine.

One platform built as ``danlu server`` builds it (SQLite, simulated T4s, the sandbox with network
``none``), served by uvicorn on a real port. One rental runs ``sleep``; each sample of ours is a
WebSocket connect, the exec of ``true`` inside that rental's sandbox (the entering helper: its
namespaces, cgroup, uid), and the status frame back: everything ``danlu exec`` does but start the
CLI's Python. The backend's own enter (no HTTP, no WebSocket) is shown between the two. Rounds are
interleaved so the three see the same load.

    python benchmarks/session_latency.py [--rounds 60] [--json]

Target (issue 25): p50 ≤ 150 ms on a warm server.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn
from websockets.sync.client import connect

from danlu.access import protocol
from danlu.accounts.service import create_user
from danlu.backend import EnterRequest
from danlu.billing import service as billing
from danlu.compute import instances as svc
from danlu.compute.gpus import parse_simulated_spec
from danlu.compute.sandbox.probe import make_local_backend, sandbox_dir_for
from danlu.context import Platform, Settings
from danlu.core.clock import SystemClock
from danlu.db.engine import open_database
from danlu.db.models import Instance
from danlu.server.app import create_app
from danlu.server.bootstrap import bootstrap

TARGET_MS = 150.0
BWRAP = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
         "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev",
         "--", "true"]  # fmt: skip


def build(root: Path) -> tuple[Platform, str]:
    data = root / "data"
    data.mkdir(parents=True)
    backend, status = make_local_backend(data, network="none")
    if backend.sandbox is None:
        raise SystemExit("the sandbox is not usable here (bubblewrap, a root server): nothing to measure")
    sdir = sandbox_dir_for(data, status)
    db = open_database(f"sqlite:///{data / 'danlu.db'}")
    clock = SystemClock()
    bootstrap(db, data, "CNY", parse_simulated_spec("T4:2", "local"), clock.now_ms(), sandbox=status, sandbox_dir=sdir)
    settings = Settings(data_dir=data, sandbox_dir=sdir)
    p = Platform(db=db, clock=clock, backend=backend, settings=settings, sandbox=status)
    billing.set_price(p, "T4", "3.60")
    with p.db.write() as s:
        user, token = create_user(s, "bench", clock.now_ms())
        s.expunge(user)
    billing.admin_topup(p, "bench", "1000.00", "seed")
    view = svc.rent(p, user, "T4", 1, ["sleep", "3000"])
    del view
    return p, token


@contextlib.contextmanager
def served(p: Platform, root: Path, app: Any = None, **config: Any) -> Iterator[int]:
    """``p`` (or ``app``, built from it) served by uvicorn on a free port, which it yields; at the end the
    server stops, every run of ``p`` is killed and ``root`` is removed. The benchmarks that talk to a real
    server share it."""
    server = uvicorn.Server(uvicorn.Config(app or create_app(p), host="127.0.0.1", port=0, log_level="error", **config))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        with p.db.read() as s:
            handles = [i.run_handle for i in s.query(Instance).all() if i.run_handle]
        for h in handles:
            p.backend.kill(h)
        p.db.engine.dispose()
        shutil.rmtree(root, ignore_errors=True)


def ours(url: str, token: str) -> float:
    t0 = time.perf_counter()
    with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        ws.send(bytes((protocol.CLOSE,)))
        while True:
            message = ws.recv()
            assert isinstance(message, bytes)
            if message[0] == protocol.STATUS:
                assert json.loads(message[1:]) == {"exit_code": 0}, message
                break
    return (time.perf_counter() - t0) * 1000


def entered(p: Platform, handle: str) -> float:
    t0 = time.perf_counter()
    proc = p.backend.enter(handle, EnterRequest(["true"], {}, (subprocess.DEVNULL,) * 3))  # type: ignore[arg-type]
    assert proc.wait() == 0
    return (time.perf_counter() - t0) * 1000


def direct() -> float:
    t0 = time.perf_counter()
    subprocess.run(BWRAP, check=True)
    return (time.perf_counter() - t0) * 1000


def summary(xs: list[float]) -> dict[str, float]:
    qs = statistics.quantiles(xs, n=100, method="inclusive")
    return {"p50_ms": statistics.median(xs), "p99_ms": qs[98], "max_ms": max(xs), "n": len(xs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="danlu-bench-session-"))
    os.chmod(root, 0o711)
    p, token = build(root)
    with p.db.read() as s:
        inst = s.query(Instance).one()
        iid, handle = inst.id, str(inst.run_handle)
    samples: dict[str, list[float]] = {}
    with served(p, root) as port:
        url = f"ws://127.0.0.1:{port}/api/v1/instances/{iid}/exec?command=true"
        variants = {
            "bwrap true, run directly (reference)": direct,
            "backend enter (no HTTP)": lambda: entered(p, handle),
            "danlu exec over WebSocket": lambda: ours(url, token),
        }
        samples = {k: [] for k in variants}
        for _ in range(3):
            for fn in variants.values():
                fn()
        for _ in range(args.rounds):
            for name, fn in variants.items():
                samples[name].append(fn())
    ref = statistics.median(samples["bwrap true, run directly (reference)"])
    rows: list[dict[str, Any]] = []
    for name, xs in samples.items():
        s = summary(xs)
        rows.append({"variant": name, **s, "ratio_p50": s["p50_ms"] / ref})
    ours_p50 = rows[-1]["p50_ms"]
    verdict = "MET" if ours_p50 <= TARGET_MS else "MISSED"
    if args.json:
        print(json.dumps({"rows": rows, "target_p50_ms": TARGET_MS, "verdict": verdict, "load": os.getloadavg()}))
        return 0
    print(f"exec of `true`, {args.rounds} rounds interleaved, SQLite, this machine ({os.cpu_count()} CPUs)")
    print(f"| {'variant':<38} | p50 ms | p99 ms | max ms | × reference p50 |")
    print(f"|{'-' * 40}|--------|--------|--------|-----------------|")
    for r in rows:
        print(
            f"| {r['variant']:<38} | {r['p50_ms']:6.1f} | {r['p99_ms']:6.1f} | {r['max_ms']:6.1f} "
            f"| {r['ratio_p50']:15.2f} |"
        )
    print(f"target: danlu exec p50 ≤ {TARGET_MS:.0f} ms → {verdict}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
