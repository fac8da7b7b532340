"""Invoices and `danlu cost` on SQLite and PostgreSQL, on a fake clock (starts 2026-01-05 08:00 UTC)."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import func, select, text, update
from sqlalchemy.exc import DBAPIError

from danlu.accounts import teams
from danlu.accounts.payers import personal_account
from danlu.accounts.service import create_user
from danlu.billing import invoices, periods, vouchers
from danlu.billing import service as billing
from danlu.billing.invoice_render import render
from danlu.compute import instances, views
from danlu.compute.cost import explain_cost, spread
from danlu.compute.reconcile import meter_all, reconcile
from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.core.errors import Conflict, InvalidInput, NotFound
from danlu.db.models import (
    Account,
    AllocationRow,
    Invoice,
    LedgerEntry,
    LedgerTransaction,
    Setting,
    UsageRecordRow,
    User,
)
from tests.fakes import RecordingBackend


def at(y: int, m: int, d: int, h: int = 0) -> int:
    return int(datetime(y, m, d, h, tzinfo=UTC).timestamp() * 1000)


FEB_DUE = at(2026, 2, 4)  # January's end + the 3-day grace window
MAR_DUE = at(2026, 3, 4)


@pytest.fixture
def p(platform: Platform) -> Platform:
    platform.backend = RecordingBackend()
    billing.set_price(platform, "A100-80GB", "36.00")  # 1 fen per GPU-second
    billing.set_price(platform, "T4", "3.60")
    return platform


def renter(p: Platform, name: str, topup: str | None = "100.00") -> User:
    with p.db.write() as s:
        user, _ = create_user(s, name, p.clock.now_ms())
        s.expunge(user)
    if topup:
        billing.admin_topup(p, name, topup, key=f"seed-{name}")
    return user


def payer(p: Platform, user: User) -> int:
    with p.db.read() as s:
        return personal_account(s, user.id).id


def use(p: Platform, clock: FakeClock, user: User, seconds: int, gpus: int = 1) -> str:
    """``seconds`` of ``gpus`` A100s, metered and stopped (1 fen per GPU-second)."""
    inst = instances.rent(p, user, "A100-80GB", gpus, ["x"])
    clock.advance(seconds=seconds)
    meter_all(p)
    stop(p, user, inst.id)
    return inst.id


def stop(p: Platform, user: User, instance_id: str) -> None:
    """Stop and let the process end, so the GPUs are free again."""
    instances.stop(p, user, instance_id)
    backend = p.backend
    assert isinstance(backend, RecordingBackend)
    backend.die(backend.last())
    reconcile(p)


def test_the_current_month_is_a_draft_derived_from_usage_and_not_stored(p: Platform, fake_clock: FakeClock) -> None:
    alice = renter(p, "alice")
    inst = use(p, fake_clock, alice, 100, gpus=2)
    [draft] = invoices.list_invoices(p, payer(p, alice))
    assert (draft.period, draft.status, draft.number) == ("2026-01", "draft", None)
    [line] = draft.lines
    assert (line.instance_id, line.seconds, line.amount_minor, line.cash_minor) == (inst, 100, 200, 200)
    assert draft.total_minor == 200
    with p.db.read() as s:
        assert s.scalar(select(func.count(Invoice.id))) == 0
    # Someone with no usage still has this month's (empty) draft.
    [empty] = invoices.list_invoices(p, payer(p, renter(p, "bob")))
    assert (empty.period, empty.status, empty.lines) == ("2026-01", "draft", [])


def test_finalize_numbers_invoices_gaplessly_across_accounts(p: Platform, fake_clock: FakeClock) -> None:
    users = [renter(p, n) for n in ("ann", "ben", "cat")]
    for i, u in enumerate(users):
        use(p, fake_clock, u, 10 + i)
    fake_clock.set(FEB_DUE - 1)
    assert invoices.finalize_due(p, fake_clock.now_ms()) == 0  # the grace window is still open
    fake_clock.set(FEB_DUE)
    assert invoices.finalize_due(p, fake_clock.now_ms()) == 3
    finals = [invoices.list_invoices(p, payer(p, u))[-1] for u in users]
    assert sorted(v.number for v in finals if v.number) == [1, 2, 3]
    assert [v.status for v in finals] == ["final"] * 3
    assert [v.total_minor for v in finals] == [10, 11, 12]
    use(p, fake_clock, users[0], 5)  # February
    fake_clock.set(MAR_DUE)
    assert invoices.finalize_due(p, fake_clock.now_ms()) == 1
    assert invoices.list_invoices(p, payer(p, users[0]))[1].number == 4  # [0] is March's draft


def test_a_failed_finalisation_uses_no_number(
    p: Platform, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    ann, ben = renter(p, "ann"), renter(p, "ben")
    use(p, fake_clock, ann, 10)
    use(p, fake_clock, ben, 10)
    fake_clock.set(FEB_DUE)
    real = invoices._stored

    def crash(*a: object, **k: object) -> object:
        raise RuntimeError("crash after the number was taken")

    monkeypatch.setattr(invoices, "_stored", crash)
    with pytest.raises(RuntimeError):
        invoices.finalize(p, payer(p, ann), "2026-01")
    monkeypatch.setattr(invoices, "_stored", real)
    first = invoices.finalize(p, payer(p, ben), "2026-01")
    second = invoices.finalize(p, payer(p, ann), "2026-01")
    assert first is not None and second is not None
    assert (first.number, second.number) == (1, 2)


def test_finalising_twice_changes_nothing(p: Platform, fake_clock: FakeClock) -> None:
    ann = renter(p, "ann")
    use(p, fake_clock, ann, 30)
    fake_clock.set(FEB_DUE)
    once = invoices.finalize(p, payer(p, ann), "2026-01")
    twice = invoices.finalize(p, payer(p, ann), "2026-01")
    assert once == twice and once is not None and once.number == 1
    assert invoices.finalize_due(p, fake_clock.now_ms()) == 0
    assert invoices.admin_finalize(p, "2026-01") == 0
    with p.db.read() as s:
        assert s.scalar(select(func.count(Invoice.id))) == 1
        assert s.get(Setting, invoices.SEQ_KEY).value == "1"  # type: ignore[union-attr]
        assert s.scalar(select(func.count(UsageRecordRow.id)).where(UsageRecordRow.invoice_id.is_(None))) == 0


def test_an_open_month_cannot_be_finalised(p: Platform, fake_clock: FakeClock) -> None:
    ann = renter(p, "ann")
    use(p, fake_clock, ann, 30)
    with pytest.raises(Conflict) as exc:
        invoices.finalize(p, payer(p, ann), "2026-01")
    assert exc.value.code == "period_open"


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE invoices SET total_minor = 0",
        "DELETE FROM invoices",
        "UPDATE invoice_lines SET cash_minor = 0",
        "DELETE FROM invoice_lines",
        "INSERT INTO invoice_lines (invoice_id, instance_id, description, plan, seconds, price_per_hour_minor, "
        "gross_minor, discount_minor, voucher_minor, cash_minor, adjustment) "
        "SELECT id, 'i-0', 'sneaked in', 'on-demand', 1, 1, 1, 0, 0, 1, false FROM invoices",
    ],
)
def test_final_invoices_and_their_lines_are_immutable(p: Platform, fake_clock: FakeClock, statement: str) -> None:
    ann = renter(p, "ann")
    use(p, fake_clock, ann, 30)
    fake_clock.set(FEB_DUE)
    assert invoices.finalize_due(p, fake_clock.now_ms()) == 1
    with pytest.raises(DBAPIError, match="final"), p.db.write() as s:
        s.execute(text(statement))
    [final] = [v for v in invoices.list_invoices(p, payer(p, ann)) if v.status == "final"]
    assert final.total_minor == 30 and len(final.lines) == 1 and final.lines[0].cash_minor == 30


APPEND_ONLY = [
    "UPDATE ledger_entries SET amount_minor = 0",
    "DELETE FROM ledger_entries",
    "UPDATE ledger_transactions SET memo = 'rewritten'",
    "DELETE FROM ledger_transactions",
    "UPDATE usage_records SET amount_minor = 0",  # on the final invoice
    "DELETE FROM usage_records",
    "TRUNCATE invoice_lines",  # PostgreSQL's TRUNCATE runs no row trigger (issue 28, finding 6)
    "TRUNCATE invoices CASCADE",  # … and this one emptied usage_records and charges too
    "TRUNCATE ledger_entries",
    "TRUNCATE usage_records",
    "TRUNCATE charges",
    # An INSERT over an existing row: SQLite's REPLACE deleted the row in its way without its DELETE trigger
    # (an attacker's pass with the sqlite3 shell, issue 28); an upsert, on both databases.
    "INSERT OR REPLACE INTO ledger_entries (id, transaction_id, account_id, amount_minor) "
    "SELECT id, transaction_id, account_id, 999999 FROM ledger_entries",
    "REPLACE INTO ledger_transactions (id, idempotency_key, kind, memo, created_at_ms) "
    "SELECT id, idempotency_key, kind, 'forged', created_at_ms FROM ledger_transactions",
    "REPLACE INTO ledger_transactions (idempotency_key, kind, memo, created_at_ms) "
    "SELECT idempotency_key, kind, 'forged', created_at_ms FROM ledger_transactions",  # a new id, the same key
    "REPLACE INTO usage_records (allocation_id, start_ms, end_ms, amount_minor) "
    "SELECT allocation_id, start_ms, end_ms, 0 FROM usage_records",  # on the final invoice, under a new id
    "REPLACE INTO invoices (id, billing_account_id, period, status, number, currency, total_minor) "
    "SELECT id, billing_account_id, period, 'draft', NULL, currency, 0 FROM invoices",
    "INSERT INTO ledger_entries (id, transaction_id, account_id, amount_minor) "
    "SELECT id, transaction_id, account_id, 999999 FROM ledger_entries WHERE true "
    "ON CONFLICT (id) DO UPDATE SET amount_minor = excluded.amount_minor",
]


@pytest.mark.parametrize("statement", APPEND_ONLY)
def test_the_ledger_and_final_usage_are_append_only_in_the_database(
    p: Platform, fake_clock: FakeClock, statement: str
) -> None:
    """Money is only added to: an edit, a delete or a truncate of the ledger, or of usage already on
    a final invoice, is refused by the database itself (a direct SQL session, not the app's code)."""
    if statement.startswith("TRUNCATE") and p.db.engine.dialect.name != "postgresql":
        pytest.skip("SQLite has no TRUNCATE (its DELETE FROM runs the row triggers, tested above)")
    if "REPLACE" in statement and p.db.engine.dialect.name == "postgresql":
        pytest.skip("PostgreSQL has no REPLACE (its upsert runs the UPDATE triggers, tested below)")
    ann = renter(p, "ann")
    use(p, fake_clock, ann, 30)
    fake_clock.set(FEB_DUE)
    assert invoices.finalize_due(p, fake_clock.now_ms()) == 1
    with p.db.read() as s:
        before = [s.scalar(select(func.count()).select_from(text(t))) for t in ("ledger_entries", "usage_records")]
    with p.db.read() as s:
        money = s.execute(text("SELECT id, amount_minor FROM ledger_entries ORDER BY id")).all()
        books = s.execute(text("SELECT id, memo FROM ledger_transactions ORDER BY id")).all()
    with pytest.raises(DBAPIError, match=r"append-only|final"), p.db.write() as s:
        s.execute(text(statement))
    with p.db.read() as s:
        after = [s.scalar(select(func.count()).select_from(text(t))) for t in ("ledger_entries", "usage_records")]
        assert s.execute(text("SELECT id, amount_minor FROM ledger_entries ORDER BY id")).all() == money
        assert s.execute(text("SELECT id, memo FROM ledger_transactions ORDER BY id")).all() == books
        assert s.execute(text("SELECT status FROM invoices")).scalars().all() == ["final"]
    assert after == before and all(before)
    total, _ = billing.ledger_totals(p)
    assert total == 0


def test_usage_posted_after_its_month_is_final_is_an_adjustment_on_the_next_draft(
    p: Platform, fake_clock: FakeClock
) -> None:
    ann = renter(p, "ann")
    use(p, fake_clock, ann, 30)
    late = instances.rent(p, ann, "T4", 1, ["x"])  # 0.1 fen per second
    started = fake_clock.now_ms()
    fake_clock.set(FEB_DUE)
    ba = payer(p, ann)
    jan = invoices.finalize(p, ba, "2026-01")  # the control loop was down: `late` is not metered yet
    assert jan is not None and jan.total_minor == 30
    # The run was lost in January, at its last sighting; the meter posts it now, after January closed.
    with p.db.write() as s:
        s.execute(
            update(AllocationRow).where(AllocationRow.instance_id == late.id).values(ended_at_ms=started + 1_000_000)
        )
    meter_all(p)
    by_period = {v.period: v for v in invoices.list_invoices(p, ba)}
    assert by_period["2026-01"].lines == jan.lines  # the final invoice is as it was
    [adj] = by_period["2026-02"].lines
    assert adj.adjustment and adj.description.startswith("adjustment for 2026-01")
    assert (adj.instance_id, adj.seconds, adj.amount_minor) == (late.id, 1000, 100)
    fake_clock.set(MAR_DUE)
    assert invoices.finalize_due(p, fake_clock.now_ms()) == 1
    feb = invoices.get_invoice(p, ba, "2026-02")
    assert (feb.status, feb.number, feb.total_minor, feb.lines[0].adjustment) == ("final", 2, 100, True)


def _usage_debits(p: Platform, ba_id: int) -> tuple[int, int]:
    """(cash, vouchers) the payer paid for usage, from the ledger itself."""
    with p.db.read() as s:
        rows = s.execute(
            select(Account.kind, func.sum(LedgerEntry.amount_minor))
            .join(LedgerEntry, LedgerEntry.account_id == Account.id)
            .join(LedgerTransaction, LedgerTransaction.id == LedgerEntry.transaction_id)
            .where(Account.billing_account_id == ba_id, LedgerTransaction.kind == "usage")
            .group_by(Account.kind)
        ).all()
    by_kind = {k: -int(v) for k, v in rows}
    return by_kind.get("cash", 0), by_kind.get("voucher", 0)


def test_invoices_equal_the_ledger(p: Platform, fake_clock: FakeClock) -> None:
    ann = renter(p, "ann")
    campaign = vouchers.create_campaign(
        p, vouchers.CampaignSpec("welcome", 25, "manual", valid_from_ms=fake_clock.now_ms())
    )
    vouchers.grant_by_name(p, campaign.name, payer(p, ann))
    use(p, fake_clock, ann, 20, gpus=2)  # 40 fen: 25 by the voucher, 15 cash
    fake_clock.set(at(2026, 1, 31, 23))
    use(p, fake_clock, ann, 7)
    fake_clock.set(FEB_DUE)
    invoices.finalize_due(p, fake_clock.now_ms())
    use(p, fake_clock, ann, 11)  # February's draft
    listed = invoices.list_invoices(p, payer(p, ann))
    assert [v.status for v in listed] == ["draft", "final"]
    cash, voucher = _usage_debits(p, payer(p, ann))
    assert (cash, voucher) == (15 + 7 + 11, 25)
    assert sum(v.total_minor for v in listed) == cash + voucher
    assert sum(v.total("cash_minor") for v in listed) == cash
    assert sum(v.total("voucher_minor") for v in listed) == voucher


def test_cost_lines_add_up_to_the_instance_cost(p: Platform, fake_clock: FakeClock) -> None:
    ann = renter(p, "ann")
    inst = instances.rent(p, ann, "A100-80GB", 2, ["x"])
    fake_clock.advance(seconds=40)
    meter_all(p)
    stop(p, ann, inst.id)
    instances.start(p, ann, inst.id)
    fake_clock.advance(seconds=15)
    meter_all(p)
    fake_clock.advance(seconds=4.5)  # live, not yet posted
    cost = explain_cost(p, ann, inst.id)
    assert cost.cost_minor == views.show(p, ann, inst.id).cost_minor == 2 * (40 + 15 + 4)
    assert [(line.seconds, line.amount_minor, line.posted) for line in cost.lines] == [
        (40, 80, True),
        (15, 30, True),
        (4, 8, False),
    ]
    data = cost.as_dict()
    assert data["cost"] == "1.18"
    pending = data["lines"][-1]  # type: ignore[index]
    assert (pending["vouchers"], pending["cash"], pending["description"]) == ("pending", "pending", "not yet posted")


def test_another_users_instance_has_no_cost_to_show(p: Platform, fake_clock: FakeClock) -> None:
    ann, ben = renter(p, "ann"), renter(p, "ben")
    inst = use(p, fake_clock, ann, 10)
    with pytest.raises(NotFound) as exc:
        explain_cost(p, ben, inst)
    assert exc.value.code == "instance_not_found"


def test_team_invoices_are_the_teams_and_hidden_from_outsiders(p: Platform, fake_clock: FakeClock) -> None:
    ann, ben, eve = renter(p, "ann", None), renter(p, "ben", None), renter(p, "eve")
    teams.create_team(p, ann, "lab")
    teams.add_member(p, ann, "lab", "ben", "viewer")
    billing.admin_topup(p, "lab", "10.00", key="lab-seed", team=True)
    inst = instances.rent(p, ann, "A100-80GB", 1, ["x"], team="lab")
    fake_clock.advance(seconds=12)
    meter_all(p)
    [team_draft] = invoices.invoices_of(p, ben, "lab")  # a viewer reads the team's invoices
    assert (team_draft.account_name, team_draft.account_kind, team_draft.total_minor) == ("lab", "team", 12)
    assert team_draft.lines[0].instance_id == inst.id
    assert invoices.invoices_of(p, ann)[0].total_minor == 0  # ann's personal account paid nothing
    with pytest.raises(NotFound):
        invoices.invoices_of(p, eve, "lab")
    with pytest.raises(NotFound):
        explain_cost(p, eve, inst.id)


def test_periods_are_months_in_the_deployments_zone() -> None:
    shanghai, utc = ZoneInfo("Asia/Shanghai"), ZoneInfo("UTC")
    late_jan_utc = at(2026, 1, 31, 20)  # 04:00 on 1 February in Shanghai
    assert periods.record_period(late_jan_utc - 1000, late_jan_utc, utc) == "2026-01"
    assert periods.record_period(late_jan_utc - 1000, late_jan_utc, shanghai) == "2026-02"
    # An interval ending exactly at midnight is the old month's.
    assert periods.record_period(at(2026, 1, 31, 23), at(2026, 2, 1), utc) == "2026-01"
    start, end = periods.period_bounds("2026-03", ZoneInfo("Europe/Berlin"))
    assert (end - start) // 3_600_000 == 31 * 24 - 1  # the spring-forward day has 23 hours
    assert periods.period_bounds("2026-12", utc)[1] == at(2027, 1, 1)


def test_spread_keeps_the_total() -> None:
    from fractions import Fraction

    assert spread(10, [Fraction(1), Fraction(1), Fraction(1)]) == [3, 4, 3]
    assert spread(7, [Fraction(0), Fraction(0)]) == [7, 0]


def test_exports_carry_the_invoice(p: Platform, fake_clock: FakeClock) -> None:
    ann = renter(p, "ann")
    inst = use(p, fake_clock, ann, 100, gpus=2)
    fake_clock.set(FEB_DUE)
    invoices.finalize_due(p, fake_clock.now_ms())
    view = invoices.invoice_of(p, ann, "2026-01")
    assert json.loads(render(view, "json"))["total"] == "2.00"
    rows = list(csv.DictReader(io.StringIO(render(view, "csv"))))
    assert [r["amount"] for r in rows] == ["2.00", "2.00"] and rows[-1]["description"] == "TOTAL"
    page = render(view, "html")
    for needed in ("No. 1", "ann", "2026-01", inst, "CNY", "2.00", "<table"):
        assert needed in page
    assert "http" not in page and "<script" not in page and "<link" not in page  # self-contained
    draft = render(invoices.invoice_of(p, ann, "2026-02"), "html")
    assert "DRAFT" in draft and "No usage" in draft
    # The statement in 简体中文 (issue 28, finding 12): the same figures, its words Chinese.
    zh = render(view, "html", "zh_CN")
    for needed in ('<html lang="zh-CN">', "发票 编号 1", "付款方", "ann（个人账户）", "2026-01（自然月）", "已定稿",
                   "计费时长", "合计（CNY）", inst, "2.00"):  # fmt: skip
        assert needed in zh, needed
    for english in ("Billed to", "Invoice", "calendar month", "List price", "nothing further is due"):
        assert english not in zh, english
    assert "草稿：尚未定稿" in render(invoices.invoice_of(p, ann, "2026-02"), "html", "zh_CN")
    with pytest.raises(NotFound):
        invoices.invoice_of(p, ann, "2025-12")
    with pytest.raises(InvalidInput, match="YYYY-MM"):
        invoices.invoice_of(p, ann, "2026-13")


def test_concurrent_finalisations_share_one_gapless_sequence(p: Platform, fake_clock: FakeClock) -> None:
    from concurrent.futures import ThreadPoolExecutor

    users = [renter(p, f"u{i}") for i in range(4)]
    for u in users:
        use(p, fake_clock, u, 3)
    fake_clock.set(FEB_DUE)
    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(lambda u: invoices.finalize(p, payer(p, u), "2026-01"), users * 2))
    assert sorted({v.number for v in done if v is not None}) == [1, 2, 3, 4]  # type: ignore[type-var]


