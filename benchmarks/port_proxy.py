"""The port proxy against a direct connection: the same nginx serving the same files, once inside a
sandboxed rental (network ``none``) reached through danlu's ``/p/{id}/8888/`` (bearer token, the
connection made in the rental's namespace, h11 relay), once on this host's loopback reached directly
(the reference). ``wrk --latency`` with 32 connections on each, one after the other in one run, for a
small page (16 KiB, JupyterLab's API answers) and a large file (1 MiB, a notebook or a checkpoint
download): requests/s, MiB/s, p50/p99 and the ratio to direct.

    python benchmarks/port_proxy.py [--duration 10] [--connections 32] [--json]

Target (issue 25): ≥ 50 % of direct throughput; p99 added ≤ 5 ms at 32 connections. Needs nginx and
wrk (apt-get install nginx-light wrk); says so and exits 2 without them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from danlu.compute import instances as svc
from danlu.server.app import create_app

sys.path.insert(0, str(Path(__file__).parent))
from session_latency import build

CONF = """worker_processes 1; pid {root}/nginx.pid; error_log {root}/error.log; daemon off;
events {{ worker_connections 1024; }}
http {{ access_log off; client_body_temp_path {root}/body; proxy_temp_path {root}/proxy;
  fastcgi_temp_path {root}/fcgi; uwsgi_temp_path {root}/uwsgi; scgi_temp_path {root}/scgi;
  server {{ listen 127.0.0.1:{port}; root {root}/www; }} }}
"""
SETUP = (
    "mkdir -p {root}/www && head -c 16384 /dev/zero > {root}/www/small && head -c 1048576 /dev/zero > {root}/www/large"
)


def wrk(url: str, seconds: int, connections: int, token: str | None) -> dict[str, float]:
    args = ["wrk", "--latency", "-t2", f"-c{connections}", f"-d{seconds}s", url]
    if token:
        args[1:1] = ["-H", f"Authorization: Bearer {token}"]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]

    def ms(q: str) -> float:
        m = re.search(rf"\s{q}%\s+([\d.]+)(us|ms|s)", out)
        assert m, out
        return float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]

    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": rps, "p50_ms": ms("50"), "p99_ms": ms("99"), "non2xx": float(errors.group(1)) if errors else 0.0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not (shutil.which("nginx") and shutil.which("wrk")):
        print("needs nginx and wrk: apt-get install nginx-light wrk", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="danlu-bench-proxy-"))
    os.chmod(root, 0o711)
    p, token = build(root)
    with p.db.read() as s:
        from danlu.db.models import Instance, User

        user = s.query(User).filter(User.name == "bench").one()
        s.expunge(user)
        first = s.query(Instance).one()
    p.backend.kill(str(first.run_handle))
    inside = "/tmp/app"
    script = SETUP.format(root=inside) + f" && printf '%s' '{CONF.format(root=inside, port=8888)}' > {inside}/n.conf"
    view = svc.rent(p, user, "T4", 1, ["sh", "-c", script + f" && exec /usr/sbin/nginx -c {inside}/n.conf"])
    host = root / "direct"
    subprocess.run(["sh", "-c", SETUP.format(root=host)], check=True)
    (host / "n.conf").write_text(CONF.format(root=host, port=18888))
    direct = subprocess.Popen(["nginx", "-c", str(host / "n.conf")], stderr=subprocess.DEVNULL)
    server = uvicorn.Server(uvicorn.Config(create_app(p), host="127.0.0.1", port=0, log_level="error",
                                           loop="uvloop", http="httptools", access_log=False))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    proxied = f"http://127.0.0.1:{port}/p/{view.id}/8888"
    headers = {"Authorization": f"Bearer {token}"}
    deadline = time.monotonic() + 30
    while httpx.get(f"{proxied}/small", headers=headers).status_code != 200:
        assert time.monotonic() < deadline, "nginx inside the rental did not answer"
        time.sleep(0.2)
    rows: list[dict[str, Any]] = []
    try:
        for name, size in (("small", 16384), ("large", 1 << 20)):
            ref = wrk(f"http://127.0.0.1:18888/{name}", args.duration, args.connections, None)
            ours = wrk(f"{proxied}/{name}", args.duration, args.connections, token)
            for who, r in (("direct (reference)", ref), ("through danlu", ours)):
                row = {"file": f"{name} ({size >> 10} KiB)", "path": who, **r, "mib_s": r["rps"] * size / (1 << 20)}
                row |= {"ratio": r["rps"] / ref["rps"], "added_p99_ms": r["p99_ms"] - ref["p99_ms"]}
                rows.append(row)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        direct.terminate()
        with p.db.read() as s:
            handles = [i.run_handle for i in s.query(Instance).all() if i.run_handle]
        for h in handles:
            p.backend.kill(h)
        p.db.engine.dispose()
        shutil.rmtree(root, ignore_errors=True)
    ok = all(r["ratio"] >= 0.5 and r["added_p99_ms"] <= 5 for r in rows)
    if args.json:
        print(json.dumps({"rows": rows, "verdict": "MET" if ok else "MISSED", "load": os.getloadavg()}))
        return 0
    cpus = os.cpu_count()
    print(f"wrk -c{args.connections} -t2 -d{args.duration}s, nginx inside a rental vs on the host, {cpus} CPUs")
    print(f"| {'file':<16} | {'path':<18} | req/s | MiB/s | p50 ms | p99 ms | × direct | added p99 ms | non-2xx |")
    print("|" + "|".join("-" * w for w in (18, 20, 7, 7, 8, 8, 10, 14, 9)) + "|")
    for r in rows:
        print(
            f"| {r['file']:<16} | {r['path']:<18} | {r['rps']:5.0f} | {r['mib_s']:5.0f} | {r['p50_ms']:6.2f} "
            f"| {r['p99_ms']:6.2f} | {r['ratio']:8.2f} | {r['added_p99_ms']:12.2f} | {r['non2xx']:7.0f} |"
        )
    print(f"target: ≥ 0.50 × direct req/s and ≤ 5 ms added p99 → {'MET' if ok else 'MISSED'}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
