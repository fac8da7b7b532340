"""Metering overhead: N running instances (real ``sleep`` processes) metered for a while.

The control loop (the server's own ``ControlLoop``: reconcile every tick, meter every
``meter_interval_s``) runs in-process on its own thread, exactly as ``danlu server`` runs it, on a
real SQLite file and on a fresh PostgreSQL schema. Its CPU time is read with ``time.thread_time()``
inside the loop thread, so it counts the Python, the SQLite library and the /proc reads, and
nothing else; on PostgreSQL the server backends' CPU is read from /proc and shown beside it.

After the window every instance is stopped through the service layer and the books are checked:

* per allocation, usage rows tile [started, ended] — seconds in a gap are *lost*, seconds covered
  twice are *doubled* — and their seconds add up to ``(ended_at - started_at) // 1000``;
* the money billed equals the rating of those seconds, the ledger sums to zero, and every
  account's cached balance equals the sum of its entries.

    python benchmarks/metering.py [--seconds 300] [--pg-seconds 60] [--instances 1000] [--users 50]
                                  [--db sqlite,postgresql] [--json] [--profile]

Set-up calls the service functions directly (``danlu.compute.instances.rent``), not HTTP.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import resource
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import DBAPIError

from danlu.accounts.service import create_user
from danlu.billing import service as billing
from danlu.billing.pricing import Plan
from danlu.billing.rating import Rate, billable_seconds, cumulative_cost
from danlu.compute import instances as svc
from danlu.compute.gpus import parse_simulated_spec
from danlu.compute.lifecycle import HAS_PROCESS
from danlu.compute.reconcile import meter_all
from danlu.compute.sandbox.probe import make_local_backend, sandbox_dir_for
from danlu.context import Platform, Settings
from danlu.core.clock import SystemClock
from danlu.core.errors import Conflict
from danlu.db.engine import open_database
from danlu.db.models import Account, AllocationRow, Instance, LedgerEntry, UsageRecordRow, User
from danlu.server.bootstrap import bootstrap
from danlu.server.loop import ControlLoop

PG_URL = os.environ.get("DANLU_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TARGET_CORE_PCT = 10.0
# 1 fen per GPU-second (every second costs money) and 0.1 fen per GPU-second (rounding matters).
PRICES = {"A100-80GB": "36.00", "T4": "3.60"}
COMMAND = ["sleep", "100000"]
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Books:
    allocations: int = 0
    usage_rows: int = 0
    seconds_expected: int = 0
    seconds_billed: int = 0  # seconds covered by usage rows
    lost_s: int = 0
    doubled_s: int = 0
    unsettled: int = 0
    billed_until_mismatch: int = 0
    zero_second_gaps: int = 0  # gaps in ms that contain no whole billable second (harmless)
    lost_in_free_gaps_s: int = 0  # lost seconds whose rating was 0 fen (no money missing)
    lost_in_tail_s: int = 0  # lost seconds after the last usage row (the final, settling interval)
    lost_by_model: dict[str, int] = field(default_factory=dict)
    money_expected_minor: int = 0
    money_billed_minor: int = 0  # allocations' billed_minor
    usage_rows_minor: int = 0
    ledger_sum_minor: int = 0
    accounts_off: int = 0  # cached balance != sum of entries


@dataclass
class Result:
    db: str
    instances: int
    users: int
    seconds: float
    setup_s: float
    loop_cpu_s: float
    core_pct: float
    process_cpu_s: float
    db_server_cpu_s: float | None
    ticks: int
    meter_passes: int
    tick_cpu_ms: float  # mean CPU of a reconcile-only tick
    meter_tick_cpu_ms: float  # mean CPU of a tick that also metered
    max_tick_wall_ms: float
    running_at_end: int
    mem_mb_per_100: float
    stop_s: float
    stop_failures: dict[str, int]
    books: Books
    target: str = f"< {TARGET_CORE_PCT:g}% of one core; 0 s lost or doubled"
    verdict: str = ""
    profile: str = ""


class MeasuredLoop(ControlLoop):
    """The server's control loop, with each tick's thread CPU time recorded while measuring."""

    def __init__(self, platform: Platform) -> None:
        super().__init__(platform)
        self.measuring = False
        self.cpu_s = 0.0
        self.n_ticks = 0
        self.n_meter = 0
        self.plain_cpu: list[float] = []
        self.meter_cpu: list[float] = []
        self.max_wall = 0.0

    def run_once(self) -> None:
        before = self.next_meter_ms
        c0, w0 = time.thread_time(), time.perf_counter()
        super().run_once()
        cpu, wall = time.thread_time() - c0, time.perf_counter() - w0
        if not self.measuring:
            return
        self.cpu_s += cpu
        self.n_ticks += 1
        self.max_wall = max(self.max_wall, wall)
        if self.next_meter_ms != before:
            self.n_meter += 1
            self.meter_cpu.append(cpu)
        else:
            self.plain_cpu.append(cpu)


# ---------------------------------------------------------------------------- set-up helpers


def pg_schema_url() -> tuple[str, str] | None:
    """A fresh schema on the PostgreSQL server (its URL and name), or None if unreachable."""
    try:
        import psycopg

        schema = "bench_" + secrets.token_hex(5)
        raw = PG_URL.replace("postgresql+psycopg", "postgresql")
        with psycopg.connect(raw, autocommit=True, connect_timeout=3) as c:
            c.execute(f'CREATE SCHEMA "{schema}"')
    except Exception as exc:
        print(f"PostgreSQL not reachable at {PG_URL}: {str(exc).splitlines()[0] if str(exc) else exc}", file=sys.stderr)
        return None
    sep = "&" if "?" in PG_URL else "?"
    return f"{PG_URL}{sep}options=-csearch_path%3D{schema}&application_name={schema}", schema


def drop_pg_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(PG_URL.replace("postgresql+psycopg", "postgresql"), autocommit=True) as c:
        c.execute(f'DROP SCHEMA "{schema}" CASCADE')


def pg_backend_cpu(app_name: str) -> dict[int, float]:
    """CPU seconds so far of each PostgreSQL backend serving this benchmark (same machine)."""
    import psycopg

    with psycopg.connect(PG_URL.replace("postgresql+psycopg", "postgresql"), autocommit=True) as c:
        pids = [r[0] for r in c.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app_name,))]
    out: dict[int, float] = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def mem_available_mb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0.0


def gpu_spec(instances: int) -> str:
    """Enough simulated GPUs, half A100-80GB and half T4, in parts of at most 64 (one host)."""
    per_model = (instances + 1) // 2
    parts: list[str] = []
    for model in PRICES:
        left = per_model
        while left > 0:
            parts.append(f"{model}:{min(64, left)}")
            left -= 64
    return ",".join(parts)


def build_platform(url: str, data_dir: Path, instances: int, sandbox: bool = True) -> Platform:
    """As ``danlu server`` builds it: sandboxed runs by default (network ``none``: not the point here)."""
    db = open_database(url)
    clock = SystemClock()
    backend, status = make_local_backend(data_dir, no_sandbox=not sandbox, network="none")
    sdir = sandbox_dir_for(data_dir, status)
    spec = parse_simulated_spec(gpu_spec(instances), "local")
    bootstrap(db, data_dir, "CNY", spec, clock.now_ms(), sandbox=status, sandbox_dir=sdir)
    settings = Settings(data_dir=data_dir, sandbox_dir=sdir)  # the server's defaults: tick 1 s, meter every 10 s
    return Platform(db=db, clock=clock, backend=backend, settings=settings, sandbox=status)


def make_users(p: Platform, n: int) -> list[User]:
    for model, price in PRICES.items():
        billing.set_price(p, model, price)
    users: list[User] = []
    for i in range(n):
        with p.db.write() as s:
            user, _ = create_user(s, f"renter{i:03d}", p.clock.now_ms())
            s.expunge(user)
        billing.admin_topup(p, user.name, "100000.00", None)
        users.append(user)
    return users


def rent_all(p: Platform, users: list[User], n: int) -> list[tuple[User, str]]:
    models = list(PRICES)
    rented: list[tuple[User, str]] = []
    for i in range(n):
        user = users[i % len(users)]
        view = svc.rent(p, user, models[i % len(models)], 1, COMMAND, name=f"m{i}")
        rented.append((user, view.id))
    return rented


def kill_leftovers(p: Platform) -> None:
    with p.db.read() as s:
        handles = [h for (h,) in s.execute(select(Instance.run_handle)) if h]
    for handle in handles:
        p.backend.kill(handle)
    p.backend.poll(handles)  # reaps them
    for handle in handles:
        p.backend.release(handle)


# ---------------------------------------------------------------------------- the books


def check_books(p: Platform) -> Books:
    b = Books()
    with p.db.read() as s:
        allocs = list(s.scalars(select(AllocationRow)))
        rows: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        for aid, start, end, amount in s.execute(
            select(
                UsageRecordRow.allocation_id,
                UsageRecordRow.start_ms,
                UsageRecordRow.end_ms,
                UsageRecordRow.amount_minor,
            )
        ):
            rows[aid].append((start, end, amount))
        b.ledger_sum_minor = int(s.execute(select(func.coalesce(func.sum(LedgerEntry.amount_minor), 0))).scalar_one())
        per_account = select(LedgerEntry.account_id, func.sum(LedgerEntry.amount_minor)).group_by(
            LedgerEntry.account_id
        )
        sums: dict[int, int] = {aid: int(total) for aid, total in s.execute(per_account)}
        for acct in s.scalars(select(Account)):
            if acct.balance_minor != int(sums.get(acct.id, 0)):
                b.accounts_off += 1
    lost_by_model: dict[str, int] = defaultdict(int)
    for a in allocs:
        b.allocations += 1
        if not a.settled or a.ended_at_ms is None:
            b.unsettled += 1
            continue
        if a.billed_until_ms != a.ended_at_ms:
            b.billed_until_mismatch += 1
        expected = billable_seconds(a.started_at_ms, a.ended_at_ms)
        b.seconds_expected += expected
        b.money_expected_minor += cumulative_cost(
            Rate(a.price_per_hour_minor, a.gpu_count, a.started_at_ms, Plan(a.plan)), expected
        )
        b.money_billed_minor += a.billed_minor

        def sec(t: int, a: AllocationRow = a) -> int:
            return billable_seconds(a.started_at_ms, t)

        def cost(seconds: int, a: AllocationRow = a) -> int:
            return cumulative_cost(Rate(a.price_per_hour_minor, a.gpu_count, a.started_at_ms, Plan(a.plan)), seconds)

        cursor = a.started_at_ms
        for start, end, amount in sorted(rows.get(a.id, [])):
            b.usage_rows += 1
            b.usage_rows_minor += amount
            b.seconds_billed += sec(end) - sec(start)
            if start > cursor:
                gap = sec(start) - sec(cursor)
                b.lost_s += gap
                lost_by_model[a.gpu_model] += gap
                b.zero_second_gaps += gap == 0
                b.lost_in_free_gaps_s += gap if cost(sec(start)) == cost(sec(cursor)) else 0
            elif start < cursor:
                b.doubled_s += sec(min(cursor, end)) - sec(start)
            cursor = max(cursor, end)
        if cursor < a.ended_at_ms:
            gap = sec(a.ended_at_ms) - sec(cursor)
            b.lost_s += gap
            lost_by_model[a.gpu_model] += gap
            b.zero_second_gaps += gap == 0
            b.lost_in_free_gaps_s += gap if cost(sec(a.ended_at_ms)) == cost(sec(cursor)) else 0
            b.lost_in_tail_s += gap
        elif cursor > a.ended_at_ms:
            b.doubled_s += sec(cursor) - sec(a.ended_at_ms)
    b.lost_by_model = dict(lost_by_model)
    return b


# ---------------------------------------------------------------------------- one run


def profile_meter_pass(p: Platform) -> str:
    prof = cProfile.Profile()
    prof.enable()
    meter_all(p)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(18)
    return out.getvalue()


def run(db: str, url: str, seconds: float, n_instances: int, n_users: int, profile: bool, sandbox: bool) -> Result:
    data_dir = Path(tempfile.mkdtemp(prefix=f"danlu-meter-{db}-"))
    p = build_platform(url, data_dir, n_instances, sandbox)
    loop = MeasuredLoop(p)
    stop_failures: dict[str, int] = defaultdict(int)
    try:
        t0 = time.monotonic()
        users = make_users(p, n_users)
        mem0 = mem_available_mb()
        rented = rent_all(p, users, n_instances)
        setup_s = time.monotonic() - t0
        mem_mb = mem0 - mem_available_mb()
        print(f"[{db}] {len(rented)} instances running after {setup_s:.0f} s; measuring {seconds:g} s", file=sys.stderr)

        loop.start()
        time.sleep(1.5)  # the first tick and the first meter pass (a backlog from set-up) are not steady state
        app_name = url.rsplit("application_name=", 1)[1] if "application_name=" in url else ""
        pg0 = pg_backend_cpu(app_name) if app_name else {}
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        loop.measuring = True
        w0 = time.monotonic()
        time.sleep(seconds)
        loop.measuring = False
        wall = time.monotonic() - w0
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        pg1 = pg_backend_cpu(app_name) if app_name else {}
        db_cpu = sum(v - pg0.get(pid, 0.0) for pid, v in pg1.items()) if app_name else None
        with p.db.read() as s:
            running = int(
                s.execute(select(func.count()).select_from(Instance).where(Instance.status == "running")).scalar_one()
            )
        prof_text = profile_meter_pass(p) if profile else ""

        t1 = time.monotonic()
        for user, inst_id in rented:
            for _attempt in range(5):
                try:
                    svc.stop(p, user, inst_id)
                    break
                except Conflict as exc:  # lost a race with the loop's meter pass: the user would see a 409
                    stop_failures[exc.code] += 1
                except DBAPIError as exc:  # e.g. a deadlock with the loop's meter pass: the user would see a 500
                    stop_failures[type(exc.orig).__name__] += 1
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with p.db.read() as s:
                left = s.execute(
                    select(func.count())
                    .select_from(Instance)
                    .where(Instance.status.in_([st.value for st in HAS_PROCESS]))
                ).scalar_one()
            if left == 0:
                break
            time.sleep(0.5)
        stop_s = time.monotonic() - t1
        loop.stop()
        books = check_books(p)
    finally:
        loop.stop()
        kill_leftovers(p)
        p.db.engine.dispose()
        shutil.rmtree(data_dir, ignore_errors=True)

    plain = loop.plain_cpu or [0.0]
    meter = loop.meter_cpu or [0.0]
    res = Result(
        db=db,
        instances=n_instances,
        users=n_users,
        seconds=round(wall, 1),
        setup_s=round(setup_s, 1),
        loop_cpu_s=round(loop.cpu_s, 2),
        core_pct=round(100 * loop.cpu_s / wall, 2),
        process_cpu_s=round((ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime), 2),
        db_server_cpu_s=None if db_cpu is None else round(db_cpu, 2),
        ticks=loop.n_ticks,
        meter_passes=loop.n_meter,
        tick_cpu_ms=round(1000 * sum(plain) / len(plain), 1),
        meter_tick_cpu_ms=round(1000 * sum(meter) / len(meter), 1),
        max_tick_wall_ms=round(1000 * loop.max_wall, 1),
        running_at_end=running,
        mem_mb_per_100=round(100 * mem_mb / max(1, n_instances), 1),
        stop_s=round(stop_s, 1),
        stop_failures=dict(stop_failures),
        books=books,
        profile=prof_text,
    )
    ok_books = (
        books.lost_s == 0
        and books.doubled_s == 0
        and books.ledger_sum_minor == 0
        and books.accounts_off == 0
        and books.unsettled == 0
        and books.money_billed_minor == books.money_expected_minor == books.usage_rows_minor
    )
    res.verdict = f"cpu {'pass' if res.core_pct < TARGET_CORE_PCT else 'MISS'}, books {'pass' if ok_books else 'MISS'}"
    print(f"[{db}] done: {json.dumps(asdict(res) | {'profile': ''})}", file=sys.stderr)
    return res


# ---------------------------------------------------------------------------- output


def table(results: list[Result]) -> str:
    rows: list[tuple[str, ...]] = [
        ("metric", *[r.db for r in results], *(["postgresql / sqlite"] if len(results) == 2 else []))
    ]

    def add(name: str, values: list[Any], ratio: bool = False) -> None:
        extra: list[str] = []
        if len(results) == 2:
            a, b = values
            extra = [f"{b / a:.2f}x" if ratio and isinstance(a, int | float) and a else ""]
        rows.append((name, *[str(v) for v in values], *extra))

    bk = [r.books for r in results]
    add("instances (real sleep processes)", [r.instances for r in results])
    add("users", [r.users for r in results])
    add("set-up: create users + rent, s", [r.setup_s for r in results])
    add("memory per 100 instances, MB", [r.mem_mb_per_100 for r in results])
    add("measured duration, s", [r.seconds for r in results])
    add("control-loop CPU, s", [r.loop_cpu_s for r in results])
    add("control loop, % of one core", [r.core_pct for r in results], True)
    add("whole process CPU, s", [r.process_cpu_s for r in results])
    add("PostgreSQL backends CPU, s", ["-" if r.db_server_cpu_s is None else r.db_server_cpu_s for r in results])
    add(
        "loop + database server, % of one core",
        [round(100 * (r.loop_cpu_s + (r.db_server_cpu_s or 0.0)) / r.seconds, 2) for r in results],
        True,
    )
    add("ticks", [r.ticks for r in results])
    add("meter passes", [r.meter_passes for r in results])
    add("CPU per reconcile tick, ms", [r.tick_cpu_ms for r in results], True)
    add("CPU per meter tick, ms", [r.meter_tick_cpu_ms for r in results], True)
    add("slowest tick (wall), ms", [r.max_tick_wall_ms for r in results], True)
    add("instances running at end", [r.running_at_end for r in results])
    add("stop all + reconcile, s", [r.stop_s for r in results])
    add("stop calls that failed (retried)", [r.stop_failures or 0 for r in results])
    add("allocations (unsettled)", [f"{b.allocations} ({b.unsettled})" for b in bk])
    add("usage rows", [b.usage_rows for b in bk])
    add("seconds billed / expected", [f"{b.seconds_billed} / {b.seconds_expected}" for b in bk])
    add("seconds lost", [f"{b.lost_s} {b.lost_by_model}" if b.lost_s else "0" for b in bk])
    add("  of which rated 0 fen (no money missing)", [b.lost_in_free_gaps_s for b in bk])
    add("  of which after the last usage row", [b.lost_in_tail_s for b in bk])
    add("seconds doubled", [b.doubled_s for b in bk])
    add("money billed / expected, fen", [f"{b.money_billed_minor} / {b.money_expected_minor}" for b in bk])
    add("usage rows' amounts, fen", [b.usage_rows_minor for b in bk])
    add("ledger imbalance, fen", [b.ledger_sum_minor for b in bk])
    add("accounts whose balance != entries", [b.accounts_off for b in bk])
    add("target", [r.target for r in results])
    add("verdict", [r.verdict for r in results])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=300.0, help="measured window on SQLite")
    ap.add_argument("--pg-seconds", type=float, default=None, help="measured window on PostgreSQL (default: 60)")
    ap.add_argument("--instances", type=int, default=1000)
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--db", default="sqlite,postgresql", help="comma-separated: sqlite, postgresql")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of one meter pass per database")
    ap.add_argument("--no-sandbox", action="store_true", help="plain processes (as `danlu server --no-sandbox`)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    pg_seconds = args.pg_seconds if args.pg_seconds is not None else min(args.seconds, 60.0)

    # 1,000 sh wrappers + 1,000 sleeps are our children or grandchildren: make sure we may have them.
    soft, _hard = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY and soft < 3 * args.instances:
        print(f"RLIMIT_NPROC is {soft}; {2 * args.instances} processes are needed", file=sys.stderr)
    results: list[Result] = []
    skipped: list[str] = []
    for db in [d.strip() for d in args.db.split(",") if d.strip()]:
        if db == "sqlite":
            tmp = Path(tempfile.mkdtemp(prefix="danlu-meter-db-"))
            try:
                results.append(
                    run(
                        db,
                        f"sqlite:///{tmp / 'danlu.db'}",
                        args.seconds,
                        args.instances,
                        args.users,
                        args.profile,
                        not args.no_sandbox,
                    )
                )
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        elif db == "postgresql":
            made = pg_schema_url()
            if made is None:
                skipped.append("postgresql: not reachable")
                continue
            url, schema = made
            try:
                results.append(run(db, url, pg_seconds, args.instances, args.users, args.profile, not args.no_sandbox))
            finally:
                drop_pg_schema(schema)
        else:
            ap.error(f"unknown database {db!r}")
    if args.json:
        out = [asdict(r) for r in results]
        print(json.dumps({"results": out, "skipped": skipped, "load": os.getloadavg()}, indent=2))
    else:
        print(table(results))
        for s in skipped:
            print(f"skipped: {s}")
        for r in results:
            if r.profile:
                print(f"\none meter pass on {r.db} (cProfile, cumulative):\n{r.profile}")
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    threading.current_thread().name = "bench-main"
    sys.exit(main())
