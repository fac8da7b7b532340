"""The kill -9 drill's checks (tools/kill_drill.py runs the drill; its docstring says what each check
means): one read of the database after the drill settles, held against what the sampler saw and the marks
the commands wrote in their workspaces."""

from __future__ import annotations

import itertools
import json
import os
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from danlu.billing.pricing import Plan
from danlu.billing.rating import Rate, billable_seconds, cumulative_cost
from danlu.db.models import (
    Account,
    AllocationRow,
    Gpu,
    Instance,
    InstanceEvent,
    Job,
    LedgerEntry,
    LedgerTransaction,
    UsageRecordRow,
    User,
)

CHECKS = ("billing", "overlap", "process_end", "stuck", "untracked", "gpus", "ledger")
HAS_PROCESS = {"pending", "running", "stopping"}
JOB_DONE = {"succeeded", "failed", "cancelled"}


# (supervisor pid -> (instance id, start ms), pid -> ppid, renter pid -> (uid, name))
Procs = tuple[dict[int, tuple[str, int]], dict[int, int], dict[int, tuple[int, str]]]


@dataclass
class RunSeen:
    """One supervisor process (pid, start time) of one instance, as the sampler saw it."""

    instance_id: str
    pid: int
    create_time_ms: int  # psutil's (from the boot time: identity only, it may be off the wall clock)
    first_seen_ms: int
    last_seen_ms: int
    command_first_ms: int | None = None  # when the renter's command (a `sleep`) was first seen
    command_last_ms: int | None = None
    # The end of the first scan that no longer saw it: the process ended in (last_seen, gone]. On a
    # loaded machine scans come late, so this, not last_seen + a fixed slack, bounds its real end.
    gone_ms: int | None = None


def read_marks(workspace: Path) -> set[int]:
    try:
        text = (workspace / ".drill-ran").read_text()
    except OSError:
        return set()
    return {int(line) for line in text.split() if line.isdigit()}


def supervisor_of(pid: int, sups: dict[int, Any], parents: dict[int, int]) -> int | None:
    """The supervisor ``pid`` runs under (itself or an ancestor), if any."""
    seen = 0
    while pid and seen < 64:
        if pid in sups:
            return pid
        pid = parents.get(pid, 0)
        seen += 1
    return None


# -- the checks --------------------------------------------------------------------------------------
@dataclass
class Rows:
    """Everything the checks read, in one read of the database."""

    instances: dict[str, Instance]
    allocations: list[AllocationRow]  # by instance, then start
    usage: dict[int, list[UsageRecordRow]]
    jobs: list[Job]
    gpus_held: list[Gpu]
    accounts: list[Account]
    transactions: list[LedgerTransaction]
    entries: list[LedgerEntry]
    users: list[User]
    events: dict[str, list[InstanceEvent]]


def read_rows(s: Session) -> Rows:
    usage: dict[int, list[UsageRecordRow]] = defaultdict(list)
    for u in s.scalars(select(UsageRecordRow).order_by(UsageRecordRow.start_ms)):
        usage[u.allocation_id].append(u)
    events: dict[str, list[InstanceEvent]] = defaultdict(list)
    for ev in s.scalars(select(InstanceEvent).order_by(InstanceEvent.id)):
        events[ev.instance_id].append(ev)
    return Rows(
        instances={i.id: i for i in s.scalars(select(Instance))},
        allocations=list(
            s.scalars(select(AllocationRow).order_by(AllocationRow.instance_id, AllocationRow.started_at_ms))
        ),
        usage=usage,
        jobs=list(s.scalars(select(Job))),
        gpus_held=list(s.scalars(select(Gpu).where(Gpu.allocation_id.is_not(None)))),
        accounts=list(s.scalars(select(Account))),
        transactions=list(s.scalars(select(LedgerTransaction))),
        entries=list(s.scalars(select(LedgerEntry))),
        users=list(s.scalars(select(User).where(User.is_admin.is_(False)))),
        events=events,
    )


