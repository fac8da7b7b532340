"""Packages and reserved commitments (issue 9 part 2), through the services on SQLite and
PostgreSQL, on a fake clock: prepaid at the operator's discount, GPUs kept for the account while
its instance is stopped, expiry that stops or goes on demand at exactly the end, early cancellation
refunded pro rata less the fee (a package) or less the discount received (a reservation), all on
the invoice and in balanced books."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import func, select

from danlu.accounts import teams
from danlu.accounts.payers import personal_account
from danlu.billing import budgets, invoices, terms
from danlu.billing import service as billing
from danlu.compute import allocations, holds, instances
from danlu.compute.reconcile import meter_all, reconcile
from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.core.errors import Conflict, Forbidden, InsufficientFunds, InvalidInput, NoCapacity, NotFound
from danlu.db.models import AllocationRow, Gpu, Hold, UsageRecordRow
from tests.billing.test_metering import renter
from tests.billing.test_money_machine import check_books
from tests.fakes import RecordingBackend

WEEK_S = 7 * 86_400
# 36.00 per GPU-hour is 1 fen per GPU-second: a week of one A100 is 6048.00 on demand, 4838.40 at -20 %.
WEEK_LIST, WEEK_PRICE = 604_800, 483_840


@pytest.fixture
def p(platform: Platform) -> Platform:
    platform.backend = RecordingBackend()
    billing.set_price(platform, "A100-80GB", "36.00")
    billing.set_price(platform, "T4", "3.60")
    terms.set_term(platform, "package-week", "20", cancel_fee="10")
    terms.set_term(platform, "reserved-1m", "30")
    return platform


def end_all(p: Platform, clock: FakeClock) -> None:
    """Every run's process ends now and the loop sees it."""
    backend = p.backend
    assert isinstance(backend, RecordingBackend)
    for handle in backend.alive():
        backend.die(handle, 0, clock.now_ms())
    reconcile(p)


def free_a100(p: Platform) -> int:
    with p.db.read() as s:
        return allocations.capacity(s, "A100-80GB")[0]


def balance(p: Platform, user: object) -> int:
    return billing.balance(p, user).balance_minor  # type: ignore[arg-type]


def test_a_package_is_prepaid_keeps_its_gpu_while_stopped_and_its_rentals_cost_nothing_more(
    p: Platform, fake_clock: FakeClock
) -> None:
    ann = renter(p, "ann", "5000.00")
    bob = renter(p, "bob", "100.00")
    q = holds.quote(p, ann, "package-week", "A100-80GB", 1)
    assert (q.list_minor, q.amount_minor, q.discount_bp) == (WEEK_LIST, WEEK_PRICE, 2000)
    assert "10% fee" in q.rule and balance(p, ann) == 500_000  # a quote changes nothing
    h = holds.buy(p, ann, "package-week", "A100-80GB", 1)
    assert (h.state, h.paid_minor, h.ends_at_ms - h.starts_at_ms) == ("active", WEEK_PRICE, WEEK_S * 1000)
    assert balance(p, ann) == 500_000 - WEEK_PRICE
    assert free_a100(p) == 1  # of 2: one is kept for ann
    inst = instances.rent(p, ann, "A100-80GB", 1, ["train"])
    assert inst.hold_id == h.id and inst.price_per_hour_minor == 0
    assert free_a100(p) == 1  # it runs on the held GPU, not the free one
    fake_clock.advance(seconds=3600)
    meter_all(p)
    assert balance(p, ann) == 500_000 - WEEK_PRICE  # an hour on the package: nothing more
    instances.stop(p, ann, inst.id)
    end_all(p, fake_clock)
    assert instances.show(p, ann, inst.id).status == "stopped"
    # Stopped, the GPU stays ann's: bob gets the other one, and then none.
    instances.rent(p, bob, "A100-80GB", 1, ["x"])
    with pytest.raises(NoCapacity):
        instances.rent(p, bob, "A100-80GB", 1, ["y"])
    again = instances.start(p, ann, inst.id)
    assert again.hold_id == h.id
    with p.db.read() as s:
        seconds = s.execute(
            select(func.sum(UsageRecordRow.end_ms - UsageRecordRow.start_ms))
            .join(AllocationRow, AllocationRow.id == UsageRecordRow.allocation_id)
            .where(AllocationRow.hold_id == h.id)
        ).scalar_one()
        charged = s.execute(
            select(func.sum(UsageRecordRow.amount_minor))
            .join(AllocationRow, AllocationRow.id == UsageRecordRow.allocation_id)
            .where(AllocationRow.hold_id == h.id)
        ).scalar_one()
    assert seconds == 3_600_000 and charged == 0  # the hour is recorded, at no charge
    check_books(p)