def test_the_control_loop_finalises_due_invoices(p: Platform, fake_clock: FakeClock) -> None:
    from danlu.server.loop import ControlLoop

    ann = renter(p, "ann")
    use(p, fake_clock, ann, 9)
    loop = ControlLoop(p)
    fake_clock.set(FEB_DUE + 1000)
    loop.run_once()
    [current, jan] = invoices.list_invoices(p, payer(p, ann))
    assert (current.period, current.status) == ("2026-02", "draft")
    assert (jan.period, jan.status, jan.number, jan.total_minor) == ("2026-01", "final", 1, 9)


def test_a_removed_instance_still_shows_and_explains_its_cost(p: Platform, fake_clock: FakeClock) -> None:
    """`danlu show ID` and `danlu cost ID` after `danlu rm ID` answered instance_not_found, while
    `ps --all` and the invoice listed it (issue 28, finding 11). They read it; nothing can change it,
    and another renter still gets not found."""
    ann, eve = renter(p, "ann"), renter(p, "eve")
    iid = use(p, fake_clock, ann, 30)
    instances.destroy(p, ann, iid)
    shown = views.show(p, ann, iid)
    assert shown.status == "destroyed" and shown.billed_seconds == 30
    assert explain_cost(p, ann, iid).cost_minor == 30
    for attempt in (lambda: instances.start(p, ann, iid), lambda: instances.stop(p, ann, iid)):
        with pytest.raises(NotFound):
            attempt()
    for read in (lambda: views.show(p, eve, iid), lambda: explain_cost(p, eve, iid)):
        with pytest.raises(NotFound):
            read()


