"""Month-end invoice finalisation at scale: ``danlu.billing.invoices.finalize_due`` for 10,000 payers.

On a fresh PostgreSQL schema (127.0.0.1:5432, db ``test``; ``DANLU_TEST_PG_URL`` overrides), built
by the real migrations, it writes N billing accounts (teams, each with its cash account), one
stopped instance and A allocations per account, and R usage records per allocation, all in one
closed month — inserted in bulk with SQLAlchemy Core: this measures finalisation, not the meter.
Then, on a clock past that month's grace window, it times:

* ``finalize_due`` (ours): every payer's invoice numbered, its lines written, its intervals marked;
* as the floor beside it, a bare ``SELECT billing_account_id, sum(amount_minor) … GROUP BY`` over
  the same rows, usage and charges (what reading the month costs at the least).

and checks the books: one final invoice per account, numbers 1..N without a gap, every interval on
an invoice, and each invoice's total equal to its account's sum in the floor query.

    python benchmarks/invoices.py [--accounts 10000] [--allocations 2] [--records 30] [--holds 1] [--json]
                                  [--profile]

Exit code 1 when the target (60 s for 10,000 accounts) is missed or a check fails; 2 when
PostgreSQL is unreachable.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import secrets
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import func, insert, select

from danlu.billing import invoices, periods
from danlu.compute.sandbox.probe import make_local_backend
from danlu.context import Platform, Settings
from danlu.core.clock import FakeClock
from danlu.db.engine import open_database
from danlu.db.models import (
    Account,
    AllocationRow,
    BillingAccount,
    ChargeRow,
    Hold,
    HostRow,
    Instance,
    Invoice,
    InvoiceLine,
    LedgerTransaction,
    PlanTerm,
    PricePlan,
    UsageRecordRow,
    User,
)
from danlu.server.bootstrap import bootstrap

PG_URL = os.environ.get("DANLU_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TARGET_S = 60.0
TARGET_ACCOUNTS = 10_000
MONTH_START_MS = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)  # the closed month
BATCH = 5_000


@dataclass
class Result:
    accounts: int
    allocations: int
    usage_records: int
    invoices: int
    lines: int
    setup_s: float
    finalize_s: float
    accounts_per_s: float
    floor_s: float
    ratio_to_floor: float
    target_s: float
    checks: str
    verdict: str
    profile: str = ""


def pg_schema_url() -> tuple[str, str] | None:
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
    return f"{PG_URL}{sep}options=-csearch_path%3D{schema}", schema


def drop_pg_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(PG_URL.replace("postgresql+psycopg", "postgresql"), autocommit=True) as c:
        c.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _bulk(conn: Any, table: Any, rows: list[dict[str, Any]]) -> None:
    for i in range(0, len(rows), BATCH):
        conn.execute(insert(table), rows[i : i + BATCH])


def populate(p: Platform, accounts: int, allocs_per: int, records: int, holds: int = 1) -> int:
    """The month's rows, in bulk; returns the usage records written. Each allocation runs from a
    random-ish hour of the month, metered in ``records`` contiguous 10-minute intervals; each
    account also bought ``holds`` day packages that month (a ``charges`` line each, an expired hold)."""
    now = MONTH_START_MS
    step = 600_000
    price = 3_600  # 36.00 CNY per GPU-hour: 60 minor units a GPU-minute
    with p.db.engine.begin() as conn:
        user_id = conn.execute(
            insert(User).values(name="bench", token_hash=secrets.token_hex(32), is_admin=False, created_at_ms=now)
        ).inserted_primary_key[0]
        plan_id = conn.execute(
            insert(PricePlan).values(
                gpu_model="A100-80GB", kind="on-demand", price_per_hour_minor=price, currency="CNY", created_at_ms=now
            )
        ).inserted_primary_key[0]
        base = int(conn.execute(select(func.coalesce(func.max(BillingAccount.id), 0))).scalar_one())
        ba_ids = list(range(base + 1, base + accounts + 1))
        _bulk(
            conn,
            BillingAccount,
            [
                {
                    "id": b,
                    "kind": "team",
                    "user_id": None,
                    "name": f"team{b:05d}",
                    "credit_limit_minor": 0,
                    "created_at_ms": now,
                }
                for b in ba_ids
            ],
        )
        _bulk(
            conn,
            Account,
            [
                {"kind": "cash", "ref": f"ba:{b}", "billing_account_id": b, "currency": "CNY", "balance_minor": 0}
                for b in ba_ids
            ],
        )
        _bulk(
            conn,
            Instance,
            [
                {
                    "id": f"i-{b:08x}",
                    "user_id": user_id,
                    "billing_account_id": b,
                    "status": "stopped",
                    "gpu_model": "A100-80GB",
                    "gpu_count": 1,
                    "command_json": '["true"]',
                    "workspace": "/nowhere",
                    "created_at_ms": now,
                    "updated_at_ms": now,
                }
                for b in ba_ids
            ],
        )
        alloc_rows = []
        alloc_id = 0
        for b in ba_ids:
            for k in range(allocs_per):
                alloc_id += 1
                start = now + ((b * 7919 + k * 104_729) % (20 * 24)) * 3_600_000  # within the first 20 days
                end = start + records * step
                alloc_rows.append(
                    {
                        "id": alloc_id,
                        "instance_id": f"i-{b:08x}",
                        "user_id": user_id,
                        "billing_account_id": b,
                        "gpu_model": "A100-80GB",
                        "gpu_count": 1,
                        "gpu_indices": "0",
                        "plan": "on-demand",
                        "price_plan_id": plan_id,
                        "price_per_hour_minor": price,
                        "discount_bp": 0,
                        "tariffs_json": "",
                        "currency": "CNY",
                        "started_at_ms": start,
                        "ended_at_ms": end,
                        "billed_until_ms": end,
                        "billed_minor": records * 600,
                        "settled": True,
                    }
                )
        _bulk(conn, AllocationRow, alloc_rows)
        usage = []
        written = 0
        for a in alloc_rows:
            for r in range(records):
                s0 = a["started_at_ms"] + r * step
                usage.append(
                    {
                        "allocation_id": a["id"],
                        "start_ms": s0,
                        "end_ms": s0 + step,
                        "amount_minor": 600,
                        "gross_minor": 600,
                        "discount_minor": 0,
                        "voucher_minor": (600 if r == 0 else 0),
                    }
                )
            if len(usage) >= 50_000:
                _bulk(conn, UsageRecordRow, usage)
                written += len(usage)
                usage = []
        _bulk(conn, UsageRecordRow, usage)
        written += len(usage)
        if holds:
            _holds(conn, ba_ids, holds, user_id, plan_id, price, now)
    with p.db.engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE")
    return written


def _holds(conn: Any, ba_ids: list[int], per: int, user_id: int, plan_id: int, price: int, now: int) -> None:
    """``per`` expired day packages per account, each with its purchase transaction and charge."""
    host = insert(HostRow).values(name="bench-host", is_local=True, created_at_ms=now)
    host_id = conn.execute(host).inserted_primary_key[0]
    term_id = conn.execute(
        insert(PlanTerm).values(term="package-day", discount_bp=1000, cancel_fee_bp=0, created_at_ms=now)
    ).inserted_primary_key[0]
    paid = price * 24 * 9 // 10
    keys = [(b, k, f"h-{b:06x}{k:04x}") for b in ba_ids for k in range(per)]
    _bulk(
        conn,
        Hold,
        [
            {
                "id": h,
                "billing_account_id": b,
                "user_id": user_id,
                "term": "package-day",
                "plan_term_id": term_id,
                "gpu_model": "A100-80GB",
                "gpu_count": 1,
                "host_id": host_id,
                "price_plan_id": plan_id,
                "price_per_hour_minor": price,
                "discount_bp": 1000,
                "cancel_fee_bp": 0,
                "paid_minor": paid,
                "on_expiry": "stop",
                "state": "expired",
                "instance_id": None,
                "starts_at_ms": now + k * 86_400_000,
                "ends_at_ms": now + (k + 1) * 86_400_000,
                "ended_at_ms": now + (k + 1) * 86_400_000,
                "created_at_ms": now,
            }
            for b, k, h in keys
        ],
    )
    _bulk(
        conn,
        LedgerTransaction,
        [
            {"idempotency_key": f"hold:{h}:purchase", "kind": "hold", "memo": "bench", "created_at_ms": now}
            for _b, _k, h in keys
        ],
    )
    by_key = select(LedgerTransaction.idempotency_key, LedgerTransaction.id).where(LedgerTransaction.kind == "hold")
    tx = {str(key): int(i) for key, i in conn.execute(by_key).all()}
    _bulk(
        conn,
        ChargeRow,
        [
            {
                "billing_account_id": b,
                "user_id": user_id,
                "hold_id": h,
                "kind": "purchase",
                "plan": "package-day",
                "description": "package-day (bench)",
                "at_ms": now + k * 86_400_000,
                "seconds": 86_400,
                "price_per_hour_minor": price,
                "gross_minor": price * 24,
                "discount_minor": price * 24 - paid,
                "amount_minor": paid,
                "transaction_id": tx[f"hold:{h}:purchase"],
            }
            for b, k, h in keys
        ],
    )


def floor_query(p: Platform) -> tuple[float, dict[int, int]]:
    t0 = time.perf_counter()
    with p.db.read() as s:
        rows = s.execute(
            select(AllocationRow.billing_account_id, func.sum(UsageRecordRow.amount_minor))
            .join(AllocationRow, AllocationRow.id == UsageRecordRow.allocation_id)
            .where(UsageRecordRow.invoice_id.is_(None))
            .group_by(AllocationRow.billing_account_id)
        ).all()
        charged = s.execute(
            select(ChargeRow.billing_account_id, func.sum(ChargeRow.amount_minor))
            .where(ChargeRow.invoice_id.is_(None))
            .group_by(ChargeRow.billing_account_id)
        ).all()
    sums = {int(b): int(v) for b, v in rows}
    for b, v in charged:
        sums[int(b)] = sums.get(int(b), 0) + int(v)
    return time.perf_counter() - t0, sums


def check(p: Platform, accounts: int, sums: dict[int, int]) -> tuple[int, int, str]:
    problems = []
    with p.db.read() as s:
        invs = s.execute(select(Invoice.billing_account_id, Invoice.number, Invoice.total_minor, Invoice.status)).all()
        lines = int(s.execute(select(func.count(InvoiceLine.id))).scalar_one())
        left = int(
            s.execute(select(func.count(UsageRecordRow.id)).where(UsageRecordRow.invoice_id.is_(None))).scalar_one()
        )
        left += int(s.execute(select(func.count(ChargeRow.id)).where(ChargeRow.invoice_id.is_(None))).scalar_one())
    if len(invs) != accounts:
        problems.append(f"{len(invs)} invoices for {accounts} accounts")
    if sorted(int(i.number) for i in invs) != list(range(1, len(invs) + 1)):
        problems.append("invoice numbers have gaps or repeats")
    if any(i.status != "final" for i in invs):
        problems.append("an invoice is not final")
    wrong = [i.billing_account_id for i in invs if sums.get(i.billing_account_id) != i.total_minor]
    if wrong:
        problems.append(f"{len(wrong)} invoice totals differ from the floor's sums")
    if left:
        problems.append(f"{left} usage records or charges not on an invoice")
    return len(invs), lines, "; ".join(problems) or "ok"


def run(url: str, accounts: int, allocs_per: int, records: int, profile: bool, holds: int = 1) -> Result:
    data = Path(tempfile.mkdtemp(prefix="danlu-bench-invoices-"))
    db = open_database(url)
    try:
        clock = FakeClock(MONTH_START_MS)
        bootstrap(db, data, "CNY", [], clock.now_ms())
        backend, status = make_local_backend(data, no_sandbox=True, network="none")
        p = Platform(db=db, clock=clock, backend=backend, settings=Settings(data_dir=data), sandbox=status)
        t0 = time.perf_counter()
        n_records = populate(p, accounts, allocs_per, records, holds)
        setup_s = time.perf_counter() - t0
        floor_s, sums = floor_query(p)
        _, end = periods.period_bounds("2026-01", ZoneInfo("UTC"))
        clock.advance(ms=end + p.settings.invoice_grace_s * 1000 + 1 - clock.now_ms())
        prof = cProfile.Profile() if profile else None
        t0 = time.perf_counter()
        if prof:
            prof.enable()
        written = invoices.finalize_due(p, clock.now_ms())
        if prof:
            prof.disable()
        finalize_s = time.perf_counter() - t0
        n_inv, n_lines, checks = check(p, accounts, sums)
        if written != n_inv:
            checks = f"finalize_due said {written}, found {n_inv}; " + checks
        text = ""
        if prof:
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(25)
            text = buf.getvalue()
        budget = TARGET_S * accounts / TARGET_ACCOUNTS
        ok = finalize_s <= budget and checks == "ok"
        return Result(
            accounts=accounts,
            allocations=accounts * allocs_per,
            usage_records=n_records,
            invoices=n_inv,
            lines=n_lines,
            setup_s=round(setup_s, 2),
            finalize_s=round(finalize_s, 2),
            accounts_per_s=round(accounts / finalize_s, 1) if finalize_s else 0.0,
            floor_s=round(floor_s, 3),
            ratio_to_floor=round(finalize_s / floor_s, 1) if floor_s else 0.0,
            target_s=round(budget, 1),
            checks=checks,
            verdict="PASS" if ok else "FAIL",
            profile=text,
        )
    finally:
        db.engine.dispose()
        shutil.rmtree(data, ignore_errors=True)


def table(r: Result) -> str:
    rows = [
        ("accounts", f"{r.accounts:,}"),
        ("allocations", f"{r.allocations:,}"),
        ("usage records", f"{r.usage_records:,}"),
        ("invoices written", f"{r.invoices:,}"),
        ("invoice lines", f"{r.lines:,}"),
        ("set-up (bulk insert) s", f"{r.setup_s:.2f}"),
        ("finalize_due s (ours)", f"{r.finalize_s:.2f}"),
        ("accounts/s", f"{r.accounts_per_s:,.1f}"),
        ("floor: GROUP BY s", f"{r.floor_s:.3f}"),
        ("ours / floor", f"{r.ratio_to_floor:,.1f}x"),
        ("target s", f"<= {r.target_s:.1f}"),
        ("checks", r.checks),
        ("verdict", r.verdict),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accounts", type=int, default=TARGET_ACCOUNTS)
    ap.add_argument("--allocations", type=int, default=2, help="allocations (instances' runs) per account")
    ap.add_argument("--records", type=int, default=30, help="usage records per allocation")
    ap.add_argument("--holds", type=int, default=1, help="packages bought per account (an invoice line each)")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of finalize_due")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    made = pg_schema_url()
    if made is None:
        return 2
    url, schema = made
    try:
        r = run(url, args.accounts, args.allocations, args.records, args.profile, args.holds)
    finally:
        drop_pg_schema(schema)
    if args.json:
        out = asdict(r)
        out.pop("profile")
        print(json.dumps({"result": out, "load": os.getloadavg()}, indent=2))
    else:
        print(f"invoice finalisation on PostgreSQL ({PG_URL.rsplit('@', 1)[-1]})\n{table(r)}")
        if r.profile:
            print(f"\nfinalize_due (cProfile, cumulative):\n{r.profile}")
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0 if r.verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