def test_at_expiry_an_instance_on_a_package_stops_at_exactly_its_end(p: Platform, fake_clock: FakeClock) -> None:
    ann = renter(p, "ann", "5000.00")
    h = holds.buy(p, ann, "package-week", "A100-80GB", 1, on_expiry="stop")
    inst = instances.rent(p, ann, "A100-80GB", 1, ["train"])
    fake_clock.advance(seconds=WEEK_S + 30)  # the loop comes 30 s after the end
    report = meter_all(p)
    assert report.holds_expired == 1
    view = instances.show(p, ann, inst.id)
    assert view.status == "stopping" and "expired" in view.status_reason
    with p.db.read() as s:
        alloc = s.scalars(select(AllocationRow).where(AllocationRow.instance_id == inst.id)).one()
        assert alloc.ended_at_ms == h.ends_at_ms  # billing ended at the end, not when the loop came
        assert s.get(Hold, h.id).state == "expired"  # type: ignore[union-attr]
        assert s.scalars(select(Gpu).where(Gpu.hold_id == h.id)).all() == []
    assert balance(p, ann) == 500_000 - WEEK_PRICE
    check_books(p)


def test_at_expiry_an_instance_on_a_package_goes_on_demand_from_exactly_its_end(
    p: Platform, fake_clock: FakeClock
) -> None:
    ann = renter(p, "ann", "5000.00")
    h = holds.buy(p, ann, "package-week", "A100-80GB", 1, on_expiry="on-demand")
    inst = instances.rent(p, ann, "A100-80GB", 1, ["train"])
    fake_clock.advance(seconds=WEEK_S + 100)
    meter_all(p)
    view = instances.show(p, ann, inst.id)
    assert view.status == "running" and view.hold_id is None and view.price_per_hour_minor == 3600
    with p.db.read() as s:
        rows = s.scalars(
            select(AllocationRow).where(AllocationRow.instance_id == inst.id).order_by(AllocationRow.id)
        ).all()
        assert [(a.plan, a.started_at_ms) for a in rows] == [("held", h.starts_at_ms), ("on-demand", h.ends_at_ms)]
    assert balance(p, ann) == 500_000 - WEEK_PRICE - 100  # 100 s past the end at 1 fen a second
    check_books(p)


def test_cancelling_a_package_refunds_the_unused_part_less_the_fee_as_quoted(
    p: Platform, fake_clock: FakeClock
) -> None:
    ann = renter(p, "ann", "5000.00")
    h = holds.buy(p, ann, "package-week", "A100-80GB", 1)
    inst = instances.rent(p, ann, "A100-80GB", 1, ["train"])
    fake_clock.advance(seconds=86_400)  # one day of seven used
    q = holds.cancel_quote(p, ann, h.id)
    used = 86_400 * 80 // 100  # a day at 0.8 fen a second
    assert (q.used_minor, q.unused_minor) == (used, WEEK_PRICE - used)
    assert q.kept_minor == (WEEK_PRICE - used) // 10 and q.refund_minor == (WEEK_PRICE - used) * 9 // 10
    assert any(inst.id in c and "stopped" in c for c in q.consequences)
    with pytest.raises(NotFound):
        holds.cancel(p, ann, h.id, "q-" + "0" * 24)  # a made-up quote
    fake_clock.advance(seconds=600)  # quotes last 10 minutes
    with pytest.raises(Conflict) as stale:
        holds.cancel(p, ann, h.id, q.quote_id)
    assert stale.value.code == "quote_expired"
    q = holds.cancel_quote(p, ann, h.id)
    before = balance(p, ann)
    done = holds.cancel(p, ann, h.id, q.quote_id)
    assert done.state == "cancelled" and done.refunded_minor == q.refund_minor  # same instant: as quoted
    assert balance(p, ann) == before + q.refund_minor
    assert instances.show(p, ann, inst.id).status == "stopping"  # on_expiry=stop applies to a cancellation too
    assert free_a100(p) == 1  # the other one; the cancelled hold's GPU waits for its process to end
    with pytest.raises(Conflict) as twice:
        holds.cancel(p, ann, h.id, q.quote_id)
    assert twice.value.code == "hold_not_active"
    check_books(p)


