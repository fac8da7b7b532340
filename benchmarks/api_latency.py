"""API latency of the rental loop: the real server, real HTTP, SQLite beside PostgreSQL.

For each database the benchmark starts ``danlu server`` as a subprocess (fresh data directory;
on PostgreSQL a fresh schema, dropped afterwards), creates users through the admin API, tops them
up, sets prices, rents 50 instances for one user, then drives a bounded number of requests per
endpoint at a fixed concurrency (asyncio + httpx, one connection per worker):

* ``GET /api/v1/offers``
* ``GET /api/v1/instances`` (the user with the 50 running instances)
* rent + stop: ``POST /api/v1/instances`` (``sleep 600``) then ``POST /api/v1/instances/{id}/stop``;
  the pair's latency is counted. Each worker rents as its own user.

It prints p50/p99/throughput per (database, endpoint) and PostgreSQL p99 / SQLite p99, against
the target p99 < 50 ms for reads. Everything it started is removed at the end.

    python benchmarks/api_latency.py [--requests 2000] [--concurrency 32] [--db sqlite,postgresql] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

PG_URL = os.environ.get("DANLU_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
READ_TARGET_P99_MS = 50.0
# Plenty of T4s: a stopped instance keeps its GPU until the control loop sees the process gone
# (a tick later when idle, much later when the server is busy), so rent+stop holds far more than 32.
SPEC = "A100-80GB:64," + ",".join(["T4:64"] * 16) + ",L4:8,H100-80GB:8,V100:8"
PRICES = {"A100-80GB": "36.00", "T4": "3.60", "L4": "6.00", "H100-80GB": "60.00", "V100": "12.00"}
LIST_INSTANCES = 50
WARMUP = 50
ENDPOINTS = ("GET /offers", "GET /instances", "rent+stop")


@dataclass
class Row:
    db: str
    endpoint: str
    requests: int
    errors: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    rps: float
    pg_over_sqlite_p99: float | None = None
    error_codes: dict[str, int] = field(default_factory=dict)
    stopping_at_end: int | None = None  # rent+stop: instances still holding GPUs when the load ended
    release_lag_s: float | None = None  # rent+stop: until the control loop had freed all of them
    target: str = ""
    verdict: str = ""


@dataclass
class Skipped:
    db: str
    reason: str


# ---------------------------------------------------------------------------- the server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def danlu_command() -> list[str]:
    script = Path(sys.executable).parent / "danlu"
    if script.exists():
        return [str(script)]
    found = shutil.which("danlu")
    if found is None:
        raise SystemExit("cannot find the `danlu` command; install the package (make run) first")
    return [found]


class Server:
    """``danlu server`` in a subprocess with its own data directory."""

    def __init__(self, db_url: str, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (data_dir / "server.log").open("wb")
        cmd = [*danlu_command(), "server", "--db", db_url, "--port", str(self.port)]
        cmd += ["--data-dir", str(data_dir), "--simulate-gpus", SPEC]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return (self.data_dir / "admin-token").read_text().strip()
            except (httpx.HTTPError, FileNotFoundError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"server not ready after {timeout:g} s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        self.log.flush()
        return (self.data_dir / "server.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        self.log.close()


def kill_instance_processes(data_dir: Path) -> int:
    """Safety net: SIGKILL any instance process group still running from this data directory."""
    marker = f"DANLU_RUN_DIR={data_dir}".encode()
    killed = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in env:
            try:
                os.killpg(int(entry.name), signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def pg_schema() -> tuple[str, str] | str:
    """A fresh schema: (URL, schema name), or why PostgreSQL cannot be used."""
    try:
        import psycopg

        schema = "bench_" + secrets.token_hex(5)
        with psycopg.connect(
            PG_URL.replace("postgresql+psycopg", "postgresql"), autocommit=True, connect_timeout=3
        ) as c:
            c.execute(f'CREATE SCHEMA "{schema}"')
    except Exception as exc:
        return f"PostgreSQL not reachable at {PG_URL}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    sep = "&" if "?" in PG_URL else "?"
    return f"{PG_URL}{sep}options=-csearch_path%3D{schema}", schema


def drop_pg_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(PG_URL.replace("postgresql+psycopg", "postgresql"), autocommit=True) as c:
        c.execute(f'DROP SCHEMA "{schema}" CASCADE')


# ---------------------------------------------------------------------------- load


def percentile(sorted_ms: list[float], q: float) -> float:
    if not sorted_ms:
        return float("nan")
    return sorted_ms[max(0, math.ceil(q * len(sorted_ms)) - 1)]


async def drive(
    n: int, concurrency: int, make_op: Callable[[int], Callable[[], Awaitable[bool]]], errors_seen: list[str]
) -> tuple[list[float], int, float]:
    """Run ``n`` operations with ``concurrency`` workers; worker ``w`` runs ``make_op(w)()``.
    Returns the latencies in ms of the successful ones, the error count and the wall time."""
    latencies: list[float] = []
    errors = 0
    left = n

    async def worker(w: int) -> None:
        nonlocal left, errors
        op = make_op(w)
        while left > 0:
            left -= 1
            t0 = time.perf_counter()
            try:
                ok = await op()
            except httpx.HTTPError as exc:  # counted, not fatal: the table shows errors per endpoint
                errors_seen.append(f"{type(exc).__name__}: {exc}")
                ok = False
            if ok:
                latencies.append((time.perf_counter() - t0) * 1000)
            else:
                errors += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return latencies, errors, time.perf_counter() - t0


def row(db: str, endpoint: str, lat: list[float], errors: int, wall: float) -> Row:
    lat.sort()
    return Row(
        db=db,
        endpoint=endpoint,
        requests=len(lat) + errors,
        errors=errors,
        p50_ms=round(percentile(lat, 0.50), 2),
        p99_ms=round(percentile(lat, 0.99), 2),
        max_ms=round(lat[-1], 2) if lat else float("nan"),
        rps=round((len(lat) + errors) / wall, 1),
    )


async def bench_db(db: str, db_url: str, n: int, concurrency: int, errors_out: list[str]) -> list[Row]:
    data_dir = Path(tempfile.mkdtemp(prefix=f"danlu-api-{db}-"))
    server = Server(db_url, data_dir)
    rows: list[Row] = []
    tokens: list[str] = []
    try:
        admin_token = server.wait_ready()
        api = server.url + "/api/v1"
        limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
        async with httpx.AsyncClient(base_url=api, timeout=60, limits=limits) as http:
            admin = {"Authorization": f"Bearer {admin_token}"}
            for model, price in PRICES.items():
                r = await http.put(f"/admin/prices/{model}", json={"price_per_hour": price}, headers=admin)
                r.raise_for_status()
            for i in range(concurrency + 1):
                r = await http.post("/admin/users", json={"name": f"bench{i:03d}"}, headers=admin)
                r.raise_for_status()
                tokens.append(r.json()["token"])
                r = await http.post(f"/admin/users/bench{i:03d}/topup", json={"amount": "100000.00"}, headers=admin)
                r.raise_for_status()
            headers = [{"Authorization": f"Bearer {t}"} for t in tokens]
            lister = headers[-1]
            for i in range(LIST_INSTANCES):
                body = {"gpu_model": "A100-80GB", "command": ["sleep", "600"], "name": f"list{i}"}
                r = await http.post("/instances", json=body, headers=lister)
                r.raise_for_status()

            def get(path: str, hdr: dict[str, str]) -> Callable[[int], Callable[[], Awaitable[bool]]]:
                def make(_w: int) -> Callable[[], Awaitable[bool]]:
                    async def op() -> bool:
                        resp = await http.get(path, headers=hdr)
                        return resp.status_code == 200

                    return op

                return make

            codes: Counter[str] = Counter()

            def rent_stop(w: int) -> Callable[[], Awaitable[bool]]:
                hdr = headers[w]

                async def op() -> bool:
                    body = {"gpu_model": "T4", "command": ["sleep", "600"]}
                    resp = await http.post("/instances", json=body, headers=hdr)
                    if resp.status_code != 201:
                        errors_out.append(f"{db} rent: {resp.status_code} {resp.text[:200]}")
                        codes[f"rent {resp.status_code} {error_code(resp)}"] += 1
                        return False
                    inst = resp.json()["id"]
                    resp = await http.post(f"/instances/{inst}/stop", headers=hdr)
                    if resp.status_code != 200:
                        errors_out.append(f"{db} stop: {resp.status_code} {resp.text[:200]}")
                        codes[f"stop {resp.status_code} {error_code(resp)}"] += 1
                        return False
                    return True

                return op

            cases: list[tuple[str, Callable[[int], Callable[[], Awaitable[bool]]]]] = [
                ("GET /offers", get("/offers", headers[0])),
                ("GET /instances", get("/instances", lister)),
                ("rent+stop", rent_stop),
            ]
            for name, make in cases:
                await drive(min(WARMUP, n), concurrency, make, errors_out)  # warm pools and caches; not counted
                codes.clear()
                lat, errs, wall = await drive(n, concurrency, make, errors_out)
                rows.append(row(db, name, lat, errs, wall))
                rows[-1].error_codes = dict(codes)
                if name == "rent+stop":
                    rows[-1].stopping_at_end, rows[-1].release_lag_s = await release_lag(http, headers[:-1])
                print(f"[{db}] {name}: p50 {rows[-1].p50_ms} ms, p99 {rows[-1].p99_ms} ms", file=sys.stderr)

            # Clean up: remove every instance that still has (or may have) a process.
            for hdr in headers:
                resp = await http.get("/instances", headers=hdr)
                for inst in resp.json():
                    if inst["status"] in ("pending", "running", "stopping"):
                        await http.delete(f"/instances/{inst['id']}", headers=hdr)
    finally:
        stop_and_remove(server, data_dir, db)
    return rows


def stop_and_remove(server: Server, data_dir: Path, label: str) -> None:
    """Stops the server, kills any instance process it left, removes its data directory."""
    server.stop()
    leftovers = kill_instance_processes(data_dir)
    if leftovers:
        print(f"[{label}] killed {leftovers} leftover instance process group(s)", file=sys.stderr)
    shutil.rmtree(data_dir, ignore_errors=True)


def error_code(resp: httpx.Response) -> str:
    try:
        return str(resp.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return "?"


async def release_lag(http: httpx.AsyncClient, headers: list[dict[str, str]]) -> tuple[int, float]:
    """Stopped instances keep their GPUs until the control loop sees the process gone: how many
    were still ``stopping`` when the load ended, and how long until none was."""
    t0 = time.perf_counter()
    first: int | None = None
    while time.perf_counter() - t0 < 120:
        stopping = 0
        for hdr in headers:
            resp = await http.get("/instances", headers=hdr)
            stopping += sum(1 for i in resp.json() if i["status"] == "stopping")
        first = stopping if first is None else first
        if stopping == 0:
            break
        await asyncio.sleep(0.5)
    return first or 0, round(time.perf_counter() - t0, 1)


# ---------------------------------------------------------------------------- output


def finish(rows: list[Row]) -> None:
    sqlite_p99 = {r.endpoint: r.p99_ms for r in rows if r.db == "sqlite"}
    for r in rows:
        if r.db == "postgresql" and sqlite_p99.get(r.endpoint):
            r.pg_over_sqlite_p99 = round(r.p99_ms / sqlite_p99[r.endpoint], 2)
        if r.endpoint.startswith("GET"):
            r.target = f"p99 < {READ_TARGET_P99_MS:g} ms"
            r.verdict = "pass" if r.p99_ms < READ_TARGET_P99_MS and r.errors == 0 else "MISS"
        else:
            r.target = "-"
            codes = ", ".join(f"{n} {c}" for c, n in r.error_codes.items())
            r.verdict = "ok" if r.errors == 0 else codes or f"{r.errors} errors"


def table(rows: list[Row], skipped: list[Skipped]) -> str:
    head: tuple[str, ...] = (
        "db",
        "endpoint",
        "requests",
        "errors",
        "p50 ms",
        "p99 ms",
        "max ms",
        "req/s",
        "pg/sqlite p99",
    )
    head += ("target", "verdict")
    cells: list[tuple[str, ...]] = [head]
    for r in rows:
        ratio = "" if r.pg_over_sqlite_p99 is None else f"{r.pg_over_sqlite_p99:.2f}x"
        cells.append(
            (
                r.db,
                r.endpoint,
                str(r.requests),
                str(r.errors),
                f"{r.p50_ms:.1f}",
                f"{r.p99_ms:.1f}",
                f"{r.max_ms:.1f}",
                f"{r.rps:.0f}",
                ratio,
                r.target,
                r.verdict,
            )
        )
    for s in skipped:
        cells.extend((s.db, e, "-", "-", "-", "-", "-", "-", "-", "-", f"skipped: {s.reason}") for e in ENDPOINTS)
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True)).rstrip() for cell in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000, help="requests (or rent+stop pairs) per endpoint")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--db", default="sqlite,postgresql", help="comma-separated: sqlite, postgresql")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    load_before = os.getloadavg()
    rows: list[Row] = []
    skipped: list[Skipped] = []
    errors: list[str] = []
    for db in [d.strip() for d in args.db.split(",") if d.strip()]:
        if db == "sqlite":
            tmp = Path(tempfile.mkdtemp(prefix="danlu-api-db-"))
            try:
                rows += asyncio.run(
                    bench_db(db, f"sqlite:///{tmp / 'danlu.db'}", args.requests, args.concurrency, errors)
                )
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        elif db == "postgresql":
            made = pg_schema()
            if isinstance(made, str):
                skipped.append(Skipped(db, made))
                continue
            url, schema = made
            try:
                rows += asyncio.run(bench_db(db, url, args.requests, args.concurrency, errors))
            finally:
                drop_pg_schema(schema)
        else:
            ap.error(f"unknown database {db!r}")
    finish(rows)
    load_after = os.getloadavg()
    if args.json:
        out = {
            "concurrency": args.concurrency,
            "requests_per_endpoint": args.requests,
            "rows": [asdict(r) for r in rows],
            "skipped": [asdict(s) for s in skipped],
            "errors_sample": errors[:20],
            "load_before": load_before,
            "load_after": load_after,
        }
        print(json.dumps(out, indent=2))
    else:
        print(f"concurrency {args.concurrency}, {args.requests} requests per endpoint, {os.cpu_count()} CPUs")
        print(table(rows, skipped))
        for r in rows:
            if r.stopping_at_end is not None:
                print(
                    f"{r.db}: {r.stopping_at_end} stopped instances still held GPUs when the rent+stop load ended; "
                    f"the control loop freed them all {r.release_lag_s} s later"
                )
        for e in sorted(set(errors))[:5]:
            print(f"error (sample): {e}")
        print(
            f"load average before: {' '.join(f'{x:.2f}' for x in load_before)}; "
            f"after: {' '.join(f'{x:.2f}' for x in load_after)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
