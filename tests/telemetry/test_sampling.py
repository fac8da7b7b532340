"""Sampling, idle auto-stop, maximum duration, retention, the metrics query and the event feed,
through the services on SQLite and PostgreSQL with a fake clock and a backend whose CPU counters
the test drives (the live path with real processes is tests/telemetry/test_telemetry_live.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import func, insert, select

from danlu.accounts import teams
from danlu.billing import service as billing
from danlu.compute import instances
from danlu.compute.limits import RunLimits
from danlu.compute.reconcile import reconcile
from danlu.context import Platform, Retention
from danlu.core.clock import FakeClock
from danlu.core.errors import NotFound
from danlu.db.models import Event, Instance, MetricSample, User
from danlu.notify import feed
from danlu.scheduling import jobs
from danlu.scheduling.live import schedule_round
from danlu.telemetry import idle, query
from danlu.telemetry.idle import enforce
from danlu.telemetry.sampler import Sampler
from danlu.telemetry.store import downsample
from tests.billing.test_metering import renter
from tests.fakes import RecordingBackend

PERIOD_S = 5
BUSY, IDLE = 1000.0, 0.0  # CPU seconds a run burns per period: more than any allotment, or nothing


@pytest.fixture
def p(platform: Platform) -> Platform:
    platform.backend = RecordingBackend()
    billing.set_price(platform, "A100-80GB", "36.00")
    billing.set_price(platform, "T4", "3.60")
    return platform


class Loop:
    """The control loop's telemetry phase, one sample period per step, on the fake clock."""

    def __init__(self, p: Platform, clock: FakeClock) -> None:
        self.p, self.clock, self.sampler = p, clock, Sampler(p)
        self.backend = p.backend
        assert isinstance(self.backend, RecordingBackend)
        self.sampler.prime()

    def step(self, burn: dict[str, float]) -> list[str]:
        """One period passes; each run in ``burn`` used that many CPU seconds; returns who was stopped."""
        self.clock.advance(seconds=PERIOD_S)
        for run_id, cpu in burn.items():
            self.backend.cpu[run_id] = self.backend.cpu.get(run_id, 0.0) + cpu
        self.sampler.sample()
        return enforce(self.p, PERIOD_S * 1000)


def status(p: Platform, inst_id: str) -> Instance:
    with p.db.read() as s:
        inst = s.get(Instance, inst_id)
        assert inst is not None
        s.expunge(inst)
        return inst


def rent(p: Platform, user: User, idle_s: int | None = 30, max_s: int | None = None) -> str:
    return instances.rent(p, user, "A100-80GB", 1, ["python", "train.py"], limits=RunLimits(idle_s, 50, max_s)).id


def steps_until_stopped(loop: Loop, inst_id: str, burn: Callable[[int], float], most: int) -> int | None:
    """Steps taken until ``inst_id`` is stopped (None if it never was in ``most`` steps)."""
    for k in range(1, most + 1):
        if inst_id in loop.step({inst_id: burn(k)}):
            return k
    return None


def test_an_idle_run_is_stopped_at_the_first_sample_after_its_window_with_notice_and_a_reason(
    p: Platform, fake_clock: FakeClock
) -> None:
    ann = renter(p, "ann", "100.00")
    inst = rent(p, ann, idle_s=30)
    loop = Loop(p, fake_clock)
    assert steps_until_stopped(loop, inst, lambda k: IDLE, 20) == 30 // PERIOD_S  # at 30 s, not later
    got = status(p, inst)
    assert got.status == "stopping" and got.stop_reason.startswith("idle: every GPU under 5.0% for 30 s")
    assert "max 0.0%" in got.stop_reason and got.kill_after_ms is not None
    assert (got.run_handle, "term") in loop.backend.signals  # the preemption notice: SIGTERM first
    deadline = p.settings.data_dir / "instances" / inst / "run" / "DANLU_PREEMPT_DEADLINE"
    assert not deadline.exists() or deadline.read_text().strip()  # written where the backend binds it
    with p.db.read() as s:
        warning, ev = s.scalars(select(Event).where(Event.instance_id == inst).order_by(Event.id)).all()
    assert ev.kind == "idle_stop" and ev.user_id == ann.id and "stopped at" in ev.message
    # Warned once, a quarter of the window (7 s) before: at the first sample 23 s into the idle streak.
    assert warning.kind == "idle_warning" and "for 25 s; it will be stopped at about" in warning.message
    assert instances.show(p, ann, inst).stop_reason == got.stop_reason


