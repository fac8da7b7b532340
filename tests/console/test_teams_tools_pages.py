"""The console's teams page and its tools (compare, simulate) over real HTTP on SQLite and
PostgreSQL: every form's outcome is checked through the API (a team made on the page is the API's
team; a refused form changes nothing), another renter does not see a team, and the tools' tables
are the advisor's and the simulator's own numbers."""

from __future__ import annotations

import html
import re
import time
import weakref
from decimal import Decimal

import httpx
from sqlalchemy import select

from danlu.advisor import service as advisor
from danlu.db.models import Instance, Team, User
from danlu.scheduling.replay import DEMO_SCENARIO, demo_dir
from danlu.scheduling.scenario import load_scenario
from danlu.scheduling.simulator import SimSetup, simulate, summarize, to_requests
from danlu.scheduling.traces import read_trace
from tests.conftest import LiveServer, wait_for
from tests.console.helpers import csrf_of, flash, set_password, sign_in

CMD = ["sh", "-c", "exec sleep 600"]
_CSRF: weakref.WeakKeyDictionary[httpx.Client, str] = weakref.WeakKeyDictionary()


def _person(live: LiveServer, name: str) -> tuple[httpx.Client, httpx.Client]:
    """A new renter: their API client (bearer token) and a browser signed in with a password."""
    api = live.new_user(name)
    set_password(live, name, f"{name}-password-1")
    return api, sign_in(live, name, f"{name}-password-1")


def _post(c: httpx.Client, live: LiveServer, path: str, **data: str) -> str:
    """Submit a form from the teams page as a browser does (its CSRF token, its Referer) and follow
    the redirect: the flash notices shown on the page it lands on."""
    if c not in _CSRF:  # a session's token stays the same: read it once
        _CSRF[c] = csrf_of(c, "/teams")
    r = c.post(path, data={"csrf": _CSRF[c], **data}, headers={"referer": f"{live.url}/teams"})
    assert r.status_code == 303, r.text
    assert r.headers["location"] == "/teams"
    return " ".join(html.unescape(m) for m in flash(c.get("/teams").text))


def _members(api: httpx.Client, team: str) -> list[tuple[str, str, int | None]]:
    r = api.get(f"/teams/{team}")
    assert r.status_code == 200, r.text
    return [(m["user"], m["role"], m["gpu_quota"]) for m in r.json()["members"]]


def _default_team_of(live: LiveServer, name: str) -> str | None:
    with live.platform.db.read() as s:
        team_id = s.scalars(select(User.default_team_id).where(User.name == name)).one()
        return None if team_id is None else s.scalars(select(Team.name).where(Team.id == team_id)).one()


def test_create_a_team_add_and_change_members_see_its_balance_and_rent_on_it_by_default(live: LiveServer) -> None:
    alice_api, alice = _person(live, "alice")
    assert 'id="no-teams"' in alice.get("/teams").text

    notice = _post(alice, live, "/teams", name="lab")
    assert "Team created" in notice and "lab" in notice
    assert [(t["name"], t["role"]) for t in alice_api.get("/teams").json()] == [("lab", "owner")]
    # A bad name is the API's error (its code's message), and makes nothing.
    assert "team names are 2-63 characters" in _post(alice, live, "/teams", name="Lab!")
    assert "already exists" in _post(alice, live, "/teams", name="lab")
    assert [t["name"] for t in alice_api.get("/teams").json()] == ["lab"]

    # A member made through the API, added on the page with a role.
    live.new_user("bob").close()
    assert "Member added" in _post(alice, live, "/teams/lab/members", user="bob", role="member")
    assert _members(alice_api, "lab") == [("alice", "owner", None), ("bob", "member", None)]
    # Unknown user, bad quota, someone already in: error notices, nothing changes.
    assert "nobody" in _post(alice, live, "/teams/lab/members", user="nobody", role="member")
    assert "quota" in _post(alice, live, "/teams/lab/members", user="bob", role="member", gpu_quota="two")
    assert "already in lab" in _post(alice, live, "/teams/lab/members", user="bob", role="viewer")
    assert "a role is one of" in _post(alice, live, "/teams/lab/members", user="carol")  # no role at all
    assert _members(alice_api, "lab") == [("alice", "owner", None), ("bob", "member", None)]

    # Change bob's role and quota, then take the cap off again.
    assert "Member changed" in _post(alice, live, "/teams/lab/members/bob/change", role="viewer", gpu_quota="2")
    assert _members(alice_api, "lab")[1] == ("bob", "viewer", 2)
    assert "Member changed" in _post(alice, live, "/teams/lab/members/bob/change", role="viewer", gpu_quota="")
    assert _members(alice_api, "lab")[1] == ("bob", "viewer", None)
    # The last owner cannot make herself a viewer.
    assert "needs an owner" in _post(alice, live, "/teams/lab/members/alice/change", role="viewer")
    assert _members(alice_api, "lab")[0] == ("alice", "owner", None)

    # The team's balance, as the API has it.
    with live.admin() as adm:
        r = adm.post("/admin/teams/lab/topup", json={"amount": "12.34"}, headers={"Idempotency-Key": "lab-t1"})
        assert r.status_code == 200, r.text
    assert alice_api.get("/balance", params={"team": "lab"}).json()["balance"] == "12.34"
    page = alice.get("/teams").text
    balance = re.search(r'id="balance-lab">([^<]*)<', page)
    assert balance is not None and "12.34" in balance.group(1)

    # Rent on this team by default: the account a rental without --team is paid from.
    assert _default_team_of(live, "alice") is None
    assert "lab" in _post(alice, live, "/teams/default", team="lab")
    assert _default_team_of(live, "alice") == "lab"
    page = alice.get("/teams").text
    assert 'id="default-lab"' in page and 'id="make-default-lab"' not in page
    rented = alice_api.post("/instances", json={"gpu_model": "T4", "command": CMD})
    assert rented.status_code == 201, rented.text
    iid = rented.json()["id"]
    with live.platform.db.read() as s:  # on the team's account: the team pays, not alice
        on = s.execute(select(Instance.billing_account_id).where(Instance.id == iid)).scalar_one()
        assert on == s.execute(select(Team.billing_account_id).where(Team.name == "lab")).scalar_one()
    stopped = alice_api.post(f"/instances/{iid}/stop")
    assert stopped.status_code == 200, (stopped.text, alice_api.get(f"/instances/{iid}").json())
    assert "personal account" in _post(alice, live, "/teams/default", team="")
    assert _default_team_of(live, "alice") is None


