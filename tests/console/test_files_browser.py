"""The console's files page in a real browser (Debian's Chromium through Playwright): files dropped on the upload
form go into the rental (console.js's drop zone), and the folder lists them with their download links."""

from __future__ import annotations

import pytest

from tests.conftest import LiveServer
from tests.console.helpers import set_password
from tests.console.test_browser import _sign_in, chromium, site  # noqa: F401 - fixtures

pytestmark = [pytest.mark.slow(seconds=20), pytest.mark.timeout(300)]


def test_files_dropped_on_the_page_go_into_the_rental(site: LiveServer, chromium: object) -> None:  # noqa: F811
    from playwright.sync_api import expect

    with site.new_user("dora", topup="500.00") as c:
        r = c.post("/instances", json={"gpu_model": "T4", "command": ["sleep", "3000"]})
        assert r.status_code == 201, r.text
        iid = r.json()["id"]
    set_password(site, "dora", "dora-password-1")
    ctx = chromium.new_context(locale="en-US", viewport={"width": 1200, "height": 800})  # type: ignore[attr-defined]
    page = ctx.new_page()
    _sign_in(page, site.url, "dora", "dora-password-1")
    page.goto(f"{site.url}/instances/{iid}")
    page.locator("#open-files").click()
    expect(page.locator("#entries")).to_contain_text("This folder is empty.")
    dropped = page.evaluate_handle(
        "() => { const dt = new DataTransfer();"
        " dt.items.add(new File(['epoch 1\\n'], 'dropped 1.txt', {type: 'text/plain'}));"
        " dt.items.add(new File([new Uint8Array(3000)], 'zeros.bin')); return dt; }"
    )
    page.dispatch_event("#upload-form", "drop", {"dataTransfer": dropped})
    expect(page.locator(".flash.ok")).to_contain_text("Uploaded 2 files")
    expect(page.locator("#entries")).to_contain_text("dropped 1.txt")
    expect(page.locator("#entries")).to_contain_text("zeros.bin")
    with page.expect_download() as got:
        page.locator("#entries tr", has_text="dropped 1.txt").locator("a.download").click()
    from pathlib import Path

    path = Path(got.value.path())
    assert got.value.suggested_filename == "dropped 1.txt"
    assert path.read_bytes() == b"epoch 1\n"
