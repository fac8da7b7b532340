"""Budgets and hard caps, the student discount, and vouchers around their expiry, through the
meter, on SQLite and PostgreSQL, on a fake clock (issue 9 parts 5-7)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from danlu.accounts import teams
from danlu.accounts.payers import personal_account
from danlu.billing import budgets, student, terms, vouchers
from danlu.billing import service as billing
from danlu.compute import holds, instances, views
from danlu.compute.reconcile import meter_all
from danlu.compute.runs import PREEMPT_FILE
from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.core.errors import Forbidden, InsufficientFunds, InvalidInput
from danlu.db.models import AllocationRow, Event, UsageRecordRow
from tests.billing.test_metering import assert_ledger_consistent, renter
from tests.billing.test_money_machine import check_books
from tests.fakes import RecordingBackend


@pytest.fixture
def p(platform: Platform) -> Platform:
    platform.backend = RecordingBackend()
    billing.set_price(platform, "A100-80GB", "36.00")  # 1 fen per GPU-second
    billing.set_price(platform, "T4", "3.60")  # 0.1 fen per GPU-second
    return platform


def usage(p: Platform, instance_id: str) -> tuple[int, int, int, int]:
    """(gross, discount, vouchers, charged) over an instance's usage records."""
    with p.db.read() as s:
        rows = s.execute(
            select(UsageRecordRow)
            .join(AllocationRow, AllocationRow.id == UsageRecordRow.allocation_id)
            .where(AllocationRow.instance_id == instance_id)
        ).scalars()
        recs = list(rows)
    return (
        sum(r.gross_minor for r in recs),
        sum(r.discount_minor for r in recs),
        sum(r.voucher_minor for r in recs),
        sum(r.amount_minor for r in recs),
    )


def test_a_stop_after_a_voucher_expired_still_pays_the_time_before_it_from_the_voucher(
    p: Platform, fake_clock: FakeClock
) -> None:
    vouchers.create_campaign(
        p,
        vouchers.CampaignSpec(
            name="short", amount_minor=10_000, trigger="manual", valid_from_ms=fake_clock.now_ms(), valid_for_ms=60_000
        ),
    )
    user = renter(p, "vic", "1.00")
    with p.db.read() as s:
        payer = personal_account(s, user.id).id
    vouchers.grant_by_name(p, "short", payer)
    inst = instances.rent(p, user, "A100-80GB", 1, ["x"])
    fake_clock.advance(seconds=100)  # the voucher expired 40 s ago; no meter pass ran since
    instances.stop(p, user, inst.id)
    assert usage(p, inst.id) == (100, 0, 60, 100)  # 60 s before the expiry from the voucher, 40 s cash
    assert billing.balance(p, user).balance_minor == 100 - 40
    meter_all(p)  # now the loop expires it: exactly the unused rest goes back
    [grant] = vouchers.list_grants(p, payer)
    assert (grant.status, grant.remaining_minor) == ("expired", 0)
    check_books(p)


def test_a_hard_cap_on_one_instance_bills_exactly_up_to_it_and_stops_only_that_instance(
    p: Platform, fake_clock: FakeClock
) -> None:
    user = renter(p, "hank", "10.00")
    capped = instances.rent(p, user, "A100-80GB", 1, ["x"])
    other = instances.rent(p, user, "A100-80GB", 1, ["y"])
    budgets.set_budget(p, user, team=None, instance=capped.id, period="total", hard="0.50")
    fake_clock.advance(seconds=100)
    meter_all(p)
    assert usage(p, capped.id)[3] == 50  # exactly the cap: 50 s of 1 fen, not 100
    assert usage(p, other.id)[3] == 100
    assert instances.show(p, user, capped.id).status == "stopping"
    assert instances.show(p, user, other.id).status == "running"
    notice = (p.control_dir(capped.id) / PREEMPT_FILE).read_text().splitlines()
    assert int(notice[1]) == fake_clock.now_ms() // 1000 + p.settings.preempt_notice_s  # the deadline it is told
    assert not (p.control_dir(other.id) / PREEMPT_FILE).exists()
    fake_clock.advance(seconds=100)
    meter_all(p)
    assert usage(p, capped.id)[3] == 50  # nothing more, ever
    assert billing.balance(p, user).balance_minor == 1000 - 50 - 200
    assert_ledger_consistent(p)
    check_books(p)


