"""The console's work pages over real HTTP on SQLite and PostgreSQL: submitting a batch job,
an instance's start/stop schedule, its usage chart as SVG, the event feed and webhooks. Every
outcome is checked through the API (what the form did is what `danlu` sees), and another renter
gets 404 and changes nothing."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime

import httpx
from sqlalchemy import delete

from danlu.db.models import MetricSample
from tests.conftest import LiveServer, wait_for
from tests.console.helpers import csrf_of, flash, set_password, sign_in

SVG = "{http://www.w3.org/2000/svg}"
HOOK = "https://1.1.1.1/danlu-hook"  # a public address: no DNS needed


def _renter(live: LiveServer, name: str = "alice") -> tuple[httpx.Client, httpx.Client]:
    """The renter's API client (their operator-issued token) and a signed-in browser."""
    api = live.new_user(name)
    set_password(live, name, f"{name}-password-1")
    return api, sign_in(live, name, f"{name}-password-1")


def _rent(api: httpx.Client, **extra: object) -> str:
    r = api.post("/instances", json={"gpu_model": "T4", "command": ["sleep", "60"], **extra})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


# ---------------------------------------------------------------------------- jobs


def test_a_job_submitted_with_the_form_is_queued_with_the_chosen_gpus(live: LiveServer) -> None:
    api, c = _renter(live)
    assert 'href="/jobs/new"' in c.get("/jobs").text  # the "Submit a job" button
    form = {
        "csrf": csrf_of(c, "/jobs"),
        "command": "python3 -c 'print(\"hello from a job\")'",
        "gpus": "2",
        "gpu_types": ["A100-80GB", "T4"],
        "est_duration": "3600",
        "priority": "high",
        "deadline": "2999-12-03T08:00:00+08:00",
        "idle_stop": "30m",
        "max_duration": "6h",
    }
    r = c.post("/jobs/new", data=form)
    assert r.status_code == 303, r.text
    job_id = r.headers["location"].removeprefix("/jobs/")
    assert job_id.startswith("j-")
    page = c.get(f"/jobs/{job_id}")
    assert page.status_code == 200 and "Submitted" in " ".join(flash(page.text))
    jobs = api.get("/jobs").json()
    assert [j["id"] for j in jobs] == [job_id]
    job = jobs[0]
    assert job["command"] == ["python3", "-c", 'print("hello from a job")']  # shlex.split, quotes and all
    assert (job["gpus"], job["gpu_types"], job["priority"]) == (2, ["A100-80GB", "T4"], "high")
    assert datetime.fromisoformat(job["deadline"]) == datetime.fromisoformat(form["deadline"])  # type: ignore[arg-type]
    # An interruptible job of one model, the form's other switch (T4 gets an interruptible price).
    with live.admin() as a:
        price = {"price_per_hour": "3.60", "interruptible_price_per_hour": "1.20"}
        assert a.put("/admin/prices/T4", json=price).status_code == 200
    r = c.post("/jobs/new", data={**form, "gpus": "1", "gpu_types": ["T4"], "interruptible": "on", "deadline": ""})
    assert r.status_code == 303, r.text
    second = api.get(r.headers["location"]).json()  # /jobs/ID, the API's path too
    assert (second["gpus"], second["gpu_types"], second["interruptible"], second["deadline"]) == (1, ["T4"], True, None)
    # An elastic job: a range (the API's gpus_max); a range that is not one is refused on the form, nothing queued
    bad = c.post("/jobs/new", data={**form, "gpus": "2", "gpus_max": "2", "deadline": ""})
    assert bad.status_code == 422 and "--gpus 2-8" in bad.text and len(api.get("/jobs").json()) == 2
    r = c.post("/jobs/new", data={**form, "gpus": "1", "gpus_max": "2", "deadline": ""})
    assert r.status_code == 303, r.text
    third = api.get(r.headers["location"]).json()
    assert (third["gpus"], third["gpus_max"]) == (1, 2)
    assert "(1–2) ×" in c.get(r.headers["location"]).text  # its range on its page


def test_a_pipeline_step_from_the_form_runs_after_a_job_in_a_rentals_workspace(live: LiveServer) -> None:
    """``danlu run --after JOB --workspace ID`` in the console: both are chosen from the renter's own."""
    api, c = _renter(live)
    first = api.post("/jobs", json={"command": ["sh", "-c", "echo pre"], "gpus": 1, "gpu_types": ["T4"]}).json()["id"]
    rental = _rent(api, name="data")
    form = {"csrf": csrf_of(c, "/jobs"), "command": "python3 train.py", "gpus": "1", "gpu_types": ["T4"]}
    page = c.get("/jobs/new").text
    assert f'<option value="{first}">' in page and f'<option value="{rental}">' in page and "“data”" in page
    mallory_api, _ = _renter(live, "mallory")
    theirs = mallory_api.post("/jobs", json={"command": ["true"], "gpus": 1, "gpu_types": ["T4"]}).json()["id"]
    for bad, code in [({"after": theirs}, 404), ({"workspace": "i-0000000000"}, 404), ({"workspace": "x"}, 422)]:
        r = c.post("/jobs/new", data={**form, **bad})
        assert r.status_code == code and 'id="form-error"' in r.text, (bad, r.text[-500:])
    assert [j["id"] for j in api.get("/jobs").json()] == [first]  # nothing was submitted
    r = c.post("/jobs/new", data={**form, "after": first, "workspace": rental})
    assert r.status_code == 303, r.text
    job = api.get(r.headers["location"]).json()
    assert (job["after"], job["workspace_of"]) == (first, rental), job
    shown = c.get(r.headers["location"]).text
    assert f'href="/jobs/{first}"' in shown and f'href="/instances/{rental}"' in shown


