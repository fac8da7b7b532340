"""Issue 9: a Hypothesis state machine over the money paths, on SQLite and PostgreSQL.

Steps: top up a person or a team, grant a voucher, rent (personally or on the team), advance the
clock, meter, stop, start, preempt with notice, let a run end, expire vouchers (the meter pass does
it when their time comes), finalise invoices. After every step:

* every ledger transaction sums to zero and every balance equals its entries;
* no cash balance is below minus its credit limit, no voucher below zero;
* each allocation's usage records tile it with no gap or overlap, its billed seconds are the sum
  of their lengths and its billed amount the sum of their amounts;
* what each payer's cash and vouchers paid for usage equals what its allocations were billed;
* a voucher's value is granted once and leaves only by spending or expiry.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from danlu.accounts import teams
from danlu.accounts.service import create_user
from danlu.billing import invoices, terms, vouchers
from danlu.billing import service as billing
from danlu.compute import holds, instances
from danlu.compute.reconcile import meter_all, reconcile
from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.core.errors import DanluError
from danlu.db.models import (
    Account,
    AllocationRow,
    BillingAccount,
    ChargeRow,
    Gpu,
    Hold,
    Instance,
    Invoice,
    InvoiceLine,
    LedgerEntry,
    LedgerTransaction,
    UsageRecordRow,
    User,
)
from tests.conftest import end_runs, fresh_pg_schema, make_platform
from tests.fakes import RecordingBackend

_RUN = itertools.count()


def check_books(p: Platform) -> None:
    with p.db.read() as s:
        per_tx = dict(
            s.execute(
                select(LedgerEntry.transaction_id, func.sum(LedgerEntry.amount_minor)).group_by(
                    LedgerEntry.transaction_id
                )
            ).all()
        )
        assert all(v == 0 for v in per_tx.values()), {k: v for k, v in per_tx.items() if v}
        assert len(per_tx) == s.execute(select(func.count(LedgerTransaction.id))).scalar_one()
        sums = dict(
            s.execute(
                select(LedgerEntry.account_id, func.sum(LedgerEntry.amount_minor)).group_by(LedgerEntry.account_id)
            ).all()
        )
        credit = dict(s.execute(select(BillingAccount.id, BillingAccount.credit_limit_minor)).all())
        for acct in s.scalars(select(Account)):
            assert acct.balance_minor == sums.get(acct.id, 0), f"account {acct.id} ({acct.kind})"
            if acct.kind == "cash":
                assert acct.balance_minor >= -credit[acct.billing_account_id]
            if acct.kind == "voucher":
                assert acct.balance_minor >= 0
        records: dict[int, list[UsageRecordRow]] = defaultdict(list)
        for r in s.scalars(select(UsageRecordRow).order_by(UsageRecordRow.allocation_id, UsageRecordRow.start_ms)):
            records[r.allocation_id].append(r)
        billed_by_payer: dict[int, int] = defaultdict(int)
        for a in s.scalars(select(AllocationRow)):
            rs = records.get(a.id, [])
            edge = a.started_at_ms
            for r in rs:
                assert r.start_ms == edge, f"allocation {a.id}: a gap or overlap at {edge}"
                assert r.amount_minor == r.gross_minor - r.discount_minor and 0 <= r.voucher_minor <= r.amount_minor
                edge = r.end_ms
            assert edge == a.billed_until_ms
            assert a.billed_minor == sum(r.amount_minor for r in rs)
            billed_by_payer[a.billing_account_id] += a.billed_minor
        owner = {a.id: (a.billing_account_id, a.kind) for a in s.scalars(select(Account))}
        usage_tx = set(s.scalars(select(LedgerTransaction.id).where(LedgerTransaction.kind == "usage")))
        paid: dict[int, int] = defaultdict(int)
        for e in s.scalars(select(LedgerEntry).where(LedgerEntry.transaction_id.in_(usage_tx))):
            ba, kind = owner[e.account_id]
            if kind in ("cash", "voucher"):
                assert ba is not None
                paid[ba] -= e.amount_minor
        assert dict(paid) == {k: v for k, v in billed_by_payer.items() if v}
        # Packages and reservations: what left (or came back to) each payer's cash in their purchase and
        # refund transactions is exactly their charges, and each hold was paid once, what it says.
        hold_kinds = ["hold", "refund"]
        hold_tx = {
            int(i): str(k)
            for i, k in s.execute(
                select(LedgerTransaction.id, LedgerTransaction.kind).where(LedgerTransaction.kind.in_(hold_kinds))
            ).all()
        }
        moved: dict[int, int] = defaultdict(int)
        for e in s.scalars(select(LedgerEntry).where(LedgerEntry.transaction_id.in_(list(hold_tx)))):
            ba, kind = owner[e.account_id]
            if kind == "cash":
                assert ba is not None
                moved[ba] -= e.amount_minor
        charged: dict[int, int] = defaultdict(int)
        for c in s.scalars(select(ChargeRow)):
            assert hold_tx[c.transaction_id] == ("hold" if c.kind == "purchase" else "refund")
            charged[c.billing_account_id] += c.amount_minor
        assert {k: v for k, v in moved.items() if v} == {k: v for k, v in charged.items() if v}
        for h in s.scalars(select(Hold)):
            bought = s.scalars(select(ChargeRow).where(ChargeRow.hold_id == h.id, ChargeRow.kind == "purchase")).one()
            assert bought.amount_minor == h.paid_minor
            refunded = s.scalars(select(ChargeRow).where(ChargeRow.hold_id == h.id, ChargeRow.kind == "refund")).all()
            assert len(refunded) == (1 if h.state == "cancelled" else 0)
            assert all(0 <= -r.amount_minor <= h.paid_minor for r in refunded)
            held = s.execute(select(func.count(Gpu.id)).where(Gpu.hold_id == h.id)).scalar_one()
            assert held == (h.gpu_count if h.state == "active" else 0)
        # Invoices (final and drafts) add up to everything the payers paid: usage and charges.
        for ba_id in {*billed_by_payer, *charged}:
            assert invoiced(s, ba_id) == billed_by_payer.get(ba_id, 0) + charged.get(ba_id, 0), ba_id


def invoiced(s: Session, ba_id: int) -> int:
    final = s.execute(
        select(func.coalesce(func.sum(InvoiceLine.gross_minor - InvoiceLine.discount_minor), 0))
        .join(Invoice, Invoice.id == InvoiceLine.invoice_id)
        .where(Invoice.billing_account_id == ba_id)
    ).scalar_one()
    pending = s.execute(
        select(func.coalesce(func.sum(UsageRecordRow.amount_minor), 0))
        .join(AllocationRow, AllocationRow.id == UsageRecordRow.allocation_id)
        .where(AllocationRow.billing_account_id == ba_id, UsageRecordRow.invoice_id.is_(None))
    ).scalar_one()
    charges = s.execute(
        select(func.coalesce(func.sum(ChargeRow.amount_minor), 0)).where(
            ChargeRow.billing_account_id == ba_id, ChargeRow.invoice_id.is_(None)
        )
    ).scalar_one()
    return int(final) + int(pending) + int(charges)


class MoneyMachine(RuleBasedStateMachine):
    """Each example runs on a new database (SQLite file or PostgreSQL schema), so a failing
    example replays exactly."""

    postgres = False
    tmp: Path
    totals: dict[str, int] = {}

    def __init__(self) -> None:
        super().__init__()
        run = next(_RUN)
        self.stack = contextlib.ExitStack()
        url = self.stack.enter_context(fresh_pg_schema()) if self.postgres else f"sqlite:///{self.tmp / f'm{run}.db'}"
        self.clock = FakeClock()
        self.p, _ = make_platform(url, self.tmp / f"data{run}", self.clock)
        self.p.backend = RecordingBackend()
        billing.set_price(self.p, "T4", "3.60", "1.80")  # 0.1 fen per second
        billing.set_price(self.p, "A100-80GB", "36.00")  # 1 fen per second
        terms.set_term(self.p, "package-day", "10", cancel_fee="15")  # T4: 77.76 a day; A100: 777.60
        terms.set_term(self.p, "reserved-1m", "30")
        self.holds: list[tuple[User, str]] = []
        self.users: list[User] = []
        self.team: str | None = None
        self.instances: list[tuple[User, str]] = []
        self.campaign = f"gift{run}"

    @initialize()
    def setup(self) -> None:
        suffix = next(_RUN)
        with self.p.db.write() as s:
            for name in ("ann", "bob"):
                u, _ = create_user(s, f"{name}{suffix}", self.clock.now_ms())
                s.expunge(u)
                self.users.append(u)
        self.team = f"lab{suffix}"
        teams.create_team(self.p, self.users[0], self.team)
        teams.add_member(self.p, self.users[0], self.team, self.users[1].name, "member")
        billing.admin_topup(self.p, self.team, "2000.00", None, team=True)  # enough for a few packages
        vouchers.create_campaign(
            self.p,
            vouchers.CampaignSpec(
                name=self.campaign,
                amount_minor=500,
                trigger="manual",
                valid_from_ms=self.clock.now_ms(),
                valid_for_ms=3_600_000,
                max_per_account=1000,
            ),
        )

    @rule(who=st.integers(0, 1), amount=st.one_of(st.integers(1, 300), st.just(100_000)), team=st.booleans())
    def topup(self, who: int, amount: int, team: bool) -> None:
        name = self.team if team and self.team else self.users[who].name
        billing.admin_topup(self.p, name, f"{amount // 100}.{amount % 100:02d}", None, team=team)

    @rule(who=st.integers(0, 1), team=st.booleans())
    def grant_voucher(self, who: int, team: bool) -> None:
        with self.p.db.read() as s:
            payer = teams.resolve_payer(s, self.users[who], self.team if team else None, spend=False)
        vouchers.grant_by_name(self.p, self.campaign, payer)

    @rule(who=st.integers(0, 1), model=st.sampled_from(["T4", "A100-80GB"]), team=st.booleans())
    def rent(self, who: int, model: str, team: bool) -> None:
        try:
            view = instances.rent(self.p, self.users[who], model, 1, ["x"], team=self.team if team else None)
        except DanluError:
            return  # no GPU free, or not enough money: refused, nothing changed (the invariants check it)
        self.instances.append((self.users[who], view.id))

    @rule(
        who=st.integers(0, 1),
        term=st.sampled_from(["package-day", "reserved-1m"]),
        model=st.sampled_from(["T4", "A100-80GB"]),
        team=st.booleans(),
        on_expiry=st.sampled_from(["stop", "on-demand"]),
        cancel_after=st.none() | st.integers(0, 90_000),
        data=st.data(),
    )
    def buy_hold(
        self, who: int, term: str, model: str, team: bool, on_expiry: str, cancel_after: int | None, data: st.DataObject
    ) -> None:
        """Buy a package or reservation; perhaps rent on it, and perhaps cancel it some time later."""
        try:
            h = holds.buy(self.p, self.users[who], term, model, 1, on_expiry, team=self.team if team else None)
        except DanluError as exc:  # no GPU free, or not enough money: refused, nothing changed
            assert exc.code in ("no_capacity", "insufficient_funds"), exc
            return
        self.holds.append((self.users[who], h.id))
        if data.draw(st.booleans()):
            self.rent(who, model, team)
        if cancel_after is not None:
            self.clock.advance(seconds=cancel_after)
            self.cancel_hold(data, 0)

    @rule(data=st.data(), wait=st.integers(0, 700))
    def cancel_hold_later(self, data: st.DataObject, wait: int) -> None:
        self.cancel_hold(data, wait)

    def cancel_hold(self, data: st.DataObject, wait: int) -> None:
        if not self.holds:
            return
        user, hold_id = data.draw(st.sampled_from(self.holds))
        try:
            q = holds.cancel_quote(self.p, user, hold_id)
            self.clock.advance(seconds=wait)  # confirmed later, or too late (quotes last 600 s)
            done = holds.cancel(self.p, user, hold_id, q.quote_id)
        except DanluError as exc:  # already ended, the quote expired, or a member's own hold only
            assert exc.code in ("hold_not_active", "quote_expired", "team_role_required"), exc
            return
        assert 0 <= done.refunded_minor <= q.refund_minor  # never more than quoted

    @rule(seconds=st.integers(1, 400), ms=st.integers(0, 999))
    def advance(self, seconds: int, ms: int) -> None:
        self.clock.advance(seconds=seconds, ms=ms)

    @rule()
    def meter(self) -> None:
        meter_all(self.p)

    @rule(data=st.data())
    def stop(self, data: st.DataObject) -> None:
        if self.instances:
            user, inst = data.draw(st.sampled_from(self.instances))
            try:
                instances.stop(self.p, user, inst)
            except DanluError:
                pass

    @rule(data=st.data())
    def start(self, data: st.DataObject) -> None:
        if self.instances:
            user, inst = data.draw(st.sampled_from(self.instances))
            try:
                instances.start(self.p, user, inst)
            except DanluError:
                pass

    @rule(data=st.data())
    def preempt(self, data: st.DataObject) -> None:
        if not self.instances:
            return
        _user, inst_id = data.draw(st.sampled_from(self.instances))
        with self.p.db.write() as s:
            inst = s.get(Instance, inst_id, with_for_update=True)
            if inst is None or inst.status != "running":
                return
            instances.begin_notice(self.p, s, inst, self.clock.now_ms() + 60_000, "preempted (test)")

    @rule()
    def runs_end(self) -> None:
        backend = self.p.backend
        assert isinstance(backend, RecordingBackend)
        for handle in backend.alive():
            backend.die(handle, 0, self.clock.now_ms())
        reconcile(self.p)

    @rule()
    def close_the_month(self) -> None:
        """The clock moves past the month's end and the grace window: the loop's work finalises
        invoices (running instances are billed for the whole jump, or until the money ends)."""
        tz = ZoneInfo(self.p.settings.timezone)
        now = datetime.fromtimestamp(self.clock.now_ms() / 1000, tz)
        first = (now.replace(day=1, hour=0, minute=0, second=0, microsecond=0) + timedelta(days=32)).replace(day=1)
        self.clock.set(int(first.timestamp()) * 1000 + self.p.settings.invoice_grace_s * 1000 + 1000)
        meter_all(self.p)
        invoices.finalize_due(self.p, self.clock.now_ms())

    @invariant()
    def books_balance(self) -> None:
        check_books(self.p)

    def teardown(self) -> None:
        with self.p.db.read() as s:  # what this example exercised (the test asserts the runs did something)
            for kind, n in s.execute(
                select(LedgerTransaction.kind, func.count(LedgerTransaction.id)).group_by(LedgerTransaction.kind)
            ).all():
                self.totals[kind] = self.totals.get(kind, 0) + n
            self.totals["voucher_paid"] = self.totals.get("voucher_paid", 0) + int(
                s.execute(select(func.sum(UsageRecordRow.voucher_minor))).scalar_one() or 0
            )
            self.totals["final"] = self.totals.get("final", 0) + int(
                s.execute(select(func.count(Invoice.id)).where(Invoice.status == "final")).scalar_one()
            )
        end_runs(self.p)
        self.p.db.engine.dispose()
        self.stack.close()


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_money_state_machine(db: str, tmp_path: Path) -> None:
    MoneyMachine.postgres = db == "postgresql"
    MoneyMachine.tmp = tmp_path
    MoneyMachine.totals = {}
    run_state_machine_as_test(
        MoneyMachine,
        settings=settings(
            max_examples=10 if db == "postgresql" else 25,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            derandomize=True,  # the same examples in every run, so the sanity check below is stable
        ),
    )
    totals = MoneyMachine.totals  # the machine really moved money (else it proves nothing)
    assert totals.get("usage", 0) > 0 and totals.get("voucher", 0) > 0, totals
    assert totals.get("voucher_paid", 0) > 0 and totals.get("final", 0) > 0, totals
    assert totals.get("hold", 0) > 0 and totals.get("refund", 0) > 0, totals