def test_terminating_a_reservation_claws_back_the_discount_received(p: Platform, fake_clock: FakeClock) -> None:
    ann = renter(p, "ann", "20000.00")
    h = holds.buy(p, ann, "reserved-1m", "A100-80GB", 1)
    paid = 30 * 86_400 * 70 // 100  # 30 days at 0.7 fen a second
    assert h.paid_minor == paid and h.kind == "reserved"
    fake_clock.advance(seconds=10 * 86_400)
    q = holds.cancel_quote(p, ann, h.id)
    # Ten days held cost 8640.00 on demand; the refund is what was paid less that.
    assert q.refund_minor == paid - 10 * 86_400 and q.kept_minor == 10 * 86_400 * 30 // 100
    assert "clawed back" in q.rule
    before = balance(p, ann)
    holds.cancel(p, ann, h.id, q.quote_id)
    assert balance(p, ann) == before + paid - 10 * 86_400
    check_books(p)


def test_a_purchase_and_its_refund_are_lines_of_the_invoice_which_equals_the_ledger(
    p: Platform, fake_clock: FakeClock
) -> None:
    ann = renter(p, "ann", "5000.00")
    h = holds.buy(p, ann, "package-week", "A100-80GB", 1)
    instances.rent(p, ann, "T4", 1, ["x"])  # some metered usage beside it
    fake_clock.advance(seconds=86_400)
    meter_all(p)
    q = holds.cancel_quote(p, ann, h.id)
    holds.cancel(p, ann, h.id, q.quote_id)
    with p.db.read() as s:
        payer = personal_account(s, ann.id).id
    [draft] = [v for v in invoices.list_invoices(p, payer) if v.status == "draft"]
    [bought, refund] = [line for line in draft.lines if line.instance_id == h.id]
    assert (bought.plan, bought.seconds, bought.gross_minor, bought.discount_minor, bought.amount_minor) == (
        "package-week",
        WEEK_S,
        WEEK_LIST,
        WEEK_LIST - WEEK_PRICE,
        WEEK_PRICE,
    )
    assert (refund.amount_minor, refund.seconds) == (-q.refund_minor, -(WEEK_S - 86_400))
    assert "refund" in refund.description and "fee" in refund.description
    t4 = [line for line in draft.lines if line.plan == "on-demand"]
    assert sum(line.amount_minor for line in t4) == 86_400 // 10  # 0.1 fen a second
    spent = 500_000 - balance(p, ann)
    assert draft.total_minor == spent  # the invoice is what left the balance, to the fen
    check_books(p)


def test_a_hold_that_cannot_be_paid_or_breaks_a_cap_or_is_not_offered_changes_nothing(
    p: Platform, fake_clock: FakeClock
) -> None:
    poor = renter(p, "poor", "100.00")
    with pytest.raises(InsufficientFunds) as broke:
        holds.buy(p, poor, "package-week", "A100-80GB", 1)
    assert "4838.40" in broke.value.message
    with pytest.raises(Conflict) as missing:
        holds.buy(p, poor, "package-month", "A100-80GB", 1)
    assert missing.value.code == "plan_not_offered"
    rich = renter(p, "rich", "9000.00")
    budgets.set_budget(p, rich, team=None, period="month", hard="1000.00")
    with pytest.raises(Conflict) as capped:
        holds.buy(p, rich, "package-week", "A100-80GB", 1)
    assert capped.value.code == "budget_cap_reached"
    with pytest.raises(InvalidInput) as wide:
        holds.quote(p, rich, "reserved-1m", "A100-80GB", 3)  # 2 on the host
    assert wide.value.code == "count_exceeds_host"
    with p.db.read() as s:
        assert s.execute(select(func.count(Hold.id))).scalar_one() == 0
        assert s.execute(select(func.count(Gpu.id)).where(Gpu.hold_id.is_not(None))).scalar_one() == 0
    assert (balance(p, poor), balance(p, rich), free_a100(p)) == (10_000, 900_000, 2)
    instances.rent(p, renter(p, "joe", "10.00"), "A100-80GB", 2, ["x"])
    kim = renter(p, "kim", "9000.00")
    with pytest.raises(NoCapacity):  # both rented: none left to hold
        holds.buy(p, kim, "package-week", "A100-80GB", 1)
    assert balance(p, kim) == 900_000
    check_books(p)


