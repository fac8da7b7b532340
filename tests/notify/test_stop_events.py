"""A stop the platform makes for money — a hard budget cap reached, a balance run out — is an event in
the renter's feed and a webhook kind, as idle and maximum-duration stops are (issue 28, finding 11:
a hard-cap stop wrote no event and sent no webhook)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from danlu.billing import budgets
from danlu.billing import service as billing
from danlu.compute import instances
from danlu.compute.reconcile import meter_all
from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.db.models import Event, WebhookDelivery
from danlu.notify import webhooks
from tests.billing.test_metering import renter
from tests.fakes import RecordingBackend


@pytest.fixture
def p(platform: Platform) -> Platform:
    platform.backend = RecordingBackend()
    platform.settings.webhook_allow_private = True
    billing.set_price(platform, "A100-80GB", "36.00")  # 1 fen per GPU-second
    return platform


def events(p: Platform, instance_id: str) -> list[tuple[str, str]]:
    with p.db.read() as s:
        rows = s.execute(select(Event.kind, Event.message).where(Event.instance_id == instance_id).order_by(Event.id))
        return [(k, m) for k, m in rows]


def queued_kinds(p: Platform, hook_id: int) -> list[str]:
    webhooks.enqueue(p)
    with p.db.read() as s:
        return list(
            s.scalars(
                select(Event.kind)
                .join(WebhookDelivery, WebhookDelivery.event_id == Event.id)
                .where(WebhookDelivery.webhook_id == hook_id)
            )
        )


def test_a_hard_cap_stop_is_an_event_and_a_webhook(p: Platform, fake_clock: FakeClock) -> None:
    user = renter(p, "hana", "10.00")
    hook = webhooks.add(p, user, "http://127.0.0.1:9/hook", ["budget_stop"])
    capped = instances.rent(p, user, "A100-80GB", 1, ["x"])
    budgets.set_budget(p, user, team=None, instance=capped.id, period="total", hard="0.50")
    fake_clock.advance(seconds=100)
    meter_all(p)
    assert instances.show(p, user, capped.id).status == "stopping"
    [(_kind, message)] = [e for e in events(p, capped.id) if e[0] == "budget_stop"]
    assert message.startswith(f"{capped.id}: hard budget cap reached")
    assert queued_kinds(p, hook.id) == ["budget_stop"]
    meter_all(p)  # a second pass stops nothing more and says nothing more
    assert [k for k, _ in events(p, capped.id)].count("budget_stop") == 1


def test_a_balance_run_out_stop_is_an_event_and_a_webhook(p: Platform, fake_clock: FakeClock) -> None:
    user = renter(p, "bert", "1.00")  # 100 GPU-seconds of A100
    hook = webhooks.add(p, user, "http://127.0.0.1:9/hook", ["balance_stop"])
    inst = instances.rent(p, user, "A100-80GB", 1, ["x"])
    fake_clock.advance(seconds=500)
    meter_all(p)
    assert instances.show(p, user, inst.id).status == "stopping"
    [(_kind, message)] = [e for e in events(p, inst.id) if e[0] == "balance_stop"]
    assert message.startswith(f"{inst.id}: balance exhausted")
    assert queued_kinds(p, hook.id) == ["balance_stop"]


def test_a_stop_kind_is_one_a_webhook_may_subscribe_to() -> None:
    assert {"budget_stop", "balance_stop"} <= set(webhooks.KINDS)
