"""Instances' start/stop schedules through the services and the loop's phase, on SQLite and
PostgreSQL with a fake clock: a weekday evening stop and morning start, the weekend left alone, a
start that finds no free GPU leaves a ``schedule_failed`` event, a server down across boundaries
acts once on the latest, and another renter cannot see or change a schedule."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from danlu.billing import service as billing
from danlu.compute import instances, schedules
from danlu.compute.reconcile import reconcile
from danlu.context import Platform
from danlu.core.clock import FakeClock
from danlu.core.errors import InvalidInput, NotFound
from danlu.db.models import Event, Instance
from danlu.notify import feed
from danlu.server.loop import ControlLoop
from tests.billing.test_metering import renter
from tests.fakes import RecordingBackend

HOUR = 3600
# The fake clock starts at 2026-01-05 08:00 UTC, a Monday; the deployment's zone here is UTC.


@pytest.fixture
def p(platform: Platform) -> Platform:
    platform.backend = RecordingBackend()
    billing.set_price(platform, "A100-80GB", "36.00")
    return platform


def status(p: Platform, inst_id: str) -> str:
    with p.db.read() as s:
        inst = s.get(Instance, inst_id)
        assert inst is not None
        return inst.status


def events(p: Platform, inst_id: str) -> list[tuple[str, str]]:
    with p.db.read() as s:
        rows = s.scalars(select(Event).where(Event.instance_id == inst_id).order_by(Event.id))
        return [(e.kind, e.message) for e in rows]


def settle(p: Platform) -> None:
    """Stopping runs end (the fake backend's processes exit on SIGTERM), as the loop would see."""
    backend = p.backend
    assert isinstance(backend, RecordingBackend)
    for handle, sig in list(backend.signals):
        if sig == "term" and backend.states[handle].kind == "running":
            backend.die(handle, 143, p.clock.now_ms())
    reconcile(p)


def until(p: Platform, clock: FakeClock, hours: float) -> list[tuple[str, str, str]]:
    """Advance the clock hour by hour as the loop would tick, acting on due schedules."""
    done = []
    for _ in range(int(hours)):
        clock.advance(seconds=HOUR)
        done += schedules.run_due(p)
        settle(p)
    return done


def test_weekday_evenings_stop_and_mornings_start_and_the_weekend_stays_stopped(
    p: Platform, fake_clock: FakeClock
) -> None:
    ann = renter(p, "ann", "10000.00")
    inst = instances.rent(p, ann, "A100-80GB", 1, ["python", "notebook.py"]).id
    view = schedules.set_schedule(p, ann, inst, "23:00", "08:00", "mon-fri")
    assert (view.next_action, view.description) == ("stop", "stop 23:00, start 08:00 weekdays (UTC)")
    assert view.next_at_ms == fake_clock.now_ms() + 15 * HOUR * 1000  # Monday 23:00
    done = until(p, fake_clock, 15)
    assert done == [(inst, "stop", "stopped")] and status(p, inst) == "stopped"
    kinds = [k for k, _ in events(p, inst)]
    assert kinds == ["schedule_stop"]
    assert "scheduled stop (stop 23:00, start 08:00 weekdays (UTC))" in instances.show(p, ann, inst).stop_reason
    assert until(p, fake_clock, 9) == [(inst, "start", "started")] and status(p, inst) == "running"  # Tue 08:00
    # Tuesday to Friday as usual, then Friday 23:00 stops it and Saturday/Sunday 08:00 do nothing.
    until(p, fake_clock, 24 * 3 + 15)
    assert status(p, inst) == "stopped"
    assert until(p, fake_clock, 48) == [] and status(p, inst) == "stopped"
    assert until(p, fake_clock, 9) == [(inst, "start", "started")]  # Monday 08:00
    assert [k for k, _ in events(p, inst)].count("schedule_stop") == 5


def test_a_scheduled_start_without_a_free_gpu_is_an_event_not_silence(p: Platform, fake_clock: FakeClock) -> None:
    ann, bob = renter(p, "ann", "10000.00"), renter(p, "bob", "10000.00")
    inst = instances.rent(p, ann, "A100-80GB", 2, ["python", "notebook.py"]).id
    instances.stop(p, ann, inst)
    settle(p)
    schedules.set_schedule(p, ann, inst, None, "09:00", "daily")
    instances.rent(p, bob, "A100-80GB", 2, ["python", "train.py"])  # takes both A100s
    assert until(p, fake_clock, 1) == [(inst, "start", "failed: no_capacity")]
    assert status(p, inst) == "stopped"
    ((kind, message),) = events(p, inst)
    assert kind == "schedule_failed" and "scheduled start (start 09:00 daily (UTC)) failed" in message
    assert [e.kind for e in feed.feed(p, ann)] == ["schedule_failed"]
    assert feed.feed(p, bob) == []


def test_a_server_down_across_boundaries_acts_once_on_the_latest(p: Platform, fake_clock: FakeClock) -> None:
    ann = renter(p, "ann", "10000.00")
    inst = instances.rent(p, ann, "A100-80GB", 1, ["python", "notebook.py"]).id
    schedules.set_schedule(p, ann, inst, "23:00", "08:00", "daily")
    fake_clock.advance(seconds=HOUR * (24 + 15 + 0.5))  # down from Mon 08:00 to Tue 23:30: missed 3 boundaries
    assert schedules.run_due(p) == [(inst, "stop", "stopped")]
    settle(p)
    assert schedules.run_due(p) == []
    assert [k for k, _ in events(p, inst)] == ["schedule_stop"]


def test_schedules_are_the_owners_alone(p: Platform) -> None:
    ann, bob = renter(p, "ann", "100.00"), renter(p, "bob", "100.00")
    inst = instances.rent(p, ann, "A100-80GB", 1, ["python", "notebook.py"]).id
    with pytest.raises(NotFound) as err:
        schedules.set_schedule(p, bob, inst, "23:00", None, "daily")
    assert err.value.code == "instance_not_found"
    with pytest.raises(NotFound):
        schedules.clear_schedule(p, bob, inst)
    with pytest.raises(NotFound) as err:
        schedules.clear_schedule(p, ann, inst)
    assert err.value.code == "schedule_not_found"
    with pytest.raises(InvalidInput):
        schedules.set_schedule(p, ann, inst, "25:00", None, "daily")
    assert schedules.schedule_of(p, inst) is None  # a refused schedule changed nothing
    schedules.set_schedule(p, ann, inst, "23:00", None, "daily")
    schedules.clear_schedule(p, ann, inst)
    assert schedules.schedule_of(p, inst) is None


def test_the_control_loop_acts_on_due_schedules_each_tick(p: Platform, fake_clock: FakeClock) -> None:
    ann = renter(p, "ann", "10000.00")
    inst = instances.rent(p, ann, "A100-80GB", 1, ["python", "notebook.py"]).id
    schedules.set_schedule(p, ann, inst, "09:00", None, "daily")
    loop = ControlLoop(p)
    loop.run_once()
    assert status(p, inst) == "running"
    fake_clock.advance(seconds=HOUR)
    loop.run_once()
    assert status(p, inst) == "stopping" and [k for k, _ in events(p, inst)] == ["schedule_stop"]
