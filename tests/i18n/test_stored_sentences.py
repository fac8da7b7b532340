"""Sentences the platform stores and the console shows — event messages, status and stop reasons, ledger
memos, invoice lines — read in 简体中文 (issue 28, finding 12: they were English on a Chinese page).

The evidence is the database after a renter's month on a fake clock: every sentence stored there must be
one the catalog (danlu.i18n.sentences) knows, and read in Chinese. A sentence the code changes without its
template fails here rather than falling back to English unseen."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import select

from danlu.accounts import teams
from danlu.accounts.payers import personal_account
from danlu.billing import budgets, invoices, terms, vouchers
from danlu.billing import service as billing
from danlu.compute import holds, instances
from danlu.compute.reconcile import meter_all, reconcile
from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.db.models import BillingAccount, Event, Instance, InstanceEvent, LedgerTransaction
from danlu.i18n import sentences
from danlu.i18n.catalogs import translations
from danlu.notify import alerts
from danlu.telemetry.idle import idle_reason, overtime_reason
from tests.billing.test_metering import renter
from tests.fakes import RecordingBackend

CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture
def p(platform: Platform) -> Platform:
    platform.backend = RecordingBackend()
    billing.set_price(platform, "A100-80GB", "36.00")  # 1 fen per GPU-second
    billing.set_price(platform, "T4", "3.60")
    terms.set_term(platform, "package-week", "20", cancel_fee="10")
    return platform


def settle(p: Platform) -> None:
    """Runs told to stop end (SIGTERM's status) and the control loop records it."""
    backend = p.backend
    assert isinstance(backend, RecordingBackend)
    for handle, _signal in backend.signals:
        if backend.states[handle].kind == "running":
            backend.die(handle, code=143)
    reconcile(p)


def a_month(p: Platform, clock: FakeClock) -> None:
    """What a renter and a team do in a month, each kind of thing once."""
    ann = renter(p, "ann", "20.00")
    vouchers.create_campaign(
        p,
        vouchers.CampaignSpec(name="welcome", amount_minor=500, trigger="manual", valid_from_ms=clock.now_ms(),
                              valid_for_ms=2 * 86_400_000),
    )  # fmt: skip
    with p.db.read() as s:
        payer = personal_account(s, ann.id).id
    vouchers.grant_by_name(p, "welcome", payer)
    a = instances.rent(p, ann, "A100-80GB", 1, ["python", "train.py"])
    clock.advance(seconds=60)
    instances.stop(p, ann, a.id)
    settle(p)
    instances.start(p, ann, a.id, gpu_model="T4", gpu_count=2)  # a resize
    clock.advance(seconds=60)
    capped = instances.rent(p, ann, "A100-80GB", 1, ["x"])
    budgets.set_budget(p, ann, team=None, instance=capped.id, period="total", hard="0.70", soft="0.60")
    clock.advance(seconds=100)
    meter_all(p)
    clock.advance(seconds=86_400)
    alerts.run(p)
    clock.advance(seconds=2 * 86_400)
    meter_all(p)
    alerts.run(p)
    settle(p)
    instances.destroy(p, ann, capped.id)
    owner = renter(p, "olga", "2000.00")
    teams.create_team(p, owner, "lab")
    billing.admin_topup(p, "lab", "6000.00", "seed-lab", team=True)
    held = holds.buy(p, owner, "package-week", "A100-80GB", 1, team="lab")
    clock.advance(seconds=86_400)
    quote = holds.cancel_quote(p, owner, held.id)
    holds.cancel(p, owner, held.id, quote.quote_id)
    poor = renter(p, "poor", "1.00")
    b = instances.rent(p, poor, "A100-80GB", 1, ["x"])
    clock.advance(seconds=600)
    meter_all(p)
    assert instances.show(p, poor, b.id).status in ("stopping", "stopped")


def stored(p: Platform) -> list[str]:
    with p.db.read() as s:
        out = list(s.scalars(select(Event.message)))
        out += list(s.scalars(select(InstanceEvent.reason)))
        out += [r for r in s.scalars(select(Instance.status_reason)) if r]
        out += [r for r in s.scalars(select(Instance.stop_reason)) if r]
        out += list(s.scalars(select(LedgerTransaction.memo)))
    return out


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_every_sentence_a_month_stores_reads_in_chinese(p: Platform, fake_clock: FakeClock) -> None:
    a_month(p, fake_clock)
    said = stored(p)
    with p.db.read() as s:
        payers = list(s.scalars(select(BillingAccount.id)))
    for view in (v for payer in payers for v in invoices.list_invoices(p, payer)):
        said += [line.description for line in view.lines]
    said += [
        idle_reason([(fake_clock.now_ms() - i * 5_000, 10) for i in range(20)], window_ms=60_000, threshold_pm=50,
                    running_since_ms=0, now_ms=fake_clock.now_ms(), period_ms=5_000) or "",
        overtime_reason(max_ms=3_600_000, running_since_ms=0, now_ms=4_000_000) or "",
    ]  # fmt: skip
    zh = translations("zh_CN").gettext
    untranslated = sorted({text for text in said if text and not CJK.search(sentences.translate(text, zh))})
    assert untranslated == [], "\n".join(untranslated)


@pytest.mark.parametrize("simulated", [False, True])
@pytest.mark.parametrize("gpu_mem_mb", [None, 9_000])
def test_efficiency_hints_read_in_chinese(simulated: bool, gpu_mem_mb: int | None) -> None:
    """The loop's ``efficiency_hint`` event (its hints joined by "; ") and each hint ``danlu show`` and the
    console's instance page list were English on a Chinese page: every variant, each sentence translated."""
    from danlu.catalog.gpu_models import gpu_models
    from danlu.telemetry.hints import Measured, advise

    prices = {"H100-80GB": 2_000, "A100-80GB": 1_200, "L4": 300, "T4": 150}
    for count in (1, 2):
        m = Measured("H100-80GB", count, 12.0, 1.0, 8.0, gpu_mem_mb, 20, simulated)
        hints = advise(m, gpu_models(), prices)
        assert len(hints) == 4, hints  # input, precision, batch, a cheaper GPU
        zh = translations("zh_CN").gettext
        for text in [*hints, "; ".join(hints)]:
            read = sentences.translate(text, zh)
            left = [w for w in ("averaged", "load data", "mixed precision", "larger batch", "cheaper GPU",
                                "simulated GPUs", "would keep up") if w in read]  # fmt: skip
            assert CJK.search(read) and not left, (text, read)
        assert "DataLoader(num_workers=7" in sentences.translate(hints[0], zh)  # the code is kept as code


def test_a_wrapper_is_read_before_the_free_text_inside_it() -> None:
    """An operator's reason is free text: it must not swallow the "; the process has ended" the platform added
    (it did, while templates were tried by literal length alone)."""
    zh = translations("zh_CN").gettext
    said = "stopped by the operator: GPU 3 is overheating; the process has ended"
    assert sentences.translate(said, zh) == "已被运营方停止：GPU 3 is overheating；进程已结束"
    assert sentences.translate("i-0a1b: " + said, zh) == "i-0a1b：已被运营方停止：GPU 3 is overheating；进程已结束"


def test_english_reads_as_stored_and_an_unknown_sentence_is_kept() -> None:
    english = translations("en").gettext
    for template in sentences.TEMPLATES:
        values = {name: f"x{i}" for i, name in enumerate(re.findall(r"\{(\w+)\}", template))}
        text = template.format(**values)
        assert sentences.translate(text, english) == text
    assert sentences.translate("something no template knows", translations("zh_CN").gettext) == (
        "something no template knows"
    )


def test_a_translation_that_lost_a_slot_shows_the_english() -> None:
    assert sentences.translate("command exited with code 3", lambda _t: "命令退出 {missing}") == (
        "command exited with code 3"
    )