def test_a_member_who_does_not_manage_and_an_outsider_change_nothing(live: LiveServer) -> None:
    dora_api, dora = _person(live, "dora")
    bob_api, bob = _person(live, "bob")
    with live.new_user("alice") as alice_api:
        live.new_user("carl").close()
        assert alice_api.post("/teams", json={"name": "lab"}).status_code == 201
        assert alice_api.post("/teams/lab/members", json={"user": "bob", "role": "member"}).status_code == 201
        before = _members(alice_api, "lab")

        # bob (a member) sees the team and its balance, but no form to manage it.
        page = bob.get("/teams").text
        assert 'id="team-lab"' in page and 'id="balance-lab"' in page
        assert 'id="add-lab"' not in page and 'id="change-lab-alice"' not in page
        assert 'id="remove-lab-alice"' not in page and 'id="remove-lab-bob"' in page  # he may only leave
        # Posting the forms anyway: the API's refusal as an error notice, and nothing changes.
        for path, data in [
            ("/teams/lab/members", {"user": "carl", "role": "member"}),
            ("/teams/lab/members/alice/change", {"role": "viewer"}),
            ("/teams/lab/members/bob/change", {"role": "admin"}),
            ("/teams/lab/members/alice/remove", {}),
        ]:
            notice = _post(bob, live, path, **data)
            assert "needs the role owner or admin" in notice, (path, notice)
        assert _members(alice_api, "lab") == before
        assert [t["name"] for t in bob_api.get("/teams").json()] == ["lab"]

        # dora, another renter, does not see the team at all: not on her page, 404 in the API, and
        # her forms for it are refused as for a team that does not exist.
        page = dora.get("/teams").text
        assert 'id="team-lab"' not in page and not re.search(r"\blab\b", page.split('id="main"', 1)[1])
        assert "no team 'lab'" in _post(dora, live, "/teams/lab/members", user="dora", role="owner")
        assert "no team 'lab'" in _post(dora, live, "/teams/default", team="lab")
        assert dora_api.get("/teams").json() == []
        assert dora_api.get("/teams/lab").status_code == 404
        assert dora_api.get("/balance", params={"team": "lab"}).status_code == 404
        assert _members(alice_api, "lab") == before


def test_removing_a_member_states_their_running_instance_and_stops_nothing(live: LiveServer) -> None:
    alice_api, alice = _person(live, "alice")
    with live.new_user("bob", topup="1.00") as bob_api, live.admin() as adm:
        assert alice_api.post("/teams", json={"name": "lab"}).status_code == 201
        assert alice_api.post("/teams/lab/members", json={"user": "bob", "role": "member"}).status_code == 201
        r = adm.post("/admin/teams/lab/topup", json={"amount": "50.00"}, headers={"Idempotency-Key": "lab-r1"})
        assert r.status_code == 200, r.text
        rented = bob_api.post("/instances", json={"gpu_model": "T4", "command": CMD, "team": "lab"})
        assert rented.status_code == 201, rented.text
        iid = rented.json()["id"]
        wait_for(lambda: bob_api.get(f"/instances/{iid}").json()["status"] == "running")

        # The confirmation states the consequence before anything is done: bob's instance keeps
        # running on the team's account.
        page = alice.get("/teams").text
        form = re.search(r'<form[^>]*id="remove-lab-bob">(.*?)</form>', page, re.S)
        assert form is not None
        assert iid in form.group(1) and "keep running" in form.group(1)
        alone = re.search(r'<form[^>]*id="remove-lab-alice">(.*?)</form>', page, re.S)
        assert alone is not None and iid not in alone.group(1)  # alice has nothing running there
        assert _members(alice_api, "lab") == [("alice", "owner", None), ("bob", "member", None)]

        notice = _post(alice, live, "/teams/lab/members/bob/remove")
        assert "Removed" in notice and iid in notice
        assert _members(alice_api, "lab") == [("alice", "owner", None)]
        assert bob_api.get("/teams/lab").status_code == 404
        assert alice_api.get(f"/instances/{iid}").json()["status"] == "running"  # nothing was stopped
        assert alice_api.post(f"/instances/{iid}/stop").status_code == 200  # an owner decides


