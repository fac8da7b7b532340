"""Resize in the console (issue 26, item 3): a stopped instance's page links to "Start on other GPUs",
which shows the new shape's hourly price before the button that starts it at exactly that price; the
same page in 简体中文. Real HTTP, real sandbox, both databases."""

from __future__ import annotations

import re

import pytest

from tests.conftest import LiveServer, wait_for
from tests.console.helpers import csrf_of, flash, set_password, sign_in

# One database: pages over the API's code paths, which tests/api/test_resize.py runs on both databases.
pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


def test_a_stopped_instance_starts_on_other_gpus_at_the_price_the_page_showed(live: LiveServer) -> None:
    with live.new_user("zoe", topup="500.00") as api:
        iid = api.post("/instances", json={"gpu_model": "T4", "command": ["sleep", "60"]}).json()["id"]
        assert api.post(f"/instances/{iid}/stop").status_code == 200
        wait_for(lambda: api.get(f"/instances/{iid}").json()["status"] == "stopped")
    set_password(live, "zoe", "zoe-password-1")
    c = sign_in(live, "zoe", "zoe-password-1")
    assert f'href="/instances/{iid}/resize"' in c.get(f"/instances/{iid}").text
    picked = c.get(f"/instances/{iid}/resize", params={"gpu_model": "A100-80GB", "gpu_count": "2"})
    assert picked.status_code == 200
    assert "1× T4 → 2× A100-80GB: <strong>CN¥72.00</strong> per hour, before discounts." in picked.text
    assert 'name="expected_price" value="72.00"' in picked.text
    # The operator changes the price after the page was shown: the start is refused, nothing changes.
    with live.admin() as a:
        assert a.put("/admin/prices/A100-80GB", json={"price_per_hour": "40.00"}).status_code == 200
    form = {"csrf": csrf_of(c, f"/instances/{iid}"), "gpu_model": "A100-80GB", "gpu_count": "2"}
    refused = c.post(f"/instances/{iid}/start", data={**form, "expected_price": "72.00"}, follow_redirects=True)
    assert "costs 80.00 CNY/h now, not the 72.00 you confirmed" in refused.text, refused.text[-2000:]
    assert "s-stopped" in c.get(f"/instances/{iid}").text  # nothing started
    r = c.post(f"/instances/{iid}/start", data={**form, "expected_price": "80.00"})
    assert r.status_code == 303, r.text
    page = c.get(f"/instances/{iid}").text
    assert "Started on 2× A100-80GB with the same workspace." in " ".join(flash(page))
    zh = sign_in(live, "zoe", "zoe-password-1", lang="zh-CN")
    assert "每小时（折扣前）。" in zh.get(f"/instances/{iid}/resize", params={"gpu_model": "T4", "gpu_count": "1"}).text
    # another renter's instance: 404, as every page
    live.new_user("yan").close()
    set_password(live, "yan", "yan-password-1")
    other = sign_in(live, "yan", "yan-password-1")
    assert other.get(f"/instances/{iid}/resize").status_code == 404