def test_a_bad_deadline_changes_nothing_and_shows_the_error_on_the_form(live: LiveServer) -> None:
    api, c = _renter(live)
    csrf = csrf_of(c, "/jobs")
    base = {"csrf": csrf, "command": "python3 train.py --epochs 3", "gpus": "1", "gpu_types": ["T4"]}
    for deadline, message in [
        ("next tuesday", "deadline must be ISO-8601 with a timezone"),
        ("2030-01-01T08:00:00", "deadline must be ISO-8601 with a timezone"),  # no zone
        ("2001-01-01T08:00:00Z", "in the past"),
    ]:
        r = c.post("/jobs/new", data={**base, "deadline": deadline})
        assert r.status_code == 422, (deadline, r.text)
        assert message in r.text, deadline
        # The form comes back as typed, so nothing has to be entered again.
        assert 'value="python3 train.py --epochs 3"' in r.text and f'value="{deadline}"' in r.text
        assert 'value="T4" checked' in r.text
    for bad in [{"command": "python3 'unbalanced"}, {"gpus": "two"}, {"est_duration": "soon"}, {"command": ""}]:
        r = c.post("/jobs/new", data={**base, **bad})
        assert r.status_code == 422 and 'id="form-error"' in r.text, bad
    assert api.get("/jobs").json() == []
    # Without the session's CSRF token nothing is read at all.
    r = c.post("/jobs/new", data={**base, "csrf": "forged"})
    assert r.status_code == 403 and api.get("/jobs").json() == []


def test_the_submit_button_opens_the_job_form(live: LiveServer) -> None:
    # /jobs/new is a page of its own, not the job "new" of renter.py's /jobs/{job_id}: the *_pages
    # routers are registered first (danlu.console.install).
    _, c = _renter(live)
    page = c.get("/jobs/new")
    assert page.status_code == 200, page.text
    assert 'id="job-form"' in page.text
    assert 'name="gpu_types" value="A100-80GB"' in page.text and 'name="gpu_types" value="T4"' in page.text


# ---------------------------------------------------------------------------- schedules


def test_a_schedule_set_in_the_form_is_the_apis_and_another_renter_gets_404(live: LiveServer) -> None:
    api, c = _renter(live)
    iid = _rent(api)
    page = c.get(f"/instances/{iid}/schedule")
    assert page.status_code == 200 and 'id="schedule-none"' in page.text
    assert '<strong id="timezone">UTC</strong>' in page.text  # the deployment's zone (live: the default)
    csrf = csrf_of(c, f"/instances/{iid}/schedule")
    r = c.post(f"/instances/{iid}/schedule", data={"csrf": csrf, "stop": "23:00", "start": "08:00", "days": "mon-fri"})
    assert (r.status_code, r.headers["location"]) == (303, f"/instances/{iid}/schedule")
    sched = api.get(f"/instances/{iid}").json()["schedule"]
    assert (sched["stop"], sched["start"], sched["days"], sched["timezone"]) == ("23:00", "08:00", ["weekdays"], "UTC")
    page = c.get(f"/instances/{iid}/schedule")
    assert "Schedule saved" in " ".join(flash(page.text))
    assert sched["description"] in page.text and 'id="schedule-stop">23:00<' in page.text
    # A bad time: the API's error, nothing changed.
    headers = {"referer": f"{live.url}/instances/{iid}/schedule"}
    r = c.post(f"/instances/{iid}/schedule", data={"csrf": csrf, "stop": "25:00", "days": "daily"}, headers=headers)
    assert r.status_code == 303
    assert "HH:MM" in " ".join(flash(c.get(r.headers["location"]).text))
    assert api.get(f"/instances/{iid}").json()["schedule"] == sched
    # Another renter: 404 for the page; their forms change nothing.
    _, bob = _renter(live, "bob")
    assert bob.get(f"/instances/{iid}/schedule").status_code == 404
    bob_csrf = csrf_of(bob, "/events")
    r = bob.post(f"/instances/{iid}/schedule", data={"csrf": bob_csrf, "stop": "01:00"}, headers=headers)
    assert r.status_code == 303
    r = bob.post(f"/instances/{iid}/schedule/clear", data={"csrf": bob_csrf}, headers=headers)
    assert r.status_code == 303
    assert api.get(f"/instances/{iid}").json()["schedule"] == sched
    # The owner clears it.
    r = c.post(f"/instances/{iid}/schedule/clear", data={"csrf": csrf})
    assert r.status_code == 303
    assert api.get(f"/instances/{iid}").json()["schedule"] is None
    assert 'id="schedule-none"' in c.get(f"/instances/{iid}/schedule").text