def test_a_member_budget_caps_one_member_on_the_team_account(p: Platform, fake_clock: FakeClock) -> None:
    owner = renter(p, "olga", None)
    bob = renter(p, "bobby", None)
    teams.create_team(p, owner, "lab")
    teams.add_member(p, owner, "lab", "bobby", "member")
    billing.admin_topup(p, "lab", "10.00", "seed-lab", team=True)
    with pytest.raises(Forbidden):  # a member cannot set budgets of the account
        budgets.set_budget(p, bob, team="lab", member="bobby", hard="5.00")
    budgets.set_budget(p, owner, team="lab", member="bobby", hard="0.90", soft="0.60")  # room for a minute
    b = instances.rent(p, bob, "A100-80GB", 1, ["x"], team="lab")
    o = instances.rent(p, owner, "A100-80GB", 1, ["y"], team="lab")
    fake_clock.advance(seconds=100)
    meter_all(p)
    assert usage(p, b.id)[3] == 90 and usage(p, o.id)[3] == 100
    assert instances.show(p, bob, b.id).status == "stopping"
    with p.db.read() as s:
        events = [e.message for e in s.scalars(select(Event).where(Event.kind == "budget_threshold"))]
    assert any("100%" in m for m in events), events
    [view] = [v for v in budgets.list_budgets(p, owner, "lab") if v.scope == "member:bobby"]
    assert view.spent_minor == 90
    check_books(p)


def test_soft_limit_events_fire_once_at_50_80_and_100_percent(p: Platform, fake_clock: FakeClock) -> None:
    user = renter(p, "sofia", "10.00")
    budgets.set_budget(p, user, team=None, soft="1.00")
    instances.rent(p, user, "A100-80GB", 1, ["x"])
    seen = []
    for _ in range(6):
        fake_clock.advance(seconds=25)
        meter_all(p)
        with p.db.read() as s:
            seen = [
                e.message for e in s.scalars(select(Event).where(Event.kind == "budget_threshold").order_by(Event.id))
            ]
    assert [m.split(" reached ")[1].split("%")[0] for m in seen] == ["50", "80", "100"]


def test_the_student_discount_applies_after_approval_before_vouchers(p: Platform, fake_clock: FakeClock) -> None:
    student.set_discount(p, "20")
    user = renter(p, "stu", "10.00")
    before = instances.rent(p, user, "A100-80GB", 1, ["x"])
    student.request(p, user, "Tsinghua University", "stu@mails.tsinghua.edu.cn")
    with pytest.raises(InvalidInput):
        student.decide(p, "stu", approve=False, reason="")  # a refusal needs a reason
    assert student.decide(p, "stu", approve=True, reason="").status == "approved"
    after = instances.rent(p, user, "A100-80GB", 1, ["y"])
    fake_clock.advance(seconds=100)
    meter_all(p)
    assert usage(p, before.id) == (100, 0, 0, 100)  # started before approval: never re-rated
    assert usage(p, after.id) == (100, 20, 0, 80)
    with pytest.raises(InvalidInput):
        student.set_discount(p, "120")
    check_books(p)


def test_a_refused_student_can_ask_again_and_teams_get_no_student_discount(p: Platform, fake_clock: FakeClock) -> None:
    student.set_discount(p, "50")
    user = renter(p, "rita", None)
    student.request(p, user, "Fudan University")
    assert student.decide(p, "rita", approve=False, reason="no student e-mail").reason == "no student e-mail"
    student.request(p, user, "Fudan University", "rita@fudan.edu.cn")
    student.decide(p, "rita", approve=True, reason="")
    teams.create_team(p, user, "rlab")
    billing.admin_topup(p, "rlab", "10.00", "seed-rlab", team=True)
    inst = instances.rent(p, user, "A100-80GB", 1, ["x"], team="rlab")
    fake_clock.advance(seconds=10)
    meter_all(p)
    assert usage(p, inst.id) == (10, 0, 0, 10)