def check_billing(
    rows: Rows, runs: list[RunSeen], tol_ms: int, v: dict[str, list[str]], marks: dict[str, set[int]]
) -> tuple[int, int]:
    """(a): billing, overlap and process_end. Returns (billed seconds, ground-truth seconds)."""
    runs_of: dict[str, list[RunSeen]] = defaultdict(list)
    for run in runs:
        runs_of[run.instance_id].append(run)
    billed_s = truth_s = 0
    for a in rows.allocations:
        tag = f"allocation {a.id} of {a.instance_id}"
        inst = rows.instances[a.instance_id]
        if a.ended_at_ms is None:
            v["billing"].append(f"{tag}: still open after settle (instance {inst.status})")
            continue
        secs = billable_seconds(a.started_at_ms, a.ended_at_ms)
        truth_s += secs
        billed_s += billable_seconds(a.started_at_ms, min(a.billed_until_ms, a.ended_at_ms))
        want = cumulative_cost(Rate(a.price_per_hour_minor, a.gpu_count, a.started_at_ms, Plan(a.plan)), secs)
        if a.billed_until_ms != a.ended_at_ms:
            v["billing"].append(f"{tag}: billed until {a.billed_until_ms}, ended at {a.ended_at_ms}")
        if a.billed_minor != want:
            v["billing"].append(f"{tag}: billed {a.billed_minor} minor units for {secs} s, rating says {want}")
        recs = rows.usage.get(a.id, [])
        if sum(r.amount_minor for r in recs) != a.billed_minor:
            v["billing"].append(f"{tag}: usage records sum to {sum(r.amount_minor for r in recs)}")
        edges = [a.started_at_ms] + [r.end_ms for r in recs]
        if recs and ([r.start_ms for r in recs] != edges[:-1] or edges[-1] != a.billed_until_ms):
            v["billing"].append(f"{tag}: usage records do not tile [{a.started_at_ms}, {a.billed_until_ms}]")
        # This allocation's processes: supervisors first seen within its interval.
        mine = [
            r for r in runs_of[a.instance_id] if a.started_at_ms - tol_ms <= r.first_seen_ms <= a.ended_at_ms + tol_ms
        ]
        if mine:
            end = max(r.gone_ms or r.last_seen_ms for r in mine)  # the latest it can really have ended
            if a.ended_at_ms > end + tol_ms:
                v["process_end"].append(
                    f"{tag}: ends at {a.ended_at_ms}, {a.ended_at_ms - end} ms after its process was seen gone"
                )
        # The command ran: the sampler saw its `sleep`, or — evidence no busy machine can starve — the command
        # wrote its start time into its workspace within this allocation (finding 13: a sampler starved for
        # seconds missed short commands that ran and exited 0, and called them "never ran").
        marked = any(a.started_at_ms - tol_ms <= m <= a.ended_at_ms + tol_ms for m in marks.get(a.instance_id, ()))
        if secs > 0 and not marked and not any(r.command_first_ms is not None for r in mine):
            v["process_end"].append(
                f"{tag}: billed {secs} s but its command never ran (supervisor {'seen' if mine else 'never seen'}; "
                f"instance {inst.status}: {inst.status_reason!r})"
            )
    by_inst: dict[str, list[AllocationRow]] = defaultdict(list)
    for a in rows.allocations:
        by_inst[a.instance_id].append(a)
    for iid, lst in by_inst.items():
        for x, y in itertools.pairwise(lst):
            if x.ended_at_ms is None or x.ended_at_ms > y.started_at_ms:
                by = "an open interval" if x.ended_at_ms is None else f"{x.ended_at_ms - y.started_at_ms} ms"
                v["overlap"].append(f"{iid}: allocations {x.id} and {y.id} overlap by {by}")
    return billed_s, truth_s


def check_stuck(rows: Rows, v: dict[str, list[str]]) -> None:
    """(b)"""
    for i in rows.instances.values():
        if i.status in ("pending", "stopping"):
            v["stuck"].append(f"instance {i.id} is {i.status} after settle ({i.status_reason!r})")
    for j in rows.jobs:
        if j.status not in JOB_DONE:
            v["stuck"].append(f"job {j.id} is {j.status} after settle and cancel ({j.status_reason!r})")


def check_untracked(rows: Rows, procs: Procs, v: dict[str, list[str]]) -> None:
    """(c): every supervisor is the recorded process of an instance that has one; every renter
    process descends from a supervisor."""
    sups, parents, renters = procs
    tracked: set[int] = set()
    for i in rows.instances.values():
        if i.status in HAS_PROCESS and i.run_handle:
            tracked.add(int(json.loads(i.run_handle).get("pid", -1)))
    for pid, (iid, _) in sups.items():
        if pid not in tracked:
            known = rows.instances.get(iid)
            v["untracked"].append(
                f"supervisor {pid} of {iid} runs; the instance is {known.status if known else 'unknown'}"
            )
    for pid, (uid, name) in renters.items():
        if supervisor_of(pid, sups, parents) is None:
            v["untracked"].append(
                f"renter process {pid} ({name}, uid {uid}) runs with no supervisor{orphan(pid, rows)}"
            )


