"""API throughput under wrk: our read endpoints beside a bare FastAPI endpoint, in one run.

The benchmark starts two servers on this machine:

1. a bare FastAPI + uvicorn app (the same uvicorn options as ``danlu server``:
   ``danlu.server.main.UVICORN_OPTIONS``) whose one endpoint returns, as pre-encoded bytes, the
   JSON our ``GET /api/v1/offers`` returned — the floor of what the framework costs;
2. the real ``danlu server`` (SQLite, simulated GPUs, its control loop running) with one user
   holding 50 live sandboxed instances (``sleep 600``).

Then it runs ``wrk --latency -c32 -t2 -d10s`` (after a short warm-up) against bare ``/offers``,
our ``GET /api/v1/offers`` and our ``GET /api/v1/instances`` (the user with the 50 instances,
bearer token sent with ``-H``), one after the other, and prints req/s, p50, p99 and the ratio to
the bare endpoint's req/s, with PASS/FAIL against the target: ours >= 1/3 of bare's throughput
and p99 <= 25 ms, no non-2xx answer and no socket error. Exit code 1 on FAIL.

Needs ``wrk`` on PATH (Debian: ``apt-get install wrk``); installs nothing. Everything it started
(servers, instances, data directory) is removed at the end.

    python benchmarks/api_throughput.py [--duration 10] [--connections 32] [--threads 2]
                                        [--instances 50] [--quick] [--json]
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
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from api_latency import Server, free_port, kill_instance_processes

RATIO_TARGET = 1 / 3
P99_TARGET_MS = 25.0
PRICES = {"A100-80GB": "36.00", "T4": "3.60", "L4": "6.00", "H100-80GB": "60.00", "V100": "12.00"}


@dataclass
class Row:
    target: str
    url: str
    requests: int
    rps: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    non_2xx: int
    socket_errors: int
    ratio_to_bare: float | None = None
    verdict: str = ""


# ---------------------------------------------------------------------------- the bare app


def serve_bare(port: int, body_file: Path) -> None:
    """The bare endpoint: FastAPI, one async route, the same bytes every time."""
    import uvicorn
    from fastapi import FastAPI, Response

    from danlu.server.main import UVICORN_OPTIONS

    body = body_file.read_bytes()
    app = FastAPI()

    @app.get("/offers")
    async def offers() -> Response:
        return Response(content=body, media_type="application/json")

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(content=b'{"status":"ok"}', media_type="application/json")

    uvicorn.run(app, host="127.0.0.1", port=port, **UVICORN_OPTIONS)  # type: ignore[arg-type]


class BareServer:
    def __init__(self, body_file: Path, log_file: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log_file.open("wb")
        cmd = [sys.executable, __file__, "--serve-bare", str(self.port), "--body", str(body_file)]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"bare server exited with {self.proc.returncode}")
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("bare server not ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.log.close()


# ---------------------------------------------------------------------------- wrk

_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(text: str) -> float:
    m = re.fullmatch(r"([0-9.]+)(us|ms|s|m)", text.strip())
    if m is None:
        raise ValueError(f"cannot read wrk's latency {text!r}")
    return float(m.group(1)) * _UNIT_MS[m.group(2)]


def parse_wrk(out: str) -> dict[str, float]:
    """Requests/sec, total requests, p50/p99/max latency (ms), non-2xx and socket errors."""
    got: dict[str, float] = {"non_2xx": 0, "socket_errors": 0}
    for line in out.splitlines():
        parts = line.split()
        if line.startswith("Requests/sec:"):
            got["rps"] = float(parts[1])
        elif re.match(r"\s*\d+ requests in", line):
            got["requests"] = float(parts[0])
        elif re.match(r"\s*(50|99)%\s", line):
            got[f"p{parts[0].rstrip('%')}"] = _ms(parts[1])
        elif re.match(r"\s*Latency\s+[0-9]", line):
            got["max"] = _ms(parts[3])
        elif "Non-2xx or 3xx responses:" in line:
            got["non_2xx"] = float(parts[-1])
        elif line.strip().startswith("Socket errors:"):
            got["socket_errors"] = float(sum(int(n) for n in re.findall(r"\d+", line)))
    missing = {"rps", "requests", "p50", "p99", "max"} - got.keys()
    if missing:
        raise RuntimeError(f"could not read {sorted(missing)} from wrk's output:\n{out}")
    return got


def run_wrk(url: str, headers: dict[str, str], args: argparse.Namespace, duration: float) -> str:
    cmd = ["wrk", "--latency", f"-c{args.connections}", f"-t{args.threads}", f"-d{duration:g}s", "--timeout", "10s"]
    for k, v in headers.items():
        cmd += ["-H", f"{k}: {v}"]
    done = subprocess.run([*cmd, url], capture_output=True, text=True, timeout=duration + 60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr or done.stdout}")
    return done.stdout


def measure(name: str, url: str, headers: dict[str, str], args: argparse.Namespace) -> Row:
    run_wrk(url, headers, args, args.warmup)  # warm pools, caches, the JIT-less interpreter's dicts
    got = parse_wrk(run_wrk(url, headers, args, args.duration))
    row = Row(
        target=name,
        url=url,
        requests=int(got["requests"]),
        rps=round(got["rps"], 1),
        p50_ms=round(got["p50"], 2),
        p99_ms=round(got["p99"], 2),
        max_ms=round(got["max"], 2),
        non_2xx=int(got["non_2xx"]),
        socket_errors=int(got["socket_errors"]),
    )
    print(f"{name}: {row.rps:.0f} req/s, p50 {row.p50_ms} ms, p99 {row.p99_ms} ms", file=sys.stderr)
    return row


# ---------------------------------------------------------------------------- the run


def set_up_ours(server: Server, admin_token: str, instances: int) -> str:
    """Prices, one user topped up, ``instances`` running rentals; returns the user's token."""
    api = server.url + "/api/v1"
    admin = {"Authorization": f"Bearer {admin_token}"}
    with httpx.Client(base_url=api, timeout=60) as http:
        for model, price in PRICES.items():
            http.put(f"/admin/prices/{model}", json={"price_per_hour": price}, headers=admin).raise_for_status()
        r = http.post("/admin/users", json={"name": "wrk"}, headers=admin)
        r.raise_for_status()
        token = str(r.json()["token"])
        http.post("/admin/users/wrk/topup", json={"amount": "1000000.00"}, headers=admin).raise_for_status()
        user = {"Authorization": f"Bearer {token}"}
        for i in range(instances):
            body = {"gpu_model": "A100-80GB", "command": ["sleep", "600"], "name": f"wrk{i}"}
            http.post("/instances", json=body, headers=user).raise_for_status()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            listing = http.get("/instances", headers=user).json()
            if sum(1 for i in listing if i["status"] == "running") == instances:
                return token
            time.sleep(0.5)
        states = sorted(
            {f"{i['status']} {i['status_reason']}".strip() for i in http.get("/instances", headers=user).json()}
        )
        raise RuntimeError(f"the {instances} instances did not all reach running (states: {states})")