def test_the_loop_meters_again_when_a_hard_cap_will_be_reached_not_at_the_next_interval(
    p: Platform, fake_clock: FakeClock
) -> None:
    """Running out of money was predicted to the second, a hard cap was not: a capped instance ran on, unpaid,
    until the next meter pass (about 8 s past its cap in a newcomer's pass)."""
    user = renter(p, "hope", "10.00")
    capped = instances.rent(p, user, "A100-80GB", 1, ["x"])  # 1 fen per second
    budgets.set_budget(p, user, team=None, instance=capped.id, period="total", hard="0.05")
    start = fake_clock.now_ms()
    fake_clock.advance(seconds=2)
    report = meter_all(p)
    assert report.next_exhaustion_ms == start + 6_000, report  # whole seconds: the 6th one is billable from then
    fake_clock.set(report.next_exhaustion_ms)
    meter_all(p)
    assert usage(p, capped.id)[3] == 5 and instances.show(p, user, capped.id).status == "stopping"


def test_a_soft_limit_above_the_hard_cap_is_refused_and_nothing_is_stored(p: Platform) -> None:
    """It could never warn: the hard cap stops spending first (accepted until a newcomer's pass)."""
    user = renter(p, "sofia", "10.00")
    with pytest.raises(InvalidInput) as err:
        budgets.set_budget(p, user, team=None, soft="5.00", hard="1.00")
    assert err.value.code == "invalid_budget" and "above the hard cap" in err.value.message
    assert budgets.list_budgets(p, user) == []
    assert budgets.set_budget(p, user, team=None, soft="1.00", hard="1.00").hard_minor == 100  # equal is fine


def test_a_rental_needs_a_minutes_room_under_a_hard_cap_as_under_the_balance(
    p: Platform, fake_clock: FakeClock
) -> None:
    """A 0.01 cap let an A100 (1 fen/s) start and run on until the next meter pass, and a second rental too
    (nothing was posted yet): a rental needs the room of ``min_prepaid_seconds`` under every cap covering it."""
    from danlu.core.errors import Conflict

    user = renter(p, "tiny", "10.00")
    budgets.set_budget(p, user, team=None, period="month", hard="0.59")  # 59 s of an A100; 60 s are needed
    with pytest.raises(Conflict) as err:
        instances.rent(p, user, "A100-80GB", 1, ["x"])
    assert err.value.code == "budget_cap_reached" and "0.59" in err.value.message
    assert views.list_instances(p, user) == []
    budgets.set_budget(p, user, team=None, period="month", hard="0.60")
    assert instances.rent(p, user, "A100-80GB", 1, ["x"]).status == "running"


def test_a_team_without_money_is_named_with_who_can_top_it_up(p: Platform) -> None:
    """A member renting on a team whose balance is empty was told "top up first" as if it were their
    own balance (issue 28, finding 11): the message names the team and the command that tops it up."""
    owner = renter(p, "tara", "100.00")  # her own money does not pay for the team's rentals
    teams.create_team(p, owner, "emptylab")
    terms.set_term(p, "package-week", "20")
    with pytest.raises(InsufficientFunds) as rent_error:
        instances.rent(p, owner, "A100-80GB", 1, ["x"], team="emptylab")
    with pytest.raises(InsufficientFunds) as buy_error:
        holds.buy(p, owner, "package-week", "A100-80GB", 1, team="emptylab")
    for err in (rent_error.value, buy_error.value):
        assert "team emptylab's balance" in err.message, err.message
        assert "danlu admin team topup emptylab" in err.message, err.message
    with pytest.raises(InsufficientFunds) as own:  # a personal account's words are unchanged
        instances.rent(p, renter(p, "poor", None), "A100-80GB", 1, ["x"])
    assert own.value.message.startswith("the balance 0.00 CNY") and "team" not in own.value.message
