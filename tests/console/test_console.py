"""The web console over real HTTP on SQLite and PostgreSQL (no browser: tests/console/test_browser.py
drives Chromium): sign-in with a slow-KDF password, the session cookie and CSRF on every form,
tenant isolation (another's instance and the operator's pages answer 404), named API tokens that
work and stop working, live cost and logs as server-sent events, and both languages."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx

from tests.conftest import LiveServer, wait_for
from tests.console.helpers import browser, csrf_of, flash, set_password, sign_in

ROOT = Path(__file__).resolve().parents[2]
LOOP = ["sh", "-c", "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.5; done"]


def _renter(live: LiveServer, name: str = "alice", password: str = "alice-password-1") -> httpx.Client:
    live.new_user(name).close()
    set_password(live, name, password)
    return sign_in(live, name, password)


def test_sign_in_needs_the_right_password_and_sets_a_safe_cookie(live: LiveServer) -> None:
    live.new_user("alice").close()
    c = browser(live)
    r = c.get("/instances")
    assert (r.status_code, r.headers["location"]) == (303, "/login?next=/instances")
    # No password set yet: the same answer as a wrong one (nothing tells which names exist).
    for name, password in [("alice", "whatever-it-is"), ("nobody", "whatever-it-is")]:
        r = c.post("/login", data={"name": name, "password": password})
        assert r.status_code == 401 and "danlu_session" not in r.headers.get("set-cookie", "")
        assert "the user name or the password is wrong" in r.text
    set_password(live, "alice", "alice-password-1")
    r = c.post("/login", data={"name": "alice", "password": "alice-password-2"})
    assert r.status_code == 401
    r = c.post("/login", data={"name": "alice", "password": "alice-password-1", "next": "https://evil.example/x"})
    assert r.status_code == 303 and r.headers["location"] == "/instances"  # never off-site
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=lax" in cookie and "path=/" in cookie
    page = c.get("/instances")
    assert page.status_code == 200 and "alice" in page.text
    assert "script-src" not in page.headers["content-security-policy"]  # default-src 'self': no inline script
    assert page.headers["x-content-type-options"] == "nosniff"
    # Stored hashed with argon2id, never in clear.
    with live.platform.db.read() as s:
        stored = s.execute(__import__("sqlalchemy").text("SELECT password_hash FROM users WHERE name='alice'")).scalar()
    assert stored.startswith("$argon2id$") and "alice-password-1" not in stored


def test_sign_out_ends_the_session_on_the_server(live: LiveServer) -> None:
    c = _renter(live)
    stolen = c.cookies.get("danlu_session")
    r = c.post("/logout", data={"csrf": csrf_of(c)})
    assert (r.status_code, r.headers["location"]) == (303, "/login")
    replay = browser(live)
    replay.cookies.set("danlu_session", stolen)
    assert replay.get("/instances").status_code == 303  # the old cookie is worthless at once


def test_every_form_needs_the_sessions_csrf_token_and_changes_nothing_without_it(live: LiveServer) -> None:
    c = _renter(live)
    for data in [{}, {"csrf": "forged"}]:
        r = c.post("/rent", data={**data, "gpu_model": "T4", "gpu_count": "1", "command": "sleep 60"})
        assert r.status_code == 403 and "This form has expired" in r.text
        r = c.post("/account/tokens", data={**data, "name": "laptop"})
        assert r.status_code == 403
    # Another session's token does not do either.
    other = _renter(live, "bob", "bob-password-12")
    r = c.post("/account/tokens", data={"csrf": csrf_of(other), "name": "laptop"})
    assert r.status_code == 403
    assert c.get("/instances").text.count('<tr id="row-') == 0
    assert "No named tokens." in c.get("/account").text


def test_rent_watch_cost_and_logs_stop_and_see_the_ledger_line(live: LiveServer) -> None:
    c = _renter(live)
    csrf = csrf_of(c, "/rent")
    # A100 at 36.00/h is 0.01 a second: a few seconds make a ledger line (a T4's would round to 0).
    r = c.post(
        "/rent",
        data={
            "csrf": csrf,
            "gpu_model": "A100-80GB",
            "gpu_count": "1",
            "plan": "on-demand",
            "image": "host",
            "command": " ".join(LOOP[:2]) + " '" + LOOP[2] + "'",
            "idle_stop": "30m",
        },
    )
    assert r.status_code == 303, r.text
    iid = r.headers["location"].rsplit("/", 1)[1]
    page = c.get(f"/instances/{iid}")
    assert page.status_code == 200 and "Rented." in " ".join(flash(page.text))
    assert "Stops after 30 minutes with every GPU idle" in page.text  # not "30:00", a time of day
    # Live cost: one event a second, the cost growing with billed time.
    seen: list[dict[str, str]] = []
    with c.stream("GET", "/live/instances") as s:
        assert s.headers["content-type"].startswith("text/event-stream")
        for line in s.iter_lines():
            if line.startswith("data:"):
                rows = {row["id"]: row for row in json.loads(line[5:])}
                seen.append(rows[iid])
                if len(seen) == 4:
                    break
    assert [x["status"] for x in seen] == ["running"] * 4
    assert seen[-1]["billed"] > seen[0]["billed"] and seen[0]["cost"].startswith("CN¥")
    # The log streams from an offset as it grows.
    text = ""
    with c.stream("GET", f"/live/instances/{iid}/logs") as s:
        for line in s.iter_lines():
            if line.startswith("data:"):
                text += json.loads(line[5:])["text"]
                if "tick 3" in text:
                    break
    assert text.startswith("tick 1\n")
    # Stop, stating the consequence first; then the ledger names the instance and its seconds.
    assert "Stopping ends GPU billing now" in page.text
    r = c.post(f"/instances/{iid}/stop", data={"csrf": csrf_of(c, f"/instances/{iid}")})
    assert r.status_code == 303
    wait_for(lambda: "s-stopped" in c.get(f"/instances/{iid}").text)
    wait_for(lambda: iid in c.get("/billing").text, timeout=30)
    billing = c.get("/billing").text
    assert re.search(rf"{iid} \(1× A100-80GB, [\d.]+ s", billing), "the ledger line names the instance and its seconds"


def test_another_tenants_pages_answer_404_and_the_operators_too(live: LiveServer) -> None:
    alice = _renter(live)
    r = alice.post("/rent", data={"csrf": csrf_of(alice, "/rent"), "gpu_model": "T4", "command": "sleep 60"})
    iid = r.headers["location"].rsplit("/", 1)[1]
    bob = _renter(live, "bob", "bob-password-12")
    for path in [
        f"/instances/{iid}",
        f"/live/instances/{iid}/logs",
        "/operator/users",
        "/operator/gpus",
        "/instances/i-0000000000",
        "/jobs/j-0000000000",
    ]:
        assert bob.get(path).status_code == 404, path
    r = bob.post(f"/instances/{iid}/stop", data={"csrf": csrf_of(bob)}, headers={"referer": f"{live.url}/instances"})
    assert r.headers["location"] == "/instances"
    assert "no instance" in " ".join(flash(bob.get("/instances").text)).lower()
    assert "s-running" in alice.get(f"/instances/{iid}").text  # bob changed nothing
    assert iid not in bob.get("/instances").text


def test_operator_tops_up_and_stops_a_renters_instance_with_a_reason(live: LiveServer) -> None:
    alice = _renter(live)
    r = alice.post("/rent", data={"csrf": csrf_of(alice, "/rent"), "gpu_model": "T4", "command": "sleep 60"})
    iid = r.headers["location"].rsplit("/", 1)[1]
    set_password(live, "admin", "operator-password-1")
    op = sign_in(live, "admin", "operator-password-1")
    csrf = csrf_of(op, "/operator/users")
    r = op.post("/operator/users/alice/topup", data={"csrf": csrf, "amount": "12.50", "key": "form-1"})
    assert r.status_code == 303
    r = op.post("/operator/users/alice/topup", data={"csrf": csrf, "amount": "12.50", "key": "form-1"})
    assert "Already done" in " ".join(flash(op.get("/operator/users").text))  # a double submit tops up once
    r = op.post("/operator/users/alice/topup", data={"csrf": csrf, "amount": "-5", "key": "form-2"})
    assert r.status_code == 303 and flash(op.get("/operator/users").text)  # refused with its message
    page = op.get("/operator/instances").text
    assert iid in page and "alice" in page
    r = op.post(f"/operator/instances/{iid}/stop", data={"csrf": csrf, "reason": "GPU 3 is overheating"})
    assert r.status_code == 303
    wait_for(lambda: "stopped by the operator: GPU 3 is overheating" in alice.get(f"/instances/{iid}").text)
    ledger = alice.get("/billing").text
    assert "112.50" in ledger or "CN¥112" in ledger or "topup" in ledger


def test_named_api_tokens_work_for_the_api_and_stop_when_revoked(live: LiveServer) -> None:
    c = _renter(live)
    r = c.post("/account/tokens", data={"csrf": csrf_of(c), "name": "laptop"})
    token = re.search(r'id="new-token">([^<]+)<', r.text).group(1)  # type: ignore[union-attr]
    api = live.client(token)
    assert api.get("/me").json()["name"] == "alice"
    tid = api.get("/tokens").json()[0]["id"]
    assert "token" not in api.get("/tokens").json()[0] or api.get("/tokens").json()[0]["token"] is None
    r = c.post(f"/account/tokens/{tid}/revoke", data={"csrf": csrf_of(c)})
    assert r.status_code == 303
    assert api.get("/me").status_code == 401  # at once: the API's user cache reads api_tokens too
    other = _renter(live, "bob", "bob-password-12")
    r = other.post(f"/account/tokens/{tid}/revoke", data={"csrf": csrf_of(other)})
    assert r.headers["location"] == "/instances"  # no Referer: a safe page, never the form's own URL
    assert "no API token" in " ".join(flash(other.get("/instances").text))


def test_changing_the_password_signs_every_browser_out(live: LiveServer) -> None:
    c = _renter(live)
    second = sign_in(live, "alice", "alice-password-1")
    r = c.post("/account/password", data={"csrf": csrf_of(c), "current": "wrong-password", "new": "a-new-password-1"})
    assert r.status_code == 303 and second.get("/instances").status_code == 200  # wrong current: nothing changed
    r = c.post("/account/password", data={"csrf": csrf_of(c), "current": "alice-password-1", "new": "short"})
    assert second.get("/instances").status_code == 200
    r = c.post("/account/password", data={"csrf": csrf_of(c), "current": "alice-password-1", "new": "a-new-password-1"})
    assert (r.status_code, r.headers["location"]) == (303, "/login")
    assert second.get("/instances").status_code == 303
    assert sign_in(live, "alice", "a-new-password-1").get("/instances").status_code == 200


def test_the_browsers_language_picks_simplified_chinese_and_the_switch_keeps_it(live: LiveServer) -> None:
    live.new_user("alice").close()
    set_password(live, "alice", "alice-password-1")
    zh = sign_in(live, "alice", "alice-password-1", lang="zh-CN,zh;q=0.9,en;q=0.5")
    page = zh.get("/instances").text
    assert '<html lang="zh-CN">' in page and "实例" in page and "退出登录" in page
    assert "Instances</a>" not in page
    en = sign_in(live, "alice", "alice-password-1", lang="zh-CN")
    r = en.get("/lang/en?next=/billing")
    assert (r.status_code, r.headers["location"]) == (303, "/billing")
    assert "Balance" in en.get("/billing").text  # the cookie beats Accept-Language
    assert en.get("/lang/en?next=//evil.example").headers["location"] == "/instances"


def test_every_console_message_has_a_simplified_chinese_translation() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "i18n.py"), "--check"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "zh_CN: 0 untranslated" in out.stdout


def test_fields_refused_before_the_handler_runs_answer_a_page_not_a_500(live: LiveServer) -> None:
    c = _renter(live)
    r = c.get("/offers", params={"gpu": "x" * 70})
    assert r.status_code == 422 and "gpu" in r.text and "internal_error" not in r.text
    r = c.post("/rent", data={"csrf": csrf_of(c, "/rent")}, headers={"referer": f"{live.url}/rent"})
    assert (r.status_code, r.headers["location"]) == (303, "/rent")
    assert "Field required" in " ".join(flash(c.get("/rent").text))


def test_the_instance_page_explains_its_cost_like_danlu_cost_and_top_shows_live_use(live: LiveServer) -> None:
    c = _renter(live)
    r = c.post("/rent", data={"csrf": csrf_of(c, "/rent"), "gpu_model": "A100-80GB", "command": "sleep 60"})
    iid = r.headers["location"].rsplit("/", 1)[1]
    api = live.client(
        c.post("/account/tokens", data={"csrf": csrf_of(c), "name": "t"}).text.split('id="new-token">')[1].split("<")[0]
    )
    wait_for(lambda: api.get(f"/instances/{iid}/cost").json()["lines"], timeout=30)
    assert iid in c.get("/top").text  # running: it is on the live-use page
    c.post(f"/instances/{iid}/stop", data={"csrf": csrf_of(c)})
    wait_for(lambda: api.get(f"/instances/{iid}").json()["status"] == "stopped")
    cost = api.get(f"/instances/{iid}/cost").json()
    page = c.get(f"/instances/{iid}").text
    assert page.count('<span class="tag">not yet posted</span>') <= len(cost["lines"]) >= 1
    total = re.search(r'id="cost-total">([^<]+)<', page)
    assert total is not None and total.group(1) == "CN¥" + cost["cost"], (total, cost)
    assert iid not in c.get("/top").text  # stopped: no longer there


def test_a_refusal_reads_in_chinese_with_the_english_specifics_beside_it(live: LiveServer) -> None:
    """Issue 28, finding 12: the server's error messages were English on a 简体中文 console."""
    live.new_user("alice").close()
    set_password(live, "alice", "alice-password-1")
    zh = sign_in(live, "alice", "alice-password-1", lang="zh-CN")
    form = {"csrf": csrf_of(zh, "/rent"), "gpu_model": "A100-80GB", "gpu_count": "64", "plan": "on-demand"}
    r = zh.post("/rent", data={**form, "image": "host", "command": "true"}, headers={"referer": f"{live.url}/rent"})
    assert (r.status_code, r.headers["location"]) == (303, "/rent")
    shown = " ".join(flash(zh.get("/rent").text))
    assert "一台主机放不下这么多块该型号的 GPU" in shown and "A100-80GB GPUs fit on one host" in shown, shown
    page = zh.get("/instances/i-0000000000000000")
    shown = page.text.split("</code>")[1][:80]  # the error page's sentence, after its code
    assert page.status_code == 404 and "没有" in shown and "no such instance" not in shown, shown