def test_a_busy_run_is_never_stopped_for_idleness(p: Platform, fake_clock: FakeClock) -> None:
    ann = renter(p, "ann", "100.00")
    inst = rent(p, ann, idle_s=30)
    assert steps_until_stopped(Loop(p, fake_clock), inst, lambda k: BUSY, 40) is None
    assert status(p, inst).status == "running"


def test_busy_idle_busy_is_not_stopped_early_and_is_stopped_a_window_after_the_last_busy_sample(
    p: Platform, fake_clock: FakeClock
) -> None:
    ann = renter(p, "ann", "100.00")
    inst = rent(p, ann, idle_s=30)
    # 25 s idle, 5 s busy, 25 s idle, 5 s busy (steps 1-12), then idle for good from step 13 on.
    pattern = {6: BUSY, 12: BUSY}
    stopped = steps_until_stopped(Loop(p, fake_clock), inst, lambda k: pattern.get(k, IDLE), 40)
    assert stopped == 12 + 30 // PERIOD_S


def test_a_run_past_its_maximum_duration_is_stopped_busy_or_not(p: Platform, fake_clock: FakeClock) -> None:
    ann = renter(p, "ann", "100.00")
    inst = rent(p, ann, idle_s=None, max_s=60)
    assert steps_until_stopped(Loop(p, fake_clock), inst, lambda k: BUSY, 30) == 60 // PERIOD_S
    got = status(p, inst)
    assert got.stop_reason.startswith("maximum duration: ran 60 s of at most 60 s")
    with p.db.read() as s:
        assert s.scalars(select(Event.kind).where(Event.instance_id == inst)).all() == ["max_duration"]


def test_runs_without_limits_are_sampled_but_never_stopped(p: Platform, fake_clock: FakeClock) -> None:
    ann = renter(p, "ann", "100.00")
    inst = rent(p, ann, idle_s=None)
    assert steps_until_stopped(Loop(p, fake_clock), inst, lambda k: IDLE, 30) is None
    m = query.instance_metrics(p, ann, inst, 0)
    assert [g.gpu_index for g in m.gpus] == [instances.show(p, ann, inst).gpu_indices[0]]
    assert m.gpus[0].simulated and len(m.gpus[0].points) == 30 and len(m.run.points) == 30
    assert {pt.util_pm for pt in m.gpus[0].points} == {0}


def test_simulated_utilisation_is_the_runs_share_of_its_allotted_cores(p: Platform, fake_clock: FakeClock) -> None:
    ann = renter(p, "ann", "100.00")
    inst = rent(p, ann, idle_s=None)
    loop = Loop(p, fake_clock)
    with p.db.read() as s:
        sandbox_json = s.execute(select(Instance.sandbox_json).where(Instance.id == inst)).scalar_one()
    from danlu.telemetry.sampler import allotted_cores as _allotted_cores

    cores = _allotted_cores(sandbox_json, 1)
    loop.step({inst: cores * PERIOD_S * 0.25})  # a quarter of its cores for the period
    loop.step({inst: cores * PERIOD_S * 3})  # more than it may use: the GPU figure is capped at 100 %
    points = query.instance_metrics(p, ann, inst, 0).gpus[0].points
    assert [pt.util_pm for pt in points] == [250, 1000]
    assert [pt.util_pm for pt in query.instance_metrics(p, ann, inst, 0).run.points] == [250, 3000]


