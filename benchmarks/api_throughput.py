"""API throughput under wrk: our read endpoints beside a bare FastAPI app serving the same bytes.

Issue 29, target 1. For each database (SQLite, and PostgreSQL on a fresh schema) the benchmark
starts two servers on this machine:

1. the real ``danlu server`` (simulated GPUs, its control loop running) with one user holding 100
   live sandboxed instances (``sleep 600``);
2. a bare FastAPI + uvicorn app (the same uvicorn options as ``danlu server``:
   ``danlu.server.main.UVICORN_OPTIONS``) whose ``/offers`` and ``/instances`` return, as
   pre-encoded bytes, what ours answered for that user just before — the floor of what the
   framework costs for the same answer.

Then ``wrk --latency -c32 -t2 -d10s`` (after a short warm-up) runs against bare and ours, one
after the other, for ``GET /api/v1/offers`` and ``GET /api/v1/instances`` (bearer token sent with
``-H``), and once more with one connection (``-c1 -t1``). It prints req/s, p50, p99 and the ratio
to the bare endpoint of the same row, with PASS/FAIL against the targets: at 32 connections ours
>= 0.5 x bare's req/s and p99 <= 25 ms; at one connection ours p50 <= 2 x bare's; no non-2xx
answer and no socket error anywhere. Exit code 1 on FAIL.

Needs ``wrk`` on PATH (Debian: ``apt-get install wrk``); installs nothing. Everything it started
(servers, instances, data directory, the PostgreSQL schema) is removed at the end.

    python benchmarks/api_throughput.py [--duration 10] [--connections 32] [--threads 2]
                                        [--instances 100] [--db sqlite,postgresql] [--quick] [--json]
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

from danlu.accounts.credentials import CONSOLE_COOKIE

sys.path.insert(0, str(Path(__file__).resolve().parent))
from api_latency import Server, drop_pg_schema, free_port, pg_schema, stop_and_remove

RATIO_TARGET = 0.5  # API: ours / bare req/s at 32 connections
P99_TARGET_MS = 25.0
P50_ONE_TARGET = 2.0  # API: ours / bare p50 at one connection
PAGE_RATIO_TARGET = 0.3  # the console's page: ours / bare req/s at 32 connections
PAGE_P99_TARGET_MS = 50.0
PASSWORD = "wrk-benchmark-password-1"
PRICES = {"A100-80GB": "36.00", "T4": "3.60", "L4": "6.00", "H100-80GB": "60.00", "V100": "12.00"}


@dataclass
class Row:
    db: str
    connections: int
    target: str
    url: str
    requests: int
    rps: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    non_2xx: int
    socket_errors: int
    ratio_to_bare: float | None = None  # req/s at 32 connections, p50 at one (ours / bare)
    verdict: str = ""


# ---------------------------------------------------------------------------- the bare app


def serve_bare(port: int, body_dir: Path) -> None:
    """The bare endpoints: FastAPI, one async route each, the same bytes every time."""
    import uvicorn
    from fastapi import FastAPI, Response

    from danlu.server.main import UVICORN_OPTIONS

    offers_body = (body_dir / "offers.json").read_bytes()
    instances_body = (body_dir / "instances.json").read_bytes()
    page_body = (body_dir / "page.html").read_bytes()
    app = FastAPI()

    @app.get("/page")
    async def page() -> Response:
        return Response(content=page_body, media_type="text/html; charset=utf-8")

    @app.get("/offers")
    async def offers() -> Response:
        return Response(content=offers_body, media_type="application/json")

    @app.get("/instances")
    async def instances() -> Response:
        return Response(content=instances_body, media_type="application/json")

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(content=b'{"status":"ok"}', media_type="application/json")

    uvicorn.run(app, host="127.0.0.1", port=port, **UVICORN_OPTIONS)  # type: ignore[arg-type]


class BareServer:
    def __init__(self, body_dir: Path, log_file: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log_file.open("wb")
        cmd = [sys.executable, __file__, "--serve-bare", str(self.port), "--body", str(body_dir)]
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


def run_wrk(url: str, headers: dict[str, str], connections: int, threads: int, duration: float) -> str:
    cmd = ["wrk", "--latency", f"-c{connections}", f"-t{threads}", f"-d{duration:g}s", "--timeout", "10s"]
    for k, v in headers.items():
        cmd += ["-H", f"{k}: {v}"]
    done = subprocess.run([*cmd, url], capture_output=True, text=True, timeout=duration + 60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr or done.stdout}")
    return done.stdout


def measure(db: str, name: str, url: str, headers: dict[str, str], args: argparse.Namespace, one: bool) -> Row:
    connections, threads = (1, 1) if one else (args.connections, args.threads)
    run_wrk(url, headers, connections, threads, args.warmup)  # warm pools, caches, the interpreter's dicts
    got = parse_wrk(run_wrk(url, headers, connections, threads, args.duration))
    row = Row(
        db=db,
        connections=connections,
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
    print(
        f"{db} -c{connections} {name}: {row.rps:.0f} req/s, p50 {row.p50_ms} ms, p99 {row.p99_ms} ms", file=sys.stderr
    )
    return row


# ---------------------------------------------------------------------------- the run


def set_up_ours(server: Server, admin_token: str) -> str:
    """Prices, one user topped up (with a console password); returns the user's token."""
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
        http.put("/me/password", json={"new": PASSWORD}, headers=user).raise_for_status()
        return token