def clean_up_ours(server: Server, token: str) -> None:
    user = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server.url + "/api/v1", timeout=60) as http:
        for inst in http.get("/instances", headers=user).json():
            http.delete(f"/instances/{inst['id']}", headers=user)


def judge(rows: list[Row]) -> bool:
    bare = rows[0]
    ok = True
    bare.verdict = "baseline" if bare.non_2xx == 0 and bare.socket_errors == 0 else "FAIL (errors)"
    for r in rows[1:]:
        r.ratio_to_bare = round(r.rps / bare.rps, 3) if bare.rps else None
        why = []
        if r.ratio_to_bare is None or r.ratio_to_bare < RATIO_TARGET:
            why.append(f"ratio < {RATIO_TARGET:.2f}")
        if r.p99_ms > P99_TARGET_MS:
            why.append(f"p99 > {P99_TARGET_MS:g} ms")
        if r.non_2xx or r.socket_errors:
            why.append("errors")
        r.verdict = "PASS" if not why else "FAIL (" + ", ".join(why) + ")"
        ok = ok and not why
    return ok and bare.verdict == "baseline"


def table(rows: list[Row]) -> str:
    head = ("endpoint", "requests", "req/s", "p50 ms", "p99 ms", "max ms", "non-2xx", "sock err", "ratio", "verdict")
    cells = [head]
    for r in rows:
        ratio = "1" if r.ratio_to_bare is None else f"{r.ratio_to_bare:.3f}"
        cells.append(
            (
                r.target,
                str(r.requests),
                f"{r.rps:.0f}",
                f"{r.p50_ms:.2f}",
                f"{r.p99_ms:.2f}",
                f"{r.max_ms:.1f}",
                str(r.non_2xx),
                str(r.socket_errors),
                ratio,
                r.verdict,
            )
        )
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True)).rstrip() for cell in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of wrk per endpoint (-d)")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds of unmeasured wrk before each")
    ap.add_argument("--connections", type=int, default=32, help="wrk -c")
    ap.add_argument("--threads", type=int, default=2, help="wrk -t")
    ap.add_argument("--instances", type=int, default=50, help="live instances of the listing user")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 s per endpoint, 1 s warm-up, 10 instances")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--serve-bare", type=int, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--body", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_bare is not None:
        serve_bare(args.serve_bare, args.body)
        return 0
    if args.quick:
        args.duration, args.warmup, args.instances = 2.0, 1.0, 10
    if shutil.which("wrk") is None:
        print(
            "error: this benchmark needs wrk on PATH; install it with `apt-get install wrk` (Debian)", file=sys.stderr
        )
        return 2

    load_before = os.getloadavg()
    data_dir = Path(tempfile.mkdtemp(prefix="danlu-wrk-"))
    server = Server(f"sqlite:///{data_dir / 'danlu.db'}", data_dir)
    bare: BareServer | None = None
    token = ""
    rows: list[Row] = []
    try:
        admin_token = server.wait_ready()
        token = set_up_ours(server, admin_token, args.instances)
        auth = {"Authorization": f"Bearer {token}"}
        offers_url = server.url + "/api/v1/offers"
        resp = httpx.get(offers_url, headers=auth, timeout=30)
        resp.raise_for_status()
        body_file = data_dir / "offers.json"
        body_file.write_bytes(resp.content)
        bare = BareServer(body_file, data_dir / "bare.log")
        bare.wait_ready()
        bare_body = httpx.get(bare.url + "/offers", timeout=30).content
        if bare_body != resp.content:
            raise RuntimeError("the bare endpoint does not return our /offers bytes")
        rows.append(measure("bare GET /offers", bare.url + "/offers", {}, args))
        rows.append(measure("ours GET /api/v1/offers", offers_url, auth, args))
        rows.append(
            measure(f"ours GET /api/v1/instances ({args.instances})", server.url + "/api/v1/instances", auth, args)
        )
    finally:
        if bare is not None:
            bare.stop()
        if token:
            try:
                clean_up_ours(server, token)
            except httpx.HTTPError as exc:
                print(f"clean-up: {exc}", file=sys.stderr)
        server.stop()
        leftovers = kill_instance_processes(data_dir)
        if leftovers:
            print(f"killed {leftovers} leftover instance process group(s)", file=sys.stderr)
        shutil.rmtree(data_dir, ignore_errors=True)
    ok = judge(rows)
    load_after = os.getloadavg()
    if args.json:
        out = {
            "wrk": {"connections": args.connections, "threads": args.threads, "duration_s": args.duration},
            "instances": args.instances,
            "targets": {"ratio_to_bare_min": round(RATIO_TARGET, 4), "p99_ms_max": P99_TARGET_MS},
            "rows": [asdict(r) for r in rows],
            "pass": ok,
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "load_after": load_after,
        }
        print(json.dumps(out, indent=2))
    else:
        print(
            f"wrk -c{args.connections} -t{args.threads} -d{args.duration:g}s --latency; "
            f"{args.instances} live instances; {os.cpu_count()} CPUs; control loop running"
        )
        print(table(rows))
        print(
            f"target: ours >= {RATIO_TARGET:.2f} x bare req/s and p99 <= {P99_TARGET_MS:g} ms: "
            + ("PASS" if ok else "FAIL")
        )
        print(
            f"load average before: {' '.join(f'{x:.2f}' for x in load_before)}; "
            f"after: {' '.join(f'{x:.2f}' for x in load_after)}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
