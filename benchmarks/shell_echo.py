"""Interactive echo with many shells open: N terminal sessions (``bash --norc -i``) into rentals on
one host through danlu's WebSocket, each typing one key at a time and waiting for its echo, all at
once; against the same through a bare pseudo-terminal on this host (the reference: the same bash,
no danlu, no sandbox). p50/p99/max of keystroke → echo, and the ratio. The typing side runs in a
process of its own for both, apart from the server's.

    python benchmarks/shell_echo.py [--shells 100] [--keys 20] [--json]

Target (issue 25): 100 concurrent shells on one host, echo p99 ≤ 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pty
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop
from websockets.asyncio.client import connect

from danlu.access import protocol
from danlu.server.app import create_app

sys.path.insert(0, str(Path(__file__).parent))
from session_latency import build, served

TARGET_MS = 50.0
SHELL = ["/bin/bash", "--norc", "--noprofile", "-i"]


async def through_danlu(url: str, token: str, keys: int, out: list[float], ready: asyncio.Barrier) -> None:
    async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}, max_size=None) as ws:
        seen = b""
        while b"$ " not in seen:  # the prompt
            message = await asyncio.wait_for(ws.recv(), 60)
            assert isinstance(message, bytes)
            seen += message[1:]
        await ready.wait()
        for k in range(keys):
            key = bytes([ord("a") + k % 26])
            t0 = time.perf_counter()
            await ws.send(protocol.frame(protocol.STDIN, key))
            got = b""
            while key not in got:
                message = await asyncio.wait_for(ws.recv(), 60)
                assert isinstance(message, bytes)
                got += message[1:]
            out.append((time.perf_counter() - t0) * 1000)
        await ws.send(protocol.frame(protocol.STDIN, b"\x15exit\r"))


async def bare(keys: int, out: list[float], ready: asyncio.Barrier) -> None:
    loop = asyncio.get_running_loop()
    master, slave = pty.openpty()
    proc = subprocess.Popen(SHELL, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                            env={"PATH": "/usr/bin:/bin", "PS1": "$ ", "TERM": "xterm"})  # fmt: skip
    os.close(slave)
    os.set_blocking(master, False)
    readable = asyncio.Event()
    loop.add_reader(master, readable.set)

    async def read() -> bytes:
        await asyncio.wait_for(readable.wait(), 60)
        readable.clear()
        try:
            return os.read(master, 65536)
        except BlockingIOError:
            return b""

    seen = b""
    while b"$ " not in seen:
        seen += await read()
    await ready.wait()
    for k in range(keys):
        key = bytes([ord("a") + k % 26])
        t0 = time.perf_counter()
        os.write(master, key)
        got = b""
        while key not in got:
            got += await read()
        out.append((time.perf_counter() - t0) * 1000)
    loop.remove_reader(master)
    proc.kill()
    proc.wait()
    os.close(master)


def run_all(n: int, target: Any, *args: Any) -> list[float]:
    """The N typing sides as tasks of one event loop (uvloop), the same for both paths: a thread per
    shell measured the client's own thread switching (and websockets' sync client adds a reader
    thread per connection), not the shell's echo."""

    async def go() -> list[float]:
        out: list[float] = []
        ready = asyncio.Barrier(n)
        await asyncio.gather(*(target(*args, out, ready) for _ in range(n)))
        return out

    return uvloop.run(go())


def clients(kind: str, n: int, keys: int, url: str = "", token: str = "") -> list[float]:
    """The N typing shells, driven from a process of their own (``--client``): the client beside
    the server would take the GIL from it and be measured as the server's latency."""
    cmd = [sys.executable, __file__, "--client", kind, "--shells", str(n), "--keys", str(keys), "--url", url]
    env = {**os.environ, "DANLU_BENCH_TOKEN": token}  # a token is no command-line argument
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return [float(x) for x in json.loads(out.stdout)]


def summary(xs: list[float]) -> dict[str, float]:
    qs = statistics.quantiles(xs, n=100, method="inclusive")
    return {"p50_ms": statistics.median(xs), "p99_ms": qs[98], "max_ms": max(xs), "n": len(xs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shells", type=int, default=100)
    ap.add_argument("--keys", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--client", choices=("bare", "danlu"), help=argparse.SUPPRESS)  # the typing side only
    ap.add_argument("--url", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client == "bare":
        print(json.dumps(run_all(args.shells, bare, args.keys)))
        return 0
    if args.client == "danlu":
        print(json.dumps(run_all(args.shells, through_danlu, args.url, os.environ["DANLU_BENCH_TOKEN"], args.keys)))
        return 0
    root = Path(tempfile.mkdtemp(prefix="danlu-bench-echo-"))
    os.chmod(root, 0o711)
    p, token = build(root)
    from danlu.db.models import Instance

    with p.db.read() as s:
        iid = s.query(Instance).one().id
    app = create_app(p)
    app.state.sessions.max_per_instance = args.shells  # one rental, every shell in it
    with served(p, root, app=app, loop="uvloop", http="httptools") as port:
        q = "&".join(f"command={c}" for c in SHELL)
        url = f"ws://127.0.0.1:{port}/api/v1/instances/{iid}/exec?tty=true&{q}"
        ref = summary(clients("bare", args.shells, args.keys))
        ours = summary(clients("danlu", args.shells, args.keys, url, token))
    rows = [{"path": "bare pty on the host (reference)", **ref}, {"path": "danlu shell (WebSocket, sandbox)", **ours}]
    for r in rows:
        r["ratio_p99"] = r["p99_ms"] / ref["p99_ms"]
    verdict = "MET" if ours["p99_ms"] <= TARGET_MS else "MISSED"
    if args.json:
        print(json.dumps({"rows": rows, "target_p99_ms": TARGET_MS, "verdict": verdict, "load": os.getloadavg()}))
        return 0
    print(f"{args.shells} shells at once, {args.keys} keystrokes each, this machine ({os.cpu_count()} CPUs)")
    print(f"| {'path':<34} | p50 ms | p99 ms | max ms | × reference p99 |")
    print("|" + "|".join("-" * w for w in (36, 8, 8, 8, 17)) + "|")
    for r in rows:
        print(
            f"| {r['path']:<34} | {r['p50_ms']:6.2f} | {r['p99_ms']:6.2f} | {r['max_ms']:6.2f} "
            f"| {r['ratio_p99']:15.2f} |"
        )
    print(f"target: echo p99 ≤ {TARGET_MS:.0f} ms with {args.shells} shells → {verdict}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