def rent_ours(server: Server, token: str, instances: int) -> None:
    """``instances`` running rentals of the user (clean_up_ours removes them, also after a failure)."""
    user = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server.url + "/api/v1", timeout=60) as http:
        for i in range(instances):
            model = "A100-80GB" if i < 64 else "T4"  # api_latency.SPEC: 64 A100s on one host, T4s on 16
            body = {"gpu_model": model, "command": ["sleep", "600"], "name": f"wrk{i}"}
            http.post("/instances", json=body, headers=user).raise_for_status()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            listing = http.get("/instances", headers=user).json()
            if sum(1 for i in listing if i["status"] == "running") == instances:
                return
            time.sleep(0.5)
        states = sorted(
            {f"{i['status']} {i['status_reason']}".strip() for i in http.get("/instances", headers=user).json()}
        )
        raise RuntimeError(f"the {instances} instances did not all reach running (states: {states})")


def sign_in(server: Server) -> str:
    """The console's session cookie of the user set_up_ours made."""
    r = httpx.post(server.url + "/login", data={"name": "wrk", "password": PASSWORD}, timeout=60)
    cookie = r.cookies.get(CONSOLE_COOKIE)
    if r.status_code != 303 or not cookie:
        raise RuntimeError(f"console sign-in failed: {r.status_code} {r.text[:300]}")
    return f"{CONSOLE_COOKIE}={cookie}"


def clean_up_ours(server: Server, token: str) -> None:
    user = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server.url + "/api/v1", timeout=60) as http:
        for inst in http.get("/instances", headers=user).json():
            http.delete(f"/instances/{inst['id']}", headers=user)


def judge(pairs: list[tuple[Row, Row]]) -> bool:
    """Each (bare, ours) pair of one endpoint, database and connection count."""
    ok = True
    for bare, ours in pairs:
        bare.verdict = "reference" if bare.non_2xx == 0 and bare.socket_errors == 0 else "FAIL (errors)"
        why = []
        page = "console" in ours.target
        ratio, p99 = (PAGE_RATIO_TARGET, PAGE_P99_TARGET_MS) if page else (RATIO_TARGET, P99_TARGET_MS)
        if ours.connections == 1:
            ours.ratio_to_bare = round(ours.p50_ms / bare.p50_ms, 3) if bare.p50_ms else None
            if not page and (ours.ratio_to_bare is None or ours.ratio_to_bare > P50_ONE_TARGET):
                why.append(f"p50 > {P50_ONE_TARGET:g} x bare")
        else:
            ours.ratio_to_bare = round(ours.rps / bare.rps, 3) if bare.rps else None
            if ours.ratio_to_bare is None or ours.ratio_to_bare < ratio:
                why.append(f"req/s < {ratio:g} x bare")
            if ours.p99_ms > p99:
                why.append(f"p99 > {p99:g} ms")
        if ours.non_2xx or ours.socket_errors:
            why.append("errors")
        ours.verdict = "PASS" if not why else "FAIL (" + ", ".join(why) + ")"
        ok = ok and not why and bare.verdict == "reference"
    return ok