def test_a_team_hold_is_the_teams_a_viewer_cannot_buy_and_outsiders_get_404(p: Platform) -> None:
    ann = renter(p, "ann", None)
    bob = renter(p, "bob", None)
    vic = renter(p, "vic", None)
    eve = renter(p, "eve", "9000.00")
    teams.create_team(p, ann, "lab")
    teams.add_member(p, ann, "lab", "bob", "member")
    teams.add_member(p, ann, "lab", "vic", "viewer")
    billing.admin_topup(p, "lab", "6000.00", key="lab-seed", team=True)
    h = holds.buy(p, bob, "package-week", "A100-80GB", 1, team="lab")
    assert h.account == "lab" and billing.balance(p, ann, team="lab").balance_minor == 600_000 - WEEK_PRICE
    with pytest.raises(Forbidden):
        holds.buy(p, vic, "package-week", "A100-80GB", 1, team="lab")
    assert [v.id for v in holds.list_holds(p, vic, team="lab")] == [h.id]  # viewers see it
    with pytest.raises(Forbidden):
        holds.cancel_quote(p, vic, h.id)
    for call in (lambda: holds.show_hold(p, eve, h.id), lambda: holds.cancel_quote(p, eve, h.id)):
        with pytest.raises(NotFound):
            call()
    # ann's rental on the team runs on the team's package; eve's personal rental does not.
    inst = instances.rent(p, ann, "A100-80GB", 1, ["x"], team="lab")
    assert inst.hold_id == h.id
    other = instances.rent(p, eve, "A100-80GB", 1, ["x"])
    assert other.hold_id is None


