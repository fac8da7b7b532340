"""The console in a real browser: Debian's Chromium driven by Playwright (no browser download).

The README's walkthrough, clicked through in English and then in 简体中文: sign in, rent, watch the
cost tick and the log stream, stop (the consequence is stated first), see the ledger line. The
operator tops the renter up and stops their instance with a reason; another tenant's page answers
404; the login form works from the keyboard alone and the pages fit a phone. The same run writes
the screenshots in docs/screenshots/ (docs/console.md shows them).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import LiveServer, make_platform
from tests.console.helpers import set_password

pytestmark = [pytest.mark.slow(seconds=60), pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "docs" / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
COMMAND = "sh -c 'i=0; while true; do i=$((i+1)); echo step $i; sleep 0.5; done'"


def _chromium_or_skip() -> str:
    if CHROMIUM is None:
        if os.environ.get("CI") == "true":
            pytest.fail("Debian's chromium is not installed; `make test` installs it (apt-get install chromium)")
        pytest.skip("no chromium here: install Debian's chromium (`make test` does as root) to run the browser tests")
    return CHROMIUM


@pytest.fixture
def site(tmp_path: Path) -> Iterator[LiveServer]:
    """One live server on SQLite (the console's HTTP tests run on both databases)."""
    from danlu.core.clock import SystemClock

    p, token = make_platform(
        f"sqlite:///{tmp_path / 'console.db'}", tmp_path / "data", SystemClock(), stop_grace_s=2,
        tick_interval_s=0.2, meter_interval_s=1.0,
    )  # fmt: skip
    with LiveServer(p, token) as srv:
        with srv.admin() as a:
            assert a.put("/admin/prices/A100-80GB", json={"price_per_hour": "36.00"}).status_code == 200
            assert a.put("/admin/prices/T4", json={"price_per_hour": "3.60"}).status_code == 200
        yield srv


@pytest.fixture
def chromium() -> Iterator[object]:
    from playwright.sync_api import expect, sync_playwright

    # Every expectation waits for its evidence up to 30 s, not Playwright's 5 s: on a loaded CI machine a dropped
    # file's upload and the page's reload took longer (test_files_browser, once); a passing check ends at once.
    expect.set_options(timeout=30_000)
    exe = _chromium_or_skip()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
        yield browser
        browser.close()


def _shot(page: object, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)  # type: ignore[attr-defined]


def _sign_in(page: object, url: str, name: str, password: str) -> None:
    page.goto(f"{url}/instances")  # type: ignore[attr-defined]
    assert "/login" in page.url  # type: ignore[attr-defined]
    page.fill("#name", name)  # type: ignore[attr-defined]
    page.fill("#password", password)  # type: ignore[attr-defined]
    page.keyboard.press("Enter")  # type: ignore[attr-defined]  # the keyboard alone signs in
    page.wait_for_url(re.compile(r"^http://[^/]+/instances$"))  # type: ignore[attr-defined]  # not ?next=/instances


def _walkthrough(page: object, url: str, lang: str) -> str:
    """Offers → rent 2 GPUs with the estimate shown → live cost and log → stop → ledger line."""
    from playwright.sync_api import expect

    page.goto(f"{url}/offers")  # type: ignore[attr-defined]
    _shot(page, f"offers-{lang}")
    page.locator('tr[data-gpu="A100-80GB"] a.button').click()  # type: ignore[attr-defined]
    page.wait_for_url(re.compile(r".*/rent\?gpu=A100-80GB$"))  # type: ignore[attr-defined]
    estimate = page.locator("#estimate-value")  # type: ignore[attr-defined]
    expect(estimate).to_have_text(re.compile(r"36\.00"))
    page.fill("#r-count", "2")  # type: ignore[attr-defined]
    expect(estimate).to_have_text(re.compile(r"72\.00"))  # the live estimate follows the count
    page.fill("#r-command", COMMAND)  # type: ignore[attr-defined]
    _shot(page, f"rent-{lang}")
    page.locator("#rent-form button[type=submit]").click()  # type: ignore[attr-defined]
    page.wait_for_url(re.compile(r".*/instances/i-[0-9a-f]+$"))  # type: ignore[attr-defined]
    iid = page.url.rsplit("/", 1)[1]  # type: ignore[attr-defined]
    cost = page.locator('#facts [data-field="cost"]')  # type: ignore[attr-defined]
    billed = page.locator('#facts [data-field="billed"]')  # type: ignore[attr-defined]
    expect(page.locator("#log")).to_contain_text("step 3", timeout=15_000)  # type: ignore[attr-defined]
    first = billed.inner_text()
    expect(billed).not_to_have_text(first, timeout=5_000)  # ticks without a reload
    expect(cost).not_to_have_text(re.compile(r"^[^1-9]*$"), timeout=10_000)  # money is being charged
    _shot(page, f"instance-{lang}")
    page.locator("#stop-open").click()  # type: ignore[attr-defined]
    confirm = page.locator("#stop-confirm")  # type: ignore[attr-defined]
    expect(confirm).to_be_visible()
    page.locator("details.confirm[open] form p").first.wait_for()  # type: ignore[attr-defined]
    confirm.click()
    expect(page.locator('#facts [data-field="status"]')).to_have_class(  # type: ignore[attr-defined]
        re.compile("s-stopped"), timeout=15_000
    )
    page.goto(f"{url}/billing")  # type: ignore[attr-defined]
    expect(page.locator("#ledger")).to_contain_text(iid, timeout=15_000)  # type: ignore[attr-defined]
    _shot(page, f"billing-{lang}")
    page.goto(f"{url}/instances")  # type: ignore[attr-defined]
    _shot(page, f"instances-{lang}")
    return iid


def test_the_walkthrough_in_english_then_chinese_and_the_operator(site: LiveServer, chromium: object) -> None:
    from playwright.sync_api import expect

    site.new_user("alice", topup="500.00").close()
    set_password(site, "alice", "alice-password-1")
    ctx = chromium.new_context(locale="en-US", viewport={"width": 1200, "height": 800})  # type: ignore[attr-defined]
    page = ctx.new_page()
    _sign_in(page, site.url, "alice", "alice-password-1")
    expect(page.locator("nav")).to_contain_text("Instances")
    _walkthrough(page, site.url, "en")

    # The switch on every page: 简体中文, kept for the next pages.
    page.locator('a[data-lang="zh_CN"]').click()
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    expect(page.locator("nav")).to_contain_text("实例")
    iid = _walkthrough(page, site.url, "zh_CN")
    expect(page.locator("h1")).to_have_text("实例")

    # Start it again to have something running for the operator to stop.
    page.goto(f"{site.url}/instances/{iid}")
    page.locator("#start").click()
    expect(page.locator('#facts [data-field="status"]')).to_have_class(re.compile("s-running"), timeout=15_000)

    # The operator, in English: tops alice up, then stops her instance with a reason she reads.
    set_password(site, "admin", "operator-password-1")
    op = chromium.new_context(locale="en-US", viewport={"width": 1200, "height": 800}).new_page()  # type: ignore[attr-defined]
    _sign_in(op, site.url, "admin", "operator-password-1")
    r = op.goto(f"{site.url}/operator/users")
    assert r is not None and r.status == 200, op.content()[:3000]
    before = op.locator('#user-alice [data-field="balance"]').inner_text()
    op.fill("#top-alice", "10.00")
    op.locator("#top-alice").press("Enter")
    expect(op.locator(".flash.ok")).to_contain_text("Topped up: alice")
    expect(op.locator('#user-alice [data-field="balance"]')).not_to_have_text(before)
    _shot(op, "operator-users-en")
    op.goto(f"{site.url}/operator/instances")
    expect(op.locator(f"#op-{iid}")).to_contain_text("alice")
    _shot(op, "operator-instances-en")
    op.fill(f"#why-{iid}", "GPU 3 is overheating")
    op.locator(f"#op-{iid} button").click()
    expect(op.locator(".flash.ok")).to_contain_text(iid)
    op.goto(f"{site.url}/operator/gpus")
    _shot(op, "operator-gpus-en")
    page.goto(f"{site.url}/instances/{iid}")
    # The renter reads in 简体中文: the platform's sentence translated, the operator's own words as written.
    expect(page.locator('#facts [data-field="reason"]')).to_contain_text(
        "已被运营方停止：GPU 3 is overheating；进程已结束", timeout=15_000
    )

    # Another tenant: alice's instance is a 404 page for bob, and the operator's pages too.
    site.new_user("bob").close()
    set_password(site, "bob", "bob-password-12")
    bob = chromium.new_context(locale="zh-CN").new_page()  # type: ignore[attr-defined]
    _sign_in(bob, site.url, "bob", "bob-password-12")
    for path in (f"/instances/{iid}", "/operator/users"):
        response = bob.goto(f"{site.url}{path}")
        assert response is not None and response.status == 404, path
        expect(bob.locator("h1")).to_have_text("未找到")

    # A phone-sized screen: nothing wider than the screen but the tables' own scroll boxes.
    phone = chromium.new_context(locale="zh-CN", viewport={"width": 390, "height": 800}).new_page()  # type: ignore[attr-defined]
    _sign_in(phone, site.url, "alice", "alice-password-1")
    for path in (f"/instances/{iid}", "/rent", "/jobs/new", "/plans", "/budgets", "/webhooks"):  # /rent was 676 px wide
        phone.goto(f"{site.url}{path}")
        assert phone.evaluate("document.documentElement.scrollWidth") <= 390, path
    phone.goto(f"{site.url}/instances/{iid}")
    _shot(phone, "instance-phone-zh_CN")
    # Focus is visible: Tab reaches the skip link first, then the menu.
    phone.keyboard.press("Tab")
    assert phone.evaluate("document.activeElement.className") == "skip"
