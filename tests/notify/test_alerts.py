"""Money alerts in the event feed, on SQLite and PostgreSQL with a fake clock: ``low_balance``
once when a payer's money will run out within the hour (again only after it lasted), and
``voucher_expiring`` once a day before a voucher with value left expires, never for a spent one."""

from __future__ import annotations

import pytest

from danlu.billing import service as billing
from danlu.billing import vouchers
from danlu.compute import instances
from danlu.compute.reconcile import meter_all
from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.notify import alerts, feed
from tests.billing.test_vouchers import campaign, renter
from tests.fakes import RecordingBackend

HOUR_S = 3600


@pytest.fixture
def p(platform: Platform) -> Platform:
    platform.backend = RecordingBackend()
    billing.set_price(platform, "A100-80GB", "36.00")  # 1 fen per GPU-second
    return platform


def kinds(p: Platform, user: object) -> list[str]:
    return [e.kind for e in feed.feed(p, user)]  # type: ignore[arg-type]


def test_low_balance_is_said_once_and_again_only_after_the_money_lasted(p: Platform, fake_clock: FakeClock) -> None:
    ann, bob = renter(p, "ann", "50.00"), renter(p, "bob", "1000.00")  # ann: 5000 s of one A100
    instances.rent(p, ann, "A100-80GB", 1, ["python", "notebook.py"])
    instances.rent(p, bob, "A100-80GB", 1, ["python", "train.py"])  # bob's money lasts over a day
    assert alerts.run(p) == (0, 0)  # 83 minutes left: not yet
    fake_clock.advance(seconds=1500)
    meter_all(p)
    assert alerts.run(p) == (1, 0)  # 58 minutes left
    (event,) = feed.feed(p, ann)
    assert event.kind == "low_balance" and "35.00 CNY left" in event.message and "top up" in event.message
    fake_clock.advance(seconds=600)
    meter_all(p)
    assert alerts.run(p) == (0, 0) and kinds(p, ann) == ["low_balance"]  # said once
    assert kinds(p, bob) == []
    billing.admin_topup(p, "ann", "100.00", key="more")  # now lasts about 3.7 h: the warning is cleared …
    assert alerts.run(p) == (0, 0)
    fake_clock.advance(seconds=3 * HOUR_S)  # … and said again when it runs low once more
    meter_all(p)
    assert alerts.run(p) == (1, 0) and kinds(p, ann) == ["low_balance", "low_balance"]


def test_a_voucher_with_value_left_is_announced_a_day_before_it_expires(p: Platform, fake_clock: FakeClock) -> None:
    campaign(p, "trial", "10.00", trigger="manual", valid_for="72h")
    campaign(p, "tiny", "0.01", trigger="manual", valid_for="72h")
    ann = renter(p, "ann", None)
    vouchers.grant_to(p, "trial", user="ann")
    fake_clock.advance(seconds=48 * HOUR_S - 1)
    assert alerts.run(p) == (0, 0)  # a day and a second before: not yet
    fake_clock.advance(seconds=1)
    assert alerts.run(p) == (0, 1)
    (event,) = feed.feed(p, ann)
    assert event.kind == "voucher_expiring" and "(trial) has 10.00 CNY left" in event.message
    assert alerts.run(p) == (0, 0)  # once
    bob = renter(p, "bob", "100.00")
    vouchers.grant_to(p, "tiny", user="bob")
    instances.rent(p, bob, "A100-80GB", 1, ["x"])
    fake_clock.advance(seconds=60)
    meter_all(p)  # the 1 fen voucher is spent in the first second
    fake_clock.advance(seconds=48 * HOUR_S)
    meter_all(p)
    assert alerts.run(p)[1] == 0 and "voucher_expiring" not in kinds(p, bob)