def test_a_jobs_idle_run_is_stopped_and_the_job_fails_with_the_reason(p: Platform, fake_clock: FakeClock) -> None:
    ann = renter(p, "ann", "100.00")
    job = jobs.submit(p, ann, ["python", "train.py"], 1, ["A100-80GB"], limits=RunLimits(30, 50, None))
    schedule_round(p)
    with p.db.read() as s:
        run = s.execute(select(Instance.id).where(Instance.job_id == job.id)).scalar_one()
    assert status(p, run).idle_stop_s == 30
    loop = Loop(p, fake_clock)
    assert steps_until_stopped(loop, run, lambda k: IDLE, 20) == 6
    loop.backend.die(status(p, run).run_handle or "", 143, fake_clock.now_ms())
    reconcile(p)
    schedule_round(p)  # jobs observe their runs there (settle_runs)
    view = jobs.show(p, ann, job.id)
    assert view.status == "failed" and view.status_reason.startswith("idle:")  # not queued to run again


def test_a_jobs_run_stopped_by_its_limit_fails_by_its_typed_cause_not_the_words_of_its_reason(
    p: Platform, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27: whether a job fails or is requeued was read from the prefix of the free-text reason
    ("idle:"); a reworded (or translated) reason requeued a job its own limit had stopped."""
    ann = renter(p, "ann", "100.00")
    monkeypatch.setattr(idle, "idle_reason", lambda *a, **k: "GPUs unused for 30 s")  # no "idle:" prefix
    job = jobs.submit(p, ann, ["python", "train.py"], 1, ["A100-80GB"], limits=RunLimits(30, 50, None))
    schedule_round(p)
    with p.db.read() as s:
        run = s.execute(select(Instance.id).where(Instance.job_id == job.id)).scalar_one()
    loop = Loop(p, fake_clock)
    assert steps_until_stopped(loop, run, lambda k: IDLE, 20) is not None
    assert status(p, run).stop_cause == "idle"
    loop.backend.die(status(p, run).run_handle or "", 143, fake_clock.now_ms())
    reconcile(p)
    schedule_round(p)
    view = jobs.show(p, ann, job.id)
    assert view.status == "failed" and view.status_reason == "GPUs unused for 30 s"


def test_retention_folds_raw_into_minutes_and_hours_with_weighted_means_and_bounded_rows(
    p: Platform, fake_clock: FakeClock
) -> None:
    t0 = fake_clock.now_ms() - fake_clock.now_ms() % 3_600_000  # on an hour boundary
    rows = [
        {"instance_id": "i-aa", "gpu_index": 0, "at_ms": t0 + k * 5000, "res": "raw", "samples": 1,
         "util_pm": 1000 if k < 6 else 0, "util_max_pm": 1000 if k < 6 else 0, "mem_mb": 100 + k,
         "power_mw": None, "temp_c": None, "simulated": True}
        for k in range(24)  # 2 minutes: 12 samples each; the first half-minute busy
    ]  # fmt: skip
    with p.db.write() as s:
        s.execute(insert(MetricSample), rows)
    keep = Retention(raw_s=60, minute_s=3600, hour_s=86400)
    fake_clock.set(t0 + 120_000 + 60_000)  # both minutes are older than raw_s
    assert downsample(p, keep) == 24
    with p.db.read() as s:
        got = s.execute(
            select(MetricSample.res, MetricSample.at_ms, MetricSample.samples, MetricSample.util_pm,
                   MetricSample.util_max_pm, MetricSample.mem_mb).order_by(MetricSample.at_ms)
        ).all()  # fmt: skip
    assert [tuple(r) for r in got] == [("1m", t0, 12, 500, 1000, 106), ("1m", t0 + 60_000, 12, 0, 0, 118)]
    fake_clock.set(t0 + 3_600_000 + 3_600_000)  # the hour is older than minute_s: one 1h row, weighted
    downsample(p, keep)
    with p.db.read() as s:
        assert [tuple(r) for r in s.execute(select(MetricSample.res, MetricSample.samples, MetricSample.util_pm))] == [
            ("1h", 24, 250)
        ]
    fake_clock.set(t0 + 86_400_000 + 3_600_000)  # older than hour_s: gone
    downsample(p, keep)
    with p.db.read() as s:
        assert s.execute(select(func.count()).select_from(MetricSample)).scalar_one() == 0


def test_metrics_and_events_are_the_renters_alone(p: Platform, fake_clock: FakeClock) -> None:
    ann, eve = renter(p, "ann", "100.00"), renter(p, "eve", "100.00")
    inst = rent(p, ann, idle_s=30)
    steps_until_stopped(Loop(p, fake_clock), inst, lambda k: IDLE, 10)
    with pytest.raises(NotFound) as e:
        query.instance_metrics(p, eve, inst, 0)
    assert e.value.code == "instance_not_found"
    assert [ev.kind for ev in feed.feed(p, ann)] == ["idle_stop", "idle_warning"]  # newest first
    assert feed.feed(p, eve) == []
    # An account-wide event reaches the team's owners and admins, not its members.
    teams.create_team(p, ann, "lab")
    teams.add_member(p, ann, "lab", "eve", "member")
    with p.db.write() as s:
        ba = teams.payer_named(s, ann, "lab")
        s.add(Event(user_id=None, billing_account_id=ba, kind="budget_threshold", message="80%", at_ms=1))
    assert [ev.kind for ev in feed.feed(p, ann)] == ["budget_threshold", "idle_stop", "idle_warning"]
    assert feed.feed(p, eve) == []
    newest = feed.feed(p, ann)[0].id
    assert feed.feed(p, ann, after=newest) == [] and len(feed.feed(p, ann, kind="idle_stop")) == 1


def test_prometheus_metrics_are_open_on_the_servers_machine_and_need_the_admin_token_elsewhere(
    p: Platform, fake_clock: FakeClock
) -> None:
    import re

    from fastapi.testclient import TestClient

    from danlu import __version__
    from danlu.server.app import create_app

    ann = renter(p, "ann", "100.00")
    inst = rent(p, ann, idle_s=None)
    loop = Loop(p, fake_clock)
    loop.step({inst: BUSY})
    app = create_app(p)
    admin = (p.settings.data_dir / "admin-token").read_text().strip()
    with TestClient(app, client=("127.0.0.1", 40000)) as local:
        text = local.get("/metrics").text
    gpu = instances.show(p, ann, inst).gpu_indices[0]
    # instance_id, not instance: Prometheus' own target label would rename ours exported_instance
    labels = f'gpu="{gpu}",instance_id="{inst}",model="A100-80GB",simulated="true"'
    assert f"danlu_gpu_utilization_ratio{{{labels}}} 1.0" in text
    assert 'danlu_instances{status="running"} 1.0' in text and "danlu_jobs_queued 0.0" in text
    assert not re.search(r'\binstance="', text), text
    assert re.search(rf'danlu_build_info{{python="[0-9.]+",version="{re.escape(__version__)}"}} 1.0', text)
    assert f'danlu_backend_up{{backend="{p.backend.name}"}} 1.0' in text
    with TestClient(app, client=("203.0.113.9", 40000)) as remote:
        assert remote.get("/metrics").json()["error"]["code"] == "missing_token"
        r = remote.get("/metrics", headers={"Authorization": "Bearer not-a-token"})
        assert r.status_code == 401
        assert remote.get("/metrics", headers={"Authorization": f"Bearer {admin}"}).status_code == 200
    # A reverse proxy on this machine connects from loopback for anyone: what it forwards needs the token.
    with TestClient(app, client=("127.0.0.1", 40001)) as proxy:
        for header in ("X-Forwarded-For", "X-Real-IP", "Forwarded"):
            r = proxy.get("/metrics", headers={header: "203.0.113.9"})
            assert r.status_code == 401 and r.json()["error"]["code"] == "missing_token", header
        r = proxy.get("/metrics", headers={"X-Forwarded-For": "203.0.113.9", "Authorization": f"Bearer {admin}"})
        assert r.status_code == 200
        text = r.text
    # This process's HTTP requests, by route template (never the raw path) and status.
    assert 'danlu_http_requests_total{method="GET",route="/metrics",status="401"} 5.0' in text, text
    assert 'danlu_http_request_duration_seconds_count{method="GET",route="/metrics"}' in text
    with TestClient(app, client=("127.0.0.1", 40002)) as local:
        assert local.get(f"/api/v1/instances/{inst}").status_code == 401
        assert local.get("/no/such/page/x1").status_code in (401, 404)
        text = local.get("/metrics").text
    assert 'route="/api/v1/instances/{instance_id}",status="401"' in text
    assert inst not in "".join(line for line in text.splitlines() if "danlu_http_" in line)
    assert "/no/such/page" not in text


def test_the_example_grafana_dashboard_queries_only_series_the_server_exposes(p: Platform) -> None:
    import json
    import re
    from pathlib import Path

    from danlu.telemetry.prometheus import PlatformCollector

    dashboard = json.loads((Path(__file__).parents[2] / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {name for e in exprs for name in re.findall(r"\bdanlu_[a-z_]+", e)}
    exposed = set()
    for family in PlatformCollector(p).collect():
        exposed |= {family.name, f"{family.name}_total"} if family.type == "counter" else {family.name}
    assert used and used <= exposed, used - exposed


def test_an_idle_warning_comes_once_per_idle_streak_before_the_stop(p: Platform, fake_clock: FakeClock) -> None:
    ann = renter(p, "ann", "100.00")
    inst = rent(p, ann, idle_s=60)  # warned 15 s before: at 45 s of idleness
    loop = Loop(p, fake_clock)
    # idle 50 s (warned at 45 s), busy once, idle 50 s (warned again), busy, then idle for good.
    pattern = {11: BUSY, 22: BUSY}
    assert steps_until_stopped(loop, inst, lambda k: pattern.get(k, IDLE), 60) == 22 + 60 // PERIOD_S
    with p.db.read() as s:
        kinds = [e.kind for e in s.scalars(select(Event).where(Event.instance_id == inst).order_by(Event.id))]
    assert kinds == ["idle_warning", "idle_warning", "idle_warning", "idle_stop"]


def test_a_person_typing_keeps_an_idle_gpu_running_and_a_forgotten_session_does_not(
    p: Platform, fake_clock: FakeClock
) -> None:
    """Issue 25 item 7: input in a session (or traffic through a port) restarts the idle window; the
    stop comes a whole window after the last keystroke, and `show` says what kept it alive."""
    from danlu.core.activity import KEYSTROKES

    ann = renter(p, "ann", "100.00")
    inst = rent(p, ann, idle_s=30)
    loop = Loop(p, fake_clock)
    typed_until = 12  # a keystroke every step up to step 12 (60 s), every GPU idle throughout

    def burn(k: int) -> float:
        if k <= typed_until:
            p.activity.touch(inst, fake_clock.now_ms(), KEYSTROKES)
        return IDLE

    stopped = steps_until_stopped(loop, inst, burn, 40)
    # burn(k) runs as step k begins, before the clock moves: the last key is at 55 s; the stop, not
    # while typing, comes at the first sample a whole window (30 s) after it
    assert stopped == (typed_until - 1) + 30 // PERIOD_S
    shown = instances.show(p, ann, inst)
    assert shown.last_used_by == KEYSTROKES and shown.last_used_ms is not None