def test_the_last_reservable_gpu_wanted_by_20_accounts_at_once_is_held_once(p: Platform) -> None:
    """Real threads on real connections: one wins, nineteen are refused, and only the winner paid."""
    buyers = [renter(p, f"racer{i}", "6000.00") for i in range(20)]
    instances.rent(p, renter(p, "first", "10.00"), "A100-80GB", 1, ["x"])  # one of two left
    barrier = threading.Barrier(len(buyers))
    results: list[str] = []

    def buy(user: object) -> None:
        barrier.wait()
        try:
            holds.buy(p, user, "package-week", "A100-80GB", 1)  # type: ignore[arg-type]
            results.append("held")
        except NoCapacity:
            results.append("refused")

    threads = [threading.Thread(target=buy, args=(u,)) for u in buyers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["held"] + ["refused"] * 19
    assert sorted(balance(p, u) for u in buyers) == [600_000 - WEEK_PRICE] + [600_000] * 19
    with p.db.read() as s:
        assert s.execute(select(func.count(Hold.id))).scalar_one() == 1
    check_books(p)


def test_the_scheduler_and_offers_leave_a_held_gpu_alone_while_nothing_runs_on_it(p: Platform) -> None:
    from danlu.compute.offers import list_offers
    from danlu.scheduling import jobs
    from danlu.scheduling.live import schedule_round

    ann = renter(p, "ann", "10000.00")
    bob = renter(p, "bob", "100.00")
    holds.buy(p, ann, "package-week", "A100-80GB", 2)  # both A100s, idle
    [a100] = [o for o in list_offers(p) if o.gpu_model == "A100-80GB"]
    assert (a100.free, a100.total) == (0, 2)
    job = jobs.submit(p, bob, ["train"], gpus=1, gpu_types=["A100-80GB"])
    assert schedule_round(p).started == []  # the held GPUs are not the scheduler's to give
    queued = jobs.show(p, bob, job.id)
    # It never tried (a start on held GPUs would be refused by the claim and leave "waiting: only 0 of 2 …").
    assert queued.status == "queued" and "waiting:" not in queued.status_reason, queued.status_reason


def test_held_gpus_count_against_the_buyers_quota_once(p: Platform) -> None:
    from danlu.accounts.service import change_gpu_quota
    from danlu.core.errors import QuotaExceeded

    ann = renter(p, "ann", "5000.00")
    change_gpu_quota(p, "ann", 2)
    holds.buy(p, ann, "package-week", "A100-80GB", 1)
    with pytest.raises(QuotaExceeded):
        instances.rent(p, ann, "T4", 2, ["x"])  # 1 held + 2 > 2, although the held one is idle
    on_hold = instances.rent(p, ann, "A100-80GB", 1, ["x"])  # the held GPU: not counted twice
    assert on_hold.hold_id is not None
    instances.rent(p, ann, "T4", 1, ["y"])  # 1 + 1 = 2
    with pytest.raises(QuotaExceeded):
        instances.rent(p, ann, "T4", 1, ["z"])
    with pytest.raises(QuotaExceeded):
        holds.buy(p, ann, "package-week", "T4", 1)


def test_running_out_of_money_or_into_a_cap_never_stops_what_runs_on_a_prepaid_hold(
    p: Platform, fake_clock: FakeClock
) -> None:
    ann = renter(p, "ann", "4840.40")  # the week (4838.40) and 2.00 left for on-demand time
    holds.buy(p, ann, "package-week", "A100-80GB", 1)
    prepaid = instances.rent(p, ann, "A100-80GB", 1, ["train"])
    paid = instances.rent(p, ann, "A100-80GB", 1, ["eval"])  # 1 fen a second: the 2.00 lasts 200 s
    assert prepaid.hold_id is not None and paid.hold_id is None
    fake_clock.advance(seconds=300)
    meter_all(p)
    assert instances.show(p, ann, paid.id).status == "stopping"  # out of money: the paid one stops
    assert instances.show(p, ann, prepaid.id).status == "running"  # the prepaid one goes on
    with p.db.read() as s:
        held = s.scalars(select(AllocationRow).where(AllocationRow.instance_id == prepaid.id)).one()
        assert (held.ended_at_ms, held.settled, held.billed_until_ms) == (None, False, fake_clock.now_ms())
    assert balance(p, ann) == 0
    bob = renter(p, "bob", "6000.00")
    holds.buy(p, bob, "package-week", "T4", 1)
    on_hold = instances.rent(p, bob, "T4", 1, ["train"])
    t4 = instances.rent(p, bob, "T4", 1, ["more"])  # 0.1 fen a second on demand
    budgets.set_budget(p, bob, team=None, instance=None, period="total", hard=f"{(483_84 + 5) / 100:.2f}")
    fake_clock.advance(seconds=100)
    meter_all(p)
    assert instances.show(p, bob, t4.id).status == "stopping"  # the cap stops the paid one...
    assert instances.show(p, bob, on_hold.id).status == "running"  # ...not the prepaid one
    check_books(p)


def test_only_the_buyer_or_a_team_manager_cancels_and_the_refund_is_the_buyers(
    p: Platform, fake_clock: FakeClock
) -> None:
    ann, bob, carl = renter(p, "ann", None), renter(p, "bob", None), renter(p, "carl", None)
    teams.create_team(p, ann, "lab")
    teams.add_member(p, ann, "lab", "bob", "member")
    teams.add_member(p, ann, "lab", "carl", "member")
    billing.admin_topup(p, "lab", "9000.00", key="lab-seed", team=True)
    h = holds.buy(p, carl, "package-week", "A100-80GB", 1, team="lab")
    run = instances.rent(p, carl, "A100-80GB", 1, ["x"], team="lab")
    assert run.hold_id == h.id
    for who in ("ann", "carl"):
        budgets.set_budget(p, ann, team="lab", member=who, period="month", soft="10000.00")
    with pytest.raises(Forbidden):
        holds.cancel_quote(p, bob, h.id)  # a member cannot stop another member's work this way
    fake_clock.advance(seconds=3600)
    q = holds.cancel_quote(p, ann, h.id)  # the owner can
    done = holds.cancel(p, ann, h.id, q.quote_id)
    spent = {b.scope: b.spent_minor for b in budgets.list_budgets(p, ann, team="lab")}
    # The refund is the buyer's (carl's), not the canceller's: ann's budget does not go negative.
    assert spent == {"member:ann": 0, "member:carl": WEEK_PRICE - done.refunded_minor}, spent
    check_books(p)


def test_a_refund_in_a_later_month_counts_in_the_month_of_its_purchase(p: Platform, fake_clock: FakeClock) -> None:
    from zoneinfo import ZoneInfo

    from danlu.billing.caps import period_start_ms

    ann = renter(p, "ann", "20000.00")
    start = period_start_ms(fake_clock.now_ms(), ZoneInfo("UTC"))
    fake_clock.set(start + 25 * 86_400_000)  # the 26th: a 30-day reservation runs into next month
    budgets.set_budget(p, ann, team=None, period="month", hard="100.00")
    budgets.remove_budget(p, ann, budgets.list_budgets(p, ann)[0].id)
    h = holds.buy(p, ann, "reserved-1m", "A100-80GB", 1)
    fake_clock.advance(seconds=10 * 86_400)  # next month
    q = holds.cancel_quote(p, ann, h.id)
    holds.cancel(p, ann, h.id, q.quote_id)
    budgets.set_budget(p, ann, team=None, period="month", hard="100.00")
    [b] = budgets.list_budgets(p, ann)
    assert b.spent_minor == 0  # not minus the refund: this month may spend its whole cap, no more
    t4 = instances.rent(p, ann, "T4", 1, ["x"])
    fake_clock.advance(seconds=200_000)  # 200.00 of T4 time, capped at 100.00
    meter_all(p)
    assert instances.show(p, ann, t4.id).cost_minor == 10_000


def test_rent_with_a_package_runs_on_the_package_just_bought_and_only_at_the_confirmed_price(
    p: Platform, fake_clock: FakeClock
) -> None:
    ann = renter(p, "ann", "20000.00")
    old = holds.buy(p, ann, "package-week", "A100-80GB", 1, on_expiry="stop")  # idle, ends first
    fake_clock.advance(seconds=86_400)
    with pytest.raises(Conflict) as changed:
        holds.rent_on_new_hold(p, ann, "package-week", "stop", "A100-80GB", 1, ["x"], expected_price="4000.00")
    assert changed.value.code == "price_changed" and "4838.40" in changed.value.message
    assert free_a100(p) == 1 and balance(p, ann) == 2_000_000 - WEEK_PRICE  # nothing happened
    inst = holds.rent_on_new_hold(p, ann, "package-week", "stop", "A100-80GB", 1, ["x"], expected_price="4838.40")
    [new] = [h for h in holds.list_holds(p, ann) if h.id != old.id]
    assert inst.hold_id == new.id and new.instance_id == inst.id  # not the older, idle one


def test_a_member_quota_bounds_what_a_member_may_hold_on_the_team(p: Platform) -> None:
    from danlu.core.errors import QuotaExceeded

    ann, bob = renter(p, "ann", None), renter(p, "bob", None)
    teams.create_team(p, ann, "lab")
    teams.add_member(p, ann, "lab", "bob", "member", gpu_quota=1)
    billing.admin_topup(p, "lab", "20000.00", key="lab-seed", team=True)
    with pytest.raises(QuotaExceeded):
        holds.buy(p, bob, "package-week", "A100-80GB", 2, team="lab")
    holds.buy(p, bob, "package-week", "A100-80GB", 1, team="lab")
    with pytest.raises(QuotaExceeded):
        instances.rent(p, bob, "T4", 1, ["x"], team="lab")  # the idle held GPU is his one
    assert instances.rent(p, bob, "A100-80GB", 1, ["x"], team="lab").hold_id is not None