# ---------------------------------------------------------------------------- chart


def test_the_usage_chart_is_svg_for_the_owner_and_404_for_another(live: LiveServer) -> None:
    api, c = _renter(live)
    iid = _rent(api)
    wait_for(lambda: any(g["points"] for g in api.get(f"/instances/{iid}/metrics").json()["gpus"]), timeout=20)
    r = c.get(f"/instances/{iid}/chart.svg")
    assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml")
    root = ET.fromstring(r.text)
    assert root.tag == f"{SVG}svg"
    assert root.findall(f".//{SVG}polyline"), "the samples are drawn"
    assert f'src="/instances/{iid}/chart.svg"' in c.get(f"/instances/{iid}").text
    _, bob = _renter(live, "bob")
    r = bob.get(f"/instances/{iid}/chart.svg")
    assert r.status_code == 404 and "<svg" not in r.text
    assert c.get("/instances/i-0000000000/chart.svg").status_code == 404
    assert c.get(f"/instances/{iid}/chart.svg?since=forever").status_code == 422
    # Stopped, with no sample kept: still a chart (the page shows it as an image), saying so.
    assert api.post(f"/instances/{iid}/stop").status_code == 200
    wait_for(lambda: api.get(f"/instances/{iid}").json()["status"] == "stopped")
    with live.platform.db.write() as s:
        s.execute(delete(MetricSample).where(MetricSample.instance_id == iid))
    r = c.get(f"/instances/{iid}/chart.svg")
    assert r.status_code == 200 and r.headers["content-type"].startswith("image/svg+xml")
    root = ET.fromstring(r.text)
    assert "No samples yet" in "".join(root.itertext()) and not root.findall(f".//{SVG}polyline")


# ---------------------------------------------------------------------------- events and webhooks


def test_the_event_feed_shows_a_stop_of_a_rented_instance(live: LiveServer) -> None:
    api, c = _renter(live)
    iid = _rent(api, max_duration="1s")  # the platform stops it after a second: a max_duration event
    events = wait_for(lambda: [e for e in api.get("/events").json() if e["instance_id"] == iid], timeout=20)
    assert isinstance(events, list) and events[0]["kind"] == "max_duration"
    page = c.get("/events")
    assert page.status_code == 200
    assert f'id="event-{events[0]["id"]}"' in page.text and f'href="/instances/{iid}"' in page.text
    assert "max_duration" in page.text
    assert f'id="event-{events[0]["id"]}"' in c.get("/events?kind=max_duration").text
    assert f'id="event-{events[0]["id"]}"' not in c.get("/events?kind=idle_stop").text
    assert c.get("/events?kind=DROP TABLE").status_code == 422
    _, bob = _renter(live, "bob")
    assert iid not in bob.get("/events").text and "No events yet." in bob.get("/events").text


def test_a_webhook_added_in_the_form_is_the_apis_and_removing_it_removes_it(live: LiveServer) -> None:
    api, c = _renter(live)
    assert "No webhooks." in c.get("/webhooks").text
    csrf = csrf_of(c, "/webhooks")
    r = c.post("/webhooks/add", data={"csrf": csrf, "url": HOOK, "kinds": ["idle_stop", "max_duration"]})
    assert r.status_code == 200, r.text
    hooks = api.get("/webhooks").json()
    assert [(h["url"], h["kinds"], h["secret"]) for h in hooks] == [(HOOK, ["idle_stop", "max_duration"], None)]
    secret = r.text.split('id="webhook-secret">', 1)[1].split("<", 1)[0]
    assert secret.startswith("whsec_") and len(secret) > 20
    listing = c.get("/webhooks").text
    assert f'id="webhook-{hooks[0]["id"]}"' in listing and secret not in listing  # shown once only
    # A private address is refused with the API's message; nothing added.
    headers = {"referer": f"{live.url}/webhooks"}
    r = c.post("/webhooks/add", data={"csrf": csrf, "url": "http://127.0.0.1:9/x"}, headers=headers)
    assert r.status_code == 303 and "not a public address" in " ".join(flash(c.get("/webhooks").text))
    assert len(api.get("/webhooks").json()) == 1
    # Another renter cannot remove it (nor see it).
    _, bob = _renter(live, "bob")
    assert HOOK not in bob.get("/webhooks").text
    r = bob.post(f"/webhooks/{hooks[0]['id']}/remove", data={"csrf": csrf_of(bob, "/webhooks")}, headers=headers)
    assert r.status_code == 303 and "no webhook" in " ".join(flash(bob.get("/webhooks").text))
    assert len(api.get("/webhooks").json()) == 1
    r = c.post(f"/webhooks/{hooks[0]['id']}/remove", data={"csrf": csrf})
    assert (r.status_code, r.headers["location"]) == (303, "/webhooks")
    assert api.get("/webhooks").json() == []
    assert "No webhooks." in c.get("/webhooks").text
