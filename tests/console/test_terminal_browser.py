"""Issue 25 in a real browser (Debian's Chromium through Playwright): the instance page's terminal
(xterm.js, vendored) types into a shell inside the rental's sandbox and shows Chinese output; the
page lists a web app started inside and its link opens it through danlu's proxy with the console's
session; another renter's terminal page is 404."""

from __future__ import annotations

import re

import pytest

from tests.conftest import LiveServer
from tests.console.helpers import set_password
from tests.console.test_browser import _shot, _sign_in, chromium, site  # noqa: F401 - fixtures

pytestmark = [pytest.mark.slow(seconds=40), pytest.mark.timeout(300)]


def test_a_terminal_in_the_browser_and_a_web_app_through_the_proxy(site: LiveServer, chromium: object) -> None:  # noqa: F811
    from playwright.sync_api import expect

    with site.new_user("alice", topup="500.00") as c:
        r = c.post("/instances", json={"gpu_model": "T4", "command": ["python3", "-m", "http.server", "8765",
                                                                       "--bind", "127.0.0.1"]})  # fmt: skip
        assert r.status_code == 201, r.text
        iid = r.json()["id"]
    set_password(site, "alice", "alice-password-1")
    ctx = chromium.new_context(locale="en-US", viewport={"width": 1200, "height": 800})  # type: ignore[attr-defined]
    page = ctx.new_page()
    _sign_in(page, site.url, "alice", "alice-password-1")

    page.goto(f"{site.url}/instances/{iid}")
    link = page.locator("a.port-link")
    for _ in range(30):  # the app binds its port shortly after the rental starts
        if link.count():
            break
        page.wait_for_timeout(1000)
        page.reload()
    expect(link).to_have_attribute("href", f"/p/{iid}/8765/")
    page.locator("#open-terminal").click()
    page.wait_for_url(re.compile(rf".*/instances/{iid}/terminal$"))
    expect(page.locator("#terminal")).to_have_attribute("data-state", "open", timeout=30_000)
    page.locator("#terminal").click()
    page.keyboard.type("printf '\\344\\270\\255\\346\\226\\207-%s\\n' $((6*7)); id -un\n")
    rows = page.locator("#terminal .xterm-rows")
    expect(rows).to_contain_text("中文-42", timeout=30_000)  # typed into the sandbox, UTF-8 back
    expect(rows).to_contain_text("renter")  # the renter's uid inside
    _shot(page, "terminal-en")
    page.keyboard.type("exit 5\n")
    expect(page.locator("#terminal-status")).to_contain_text("5", timeout=30_000)

    page.goto(f"{site.url}/p/{iid}/8765/")
    expect(page.locator("h1")).to_contain_text("Directory listing for /")  # the app, through danlu

    # A link for someone without an account: that app only, until revoked.
    page.goto(f"{site.url}/instances/{iid}")
    page.locator("#share-8765").click()
    url = page.locator("#new-link").inner_text()
    assert url.startswith(f"{site.url}/p/{iid}/8765/?danlu_link=dlk_"), url
    guest = chromium.new_context(locale="en-US").new_page()  # type: ignore[attr-defined]
    guest.goto(url)
    expect(guest.locator("h1")).to_contain_text("Directory listing for /")
    assert "danlu_link" not in guest.url  # the token left the address bar (kept as a cookie)
    assert guest.goto(f"{site.url}/api/v1/instances/{iid}").status == 401  # no credential for the API
    assert guest.goto(f"{site.url}/p/{iid}/8766/").status == 401  # nor for another port
    page.goto(f"{site.url}/instances/{iid}")
    page.locator("#links button.danger").first.click()
    expect(page.locator(".flash.ok")).to_contain_text("Link revoked")
    expect(page.locator("#links")).to_have_count(0)
    refused = None
    for _ in range(30):  # a decision is cached for 2 s
        refused = guest.goto(f"{site.url}/p/{iid}/8765/")
        if refused is not None and refused.status == 401:
            break
        guest.wait_for_timeout(500)
    assert refused is not None and refused.status == 401

    with site.new_user("mallory") as m:
        assert m.get(f"/instances/{iid}/ports").status_code == 404
    set_password(site, "mallory", "mallory-password-1")
    other = chromium.new_context(locale="en-US").new_page()  # type: ignore[attr-defined]
    _sign_in(other, site.url, "mallory", "mallory-password-1")
    assert other.goto(f"{site.url}/instances/{iid}/terminal").status == 404
    assert other.goto(f"{site.url}/p/{iid}/8765/").status == 404