def test_compare_shows_the_advisors_rows_for_a_family(live: LiveServer) -> None:
    _, c = _person(live, "alice")
    empty = c.get("/compare")
    assert empty.status_code == 200 and 'id="compare-form"' in empty.text and 'id="compare"' not in empty.text

    r = c.get("/compare", params={"gpu": "A100", "hours": "10", "count": "1"})
    assert r.status_code == 200, r.text
    rows = re.findall(
        r'<tr class="compare-row">\s*<th scope="row">([^<]*)</th><td>([^<]*)</td><td class="gpu">([^<]*)</td>\s*'
        r'<td class="instance-type">([^<]*)</td>.*?<td class="money total">([^<]*)</td>\s*'
        r'<td class="as-of">([^<]*)</td><td class="source"><abbr title="[^"]*">([^<]*)</abbr>',
        r.text,
        re.S,
    )
    expected = advisor.compare("A100", hours=10, count=1)[:30]
    assert len(rows) == len(expected) > 0
    models = {html.unescape(m) for _, _, m, *_ in rows}
    assert models == {"A100-40GB", "A100-80GB"}
    for (provider, region, model, itype, total, as_of, label), want in zip(rows, expected, strict=True):
        more = f" (+{len(want['regions']) - 1})" if len(want["regions"]) > 1 else ""  # one row, several regions
        assert (html.unescape(provider), html.unescape(region), model) == (
            want["provider"],
            want["region"] + more,
            want["gpu_model"],
        )
        assert html.unescape(itype) == (want["instance_type"] or "—")
        assert (as_of, html.unescape(label)) == (want["as_of"], want["source_label"])
        assert Decimal(re.sub(r"[^0-9.]", "", total)) == Decimal(want["total"])

    bad = c.get("/compare", params={"gpu": "Z999", "hours": "10"})
    assert bad.status_code == 422 and "unknown GPU model" in bad.text and 'id="compare"' not in bad.text
    bad = c.get("/compare", params={"gpu": "A100", "hours": "-1"})
    assert bad.status_code == 422 and 'id="compare"' not in bad.text


def _in_process(policy: str) -> dict[str, object]:
    """The demo replayed for one policy through the simulator's Python API, with the CLI's defaults."""
    sc = load_scenario(demo_dir() / DEMO_SCENARIO)
    setup = SimSetup(sc.hosts, sc.prices, sc.start_ms, sc.throughputs, sc.models[-1])
    requests = to_requests(setup, read_trace(sc.trace_paths[0]), interruptible=False, missing="refuse")
    engine = simulate(setup, requests, policy, notice_ms=60_000, round_ms=None, restart_overhead_ms=30_000, seed=0)
    return summarize(engine, setup, policy)


def test_simulate_runs_the_demo_for_the_chosen_policies(live: LiveServer) -> None:
    _, c = _person(live, "alice")
    form = c.get("/simulate")
    assert form.status_code == 200 and 'id="simulate-form"' in form.text and 'id="simulation"' not in form.text

    started = time.monotonic()
    r = c.get("/simulate", params=[("run", "1"), ("policies", "fifo"), ("policies", "danlu-cost")])
    took = time.monotonic() - started
    assert r.status_code == 200, r.text
    assert took < 20, f"the demo took {took:.1f} s"
    assert re.findall(r'<tr id="sim-([^"]+)">', r.text) == ["fifo", "danlu-cost"]
    compared = [
        "jobs_completed",
        "jobs_unfinished",
        "avg_jct_h",
        "p95_queue_delay_h",
        "makespan_h",
        "utilization",
        "cost",
        "cost_per_completed_job",
        "deadline_misses",
        "preemptions",
        "migrations",
    ]
    for policy in ("fifo", "danlu-cost"):
        row = re.search(rf'<tr id="sim-{policy}">(.*?)</tr>', r.text, re.S)
        assert row is not None
        cells = {
            key: (raw if raw is not None and raw != "" else text.strip())
            for key, raw, text in re.findall(
                r'<td class="(?:money )?c-(\w+)"(?: data-value="([^"]*)")?>([^<]*)</td>', row.group(1)
            )
        }
        want = _in_process(policy)
        for key in compared:
            value = want[key]
            assert cells[key] == ("—" if value is None else str(value)), (policy, key, cells[key], value)
        assert int(cells["jobs_completed"]) + int(cells["jobs_unfinished"]) == 40

    bad = c.get("/simulate", params=[("run", "1"), ("policies", "nope")])
    assert bad.status_code == 422 and "unknown policy" in bad.text and 'id="simulation"' not in bad.text
    none = c.get("/simulate", params=[("run", "1")])
    assert none.status_code == 422 and "choose at least one policy" in none.text