def table(rows: list[Row]) -> str:
    head = ("db", "conns", "endpoint", "requests", "req/s", "p50 ms", "p99 ms", "max ms", "errors", "ratio", "verdict")
    cells = [head]
    for r in rows:
        ratio = "" if r.ratio_to_bare is None else f"{r.ratio_to_bare:.3f}"
        cells.append(
            (
                r.db,
                str(r.connections),
                r.target,
                str(r.requests),
                f"{r.rps:.0f}",
                f"{r.p50_ms:.2f}",
                f"{r.p99_ms:.2f}",
                f"{r.max_ms:.1f}",
                str(r.non_2xx + r.socket_errors),
                ratio,
                r.verdict,
            )
        )
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True)).rstrip() for cell in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def run_db(db: str, url: str, args: argparse.Namespace) -> list[tuple[Row, Row]]:
    """Our server on ``url`` and a bare app with the same bytes: the measured pairs."""
    data_dir = Path(tempfile.mkdtemp(prefix="danlu-wrk-"))
    server = Server(url, data_dir)
    bare: BareServer | None = None
    token = ""
    pairs: list[tuple[Row, Row]] = []
    try:
        admin_token = server.wait_ready()
        token = set_up_ours(server, admin_token)
        rent_ours(server, token, args.instances)
        auth = {"Authorization": f"Bearer {token}"}
        cookie = {"Cookie": sign_in(server)}
        # name: (our URL, our headers, the bare app's path, the file its bytes are kept in)
        targets = {
            "GET /api/v1/offers": (server.url + "/api/v1/offers", auth, "/offers", "offers.json"),
            f"GET /api/v1/instances ({args.instances})": (
                server.url + "/api/v1/instances",
                auth,
                "/instances",
                "instances.json",
            ),
            f"console /instances page ({args.instances})": (server.url + "/instances", cookie, "/page", "page.html"),
        }
        for url, headers, _, kept in targets.values():
            resp = httpx.get(url, headers=headers, timeout=30)
            resp.raise_for_status()
            (data_dir / kept).write_bytes(resp.content)
        bare = BareServer(data_dir, data_dir / "bare.log")
        bare.wait_ready()
        for _, _, path, kept in targets.values():
            if httpx.get(bare.url + path, timeout=30).content != (data_dir / kept).read_bytes():
                raise RuntimeError(f"the bare endpoint {path} does not return our bytes")
        for one in (False, True):
            for label, (url, headers, path, _) in targets.items():
                bare_row = measure(db, "bare " + label, bare.url + path, {}, args, one)
                ours_row = measure(db, "ours " + label, url, headers, args, one)
                pairs.append((bare_row, ours_row))
    finally:
        if bare is not None:
            bare.stop()
        if token:
            try:
                clean_up_ours(server, token)
            except httpx.HTTPError as exc:
                print(f"clean-up: {exc}", file=sys.stderr)
        stop_and_remove(server, data_dir, db)
    return pairs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of wrk per endpoint (-d)")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds of unmeasured wrk before each")
    ap.add_argument("--connections", type=int, default=32, help="wrk -c")
    ap.add_argument("--threads", type=int, default=2, help="wrk -t")
    ap.add_argument("--instances", type=int, default=100, help="live instances of the listing user")
    ap.add_argument("--db", default="sqlite,postgresql", help="comma-separated: sqlite, postgresql")
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
    pairs: list[tuple[Row, Row]] = []
    skipped: dict[str, str] = {}
    for db in args.db.split(","):
        if db == "sqlite":
            with tempfile.TemporaryDirectory(prefix="danlu-wrk-db-") as d:
                pairs += run_db(db, f"sqlite:///{d}/danlu.db", args)
        elif db == "postgresql":
            made = pg_schema()
            if isinstance(made, str):
                skipped[db] = made
                print(f"postgresql skipped: {made}", file=sys.stderr)
                continue
            url, schema = made
            try:
                pairs += run_db(db, url, args)
            finally:
                drop_pg_schema(schema)
        else:
            raise SystemExit(f"unknown --db {db!r}: sqlite or postgresql")
    ok = judge(pairs) and bool(pairs)
    rows = [r for pair in pairs for r in pair]
    load_after = os.getloadavg()
    targets = (
        f"API: at {args.connections} connections ours >= {RATIO_TARGET:g} x bare req/s and p99 <= {P99_TARGET_MS:g} "
        f"ms, at one connection ours p50 <= {P50_ONE_TARGET:g} x bare's; console page: ours >= {PAGE_RATIO_TARGET:g} "
        f"x bare req/s and p99 <= {PAGE_P99_TARGET_MS:g} ms at {args.connections} connections"
    )
    if args.json:
        out = {
            "wrk": {"connections": args.connections, "threads": args.threads, "duration_s": args.duration},
            "instances": args.instances,
            "targets": {
                "ratio_to_bare_min": RATIO_TARGET,
                "p99_ms_max": P99_TARGET_MS,
                "one_connection_p50_ratio_max": P50_ONE_TARGET,
                "page_ratio_to_bare_min": PAGE_RATIO_TARGET,
                "page_p99_ms_max": PAGE_P99_TARGET_MS,
            },
            "rows": [asdict(r) for r in rows],
            "skipped": skipped,
            "pass": ok,
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "load_after": load_after,
        }
        print(json.dumps(out, indent=2))
    else:
        print(
            f"wrk --latency -d{args.duration:g}s; {args.instances} live instances; {os.cpu_count()} CPUs; "
            "control loop running; ratio: req/s at 32 connections, p50 at one (ours / bare)"
        )
        print(table(rows))
        for db, why in skipped.items():
            print(f"{db}: skipped ({why})")
        print(f"target: {targets}: " + ("PASS" if ok else "FAIL"))
        print(
            f"load average before: {' '.join(f'{x:.2f}' for x in load_before)}; "
            f"after: {' '.join(f'{x:.2f}' for x in load_after)}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