def orphan(pid: int, rows: Rows) -> str:
    """What an orphaned renter process was: its command, age, and the run (from its log file)."""
    try:
        proc = psutil.Process(pid)
        info = f": {' '.join(proc.cmdline())[:120]!r}, ppid {proc.ppid()}, pgid {os.getpgid(pid)}, "
        info += f"up {time.time() - proc.create_time():.0f} s"
        log = os.readlink(f"/proc/{pid}/fd/1")
    except (psutil.Error, OSError):
        return ""
    key = log.rsplit("/runs/", 1)[-1].split("/", 1)[0]
    for inst in rows.instances.values():
        if inst.id == key or inst.job_id == key:
            history = " -> ".join(f"{e.to_status}@{e.at_ms % 100_000}" for e in rows.events.get(inst.id, []))
            info += f"; run of {inst.id} ({inst.status}: {history})"
    return info


def check_gpus(rows: Rows, v: dict[str, list[str]]) -> None:
    """(d)"""
    by_id = {a.id: a for a in rows.allocations}
    for g in rows.gpus_held:
        alloc = by_id.get(int(g.allocation_id or 0))
        owner = rows.instances.get(alloc.instance_id) if alloc is not None else None
        if owner is None or owner.status not in HAS_PROCESS:
            held_by = (
                "no such allocation" if alloc is None else f"instance {alloc.instance_id} {owner and owner.status}"
            )
            v["gpus"].append(f"GPU {g.idx} held by allocation {g.allocation_id} ({held_by})")


def check_ledger(rows: Rows, v: dict[str, list[str]]) -> None:
    """(e)"""
    per_tx: dict[int, int] = defaultdict(int)
    per_account: dict[int, int] = defaultdict(int)
    for e in rows.entries:
        per_tx[e.transaction_id] += e.amount_minor
        per_account[e.account_id] += e.amount_minor
    for tx in rows.transactions:
        if per_tx.get(tx.id, 0) != 0:
            v["ledger"].append(f"transaction {tx.id} ({tx.kind}) sums to {per_tx[tx.id]}")
    for acc in rows.accounts:
        if acc.balance_minor != per_account.get(acc.id, 0):
            v["ledger"].append(
                f"account {acc.id} ({acc.kind}) caches {acc.balance_minor}, "
                f"its entries sum to {per_account.get(acc.id, 0)}"
            )
    usage_tx = {tx.id for tx in rows.transactions if tx.kind == "usage"}
    # What each payer paid for usage (cash and vouchers) equals what its allocations were billed.
    owner_of = {acc.id: acc.billing_account_id for acc in rows.accounts if acc.kind in ("cash", "voucher")}
    debited: dict[int, int] = defaultdict(int)
    for e in rows.entries:
        if e.transaction_id in usage_tx and e.account_id in owner_of:
            debited[int(owner_of[e.account_id] or 0)] -= e.amount_minor
    billed: dict[int, int] = defaultdict(int)
    for a in rows.allocations:
        billed[a.billing_account_id] += a.billed_minor
    for payer in sorted(set(debited) | set(billed)):
        if debited.get(payer, 0) != billed.get(payer, 0):
            v["ledger"].append(
                f"billing account {payer}: usage debits {debited.get(payer, 0)}, "
                f"allocations billed {billed.get(payer, 0)}"
            )


def check(
    db_url: str, runs: list[RunSeen], procs: Procs, tol_ms: int, marks: dict[str, set[int]] | None = None
) -> dict[str, Any]:
    v: dict[str, list[str]] = {c: [] for c in CHECKS}
    engine = create_engine(db_url)
    try:
        with Session(engine) as s:
            rows = read_rows(s)
    finally:
        engine.dispose()
    marks = defaultdict(set, marks or {})
    for inst in rows.instances.values():  # what the commands left in the workspaces still there
        if inst.workspace:
            marks[inst.id] |= read_marks(Path(inst.workspace))
    billed_s, truth_s = check_billing(rows, runs, tol_ms, v, marks)
    check_stuck(rows, v)
    check_untracked(rows, procs, v)
    check_gpus(rows, v)
    check_ledger(rows, v)
    stats = {
        "instances": len(rows.instances),
        "instance_statuses": dict(sorted(Counter(i.status for i in rows.instances.values()).items())),
        "allocations": len(rows.allocations),
        "jobs": len(rows.jobs),
        "billed_seconds": billed_s,
        "ground_truth_seconds": truth_s,
        "runs_seen": len(runs),
        "runs_whose_command_ran": sum(1 for r in runs if r.command_first_ms is not None),
        "command_marks": sum(len(m) for m in marks.values()),
        "ledger_transactions": len(rows.transactions),
    }
    return {"violations": v, "stats": stats}