def test_the_advisor_links_its_options_here_to_renting_and_to_resizing_a_stopped_rental(live: LiveServer) -> None:
    """Issue 26, item 3: "more GPUs?" answered by the advisor links to the resize. Its rent link was never shown
    (the page compared the provider with "danlu", the advisor says "this platform")."""
    with live.new_user("abe", topup="500.00") as api:
        iid = api.post("/instances", json={"gpu_model": "T4", "command": ["sleep", "60"]}).json()["id"]
        assert api.post(f"/instances/{iid}/stop").status_code == 200
        wait_for(lambda: api.get(f"/instances/{iid}").json()["status"] == "stopped")
    set_password(live, "abe", "abe-password-1")
    c = sign_in(live, "abe", "abe-password-1")
    assert f'href="/advisor?instance={iid}"' in c.get(f"/instances/{iid}/resize").text
    page = c.get("/advisor", params={"params": "7e9", "task": "finetune", "tokens": "1e8", "instance": iid}).text
    assert f'name="instance" value="{iid}"' in page  # the form keeps it
    resizes = re.findall(rf'href="/instances/{iid}/resize\?gpu_model=([^&"]+)&amp;gpu_count=(\d+)"', page)
    rents = re.findall(r'class="rent-link" href="/rent\?gpu=([^&"]+)&amp;count=(\d+)"', page)
    assert rents and resizes == rents, (rents, resizes)
    assert any(int(n) > 1 for _, n in resizes)  # a larger model: more GPUs than the rental has
    model, count = resizes[0]
    shown = c.get(f"/instances/{iid}/resize", params={"gpu_model": model, "gpu_count": count}).text
    assert 'id="resize-quote"' in shown  # the price first, then the button
    assert (
        f'id="r-count" name="gpu_count" type="number" min="1" max="64" value="{count}"'
        in c.get("/rent", params={"gpu": model, "count": count}).text
    )
    assert "resize-link" not in c.get("/advisor", params={"params": "7e9", "tokens": "1e8"}).text
    live.new_user("ben").close()
    set_password(live, "ben", "ben-password-1")
    other = sign_in(live, "ben", "ben-password-1")
    assert other.get("/advisor", params={"params": "1e9", "instance": iid}).status_code == 404


def test_snapshots_in_the_console_take_list_rent_from_and_remove(live: LiveServer) -> None:
    with live.new_user("una", topup="500.00") as api:
        cmd = ["sh", "-c", "echo kept > note; echo made; sleep 60"]
        iid = api.post("/instances", json={"gpu_model": "T4", "command": cmd}).json()["id"]
        wait_for(lambda: "made" in api.get(f"/instances/{iid}/logs").json()["text"])
        assert api.post(f"/instances/{iid}/stop").status_code == 200
        wait_for(lambda: api.get(f"/instances/{iid}").json()["status"] == "stopped")
        set_password(live, "una", "una-password-1")
        c = sign_in(live, "una", "una-password-1")
        with live.admin() as adm:  # 1 MiB (the note, rounded up) at 300.00 per GB-month: 0.01 a day
            assert adm.put("/admin/storage", json={"snapshot_price_gb_month": "300.00"}).status_code == 200
        r = c.post(f"/instances/{iid}/snapshots", data={"csrf": csrf_of(c, f"/instances/{iid}"), "name": "before"})
        assert r.status_code == 303, r.text
        said = " ".join(flash(c.get(f"/instances/{iid}").text))
        assert said.startswith("Snapshot s-") and "stored new" in said, said
        [snap] = api.get("/snapshots").json()
        sid = snap["id"]
        assert (snap["cost_per_day"], snap["currency"]) == ("0.01", "CNY")
        listing = c.get("/instances").text
        assert f'id="snap-{sid}"' in listing and "before" in listing
        row = listing.split(f'id="snap-{sid}"')[1].split("</tr>")[0]
        assert "0.01" in row, row  # what keeping it costs a day
        assert f'<option value="{sid}">From snapshot {sid} (before)' in c.get("/rent").text
        form = {"csrf": csrf_of(c, "/rent"), "gpu_model": "T4", "gpu_count": "1", "plan": "on-demand", "image": "host"}
        r = c.post("/rent", data={**form, "command": "sh -c 'cat note; sleep 60'", "from_snapshot": sid})
        assert r.status_code == 303, r.text
        new = r.headers["location"].rsplit("/", 1)[1]
        wait_for(lambda: "kept" in api.get(f"/instances/{new}/logs").json()["text"])
        r = c.post(f"/snapshots/{sid}/remove", data={"csrf": csrf_of(c, "/instances")})
        assert r.status_code == 303 and f'id="snap-{sid}"' not in c.get("/instances").text
        assert api.get("/snapshots").json() == []