def test_the_statement_says_billed_time_not_gpu_time_and_a_terms_length_in_words(
    p: Platform, fake_clock: FakeClock
) -> None:
    """Issue 28, finding 11: the column "GPU time (s)" held an allocation's wall seconds (2 GPUs for 100 s
    read 100, not 200 GPU-seconds), its total added them to package terms, and a package line read 604800
    and its refund −604790. The statement now says billed time, in words, per line; a term's line says so."""
    from danlu.billing.invoice_view import InvoiceView, LineView
    from danlu.i18n.catalogs import translations

    ann = renter(p, "ann")
    use(p, fake_clock, ann, 3_725, gpus=2)
    fake_clock.set(FEB_DUE)
    invoices.finalize_due(p, fake_clock.now_ms())
    page = render(invoices.invoice_of(p, ann, "2026-01"), "html")
    assert "GPU time (s)" not in page and "Billed time" in page
    assert '<td class="n">1 h 2 min 5 s</td>' in page  # 3,725 s of the allocation, whatever its GPU count
    assert "× GPUs × price per GPU-hour" in page  # the note says how the time is priced
    zh = render(invoices.invoice_of(p, ann, "2026-01"), "html", "zh_CN", translations("zh_CN").gettext)
    assert "计费时长" in zh and '<td class="n">1小时2分5秒</td>' in zh
    assert "<td>2× A100-80GB 按量，实例 i-" in zh  # its line in Chinese too (finding 12), the figures the same
    week = LineView("h-1", "package-week of 1 x A100-80GB", "package-week", 604_800, 3_600, 1, 0, 0, 1)
    refund = LineView("h-1", "refund of package-week", "package-week", -604_790, 3_600, -1, 0, 0, -1)
    held = InvoiceView(1, "ann", "personal", "2026-01", "draft", None, "CNY", [week, refund])
    terms = render(held, "html")
    assert '<td class="n">7 d (term)</td>' in terms and '<td class="n">−6 d 23 h 59 min 50 s (unused)</td>' in terms
    assert "604800" not in terms and "604790" not in terms and "-10" not in terms  # nor a sum of the two
    assert "7天（期限）" in render(held, "html", "zh_CN")
    assert [r["seconds"] for r in csv.DictReader(io.StringIO(render(held, "csv")))][:2] == ["604800", "-604790"]
