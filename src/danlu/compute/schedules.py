"""Start/stop schedules of rentals (docs/telemetry.md "Schedules"): set, clear and show one, and
the control loop's phase that acts on due ones.

A scheduled stop is a policy stop (the preemption notice, then stop; billing ends at once) with the
schedule as its reason. A scheduled start is ``danlu start`` done for the owner: it can fail (no
free GPU, no money, the workspace released, the owner's team role gone), and a failure is an
event, ``schedule_failed``, with the error the owner would have seen, never silence. The timetable
itself is pure (danlu.compute.timetable).
"""

from __future__ import annotations

from dataclasses import dataclass
from zoneinfo import ZoneInfo

from sqlalchemy import select

from danlu.compute import instances
from danlu.compute.lifecycle import KEEPS_WORKSPACE, Status, StopCause
from danlu.compute.timetable import Timetable, parse_time
from danlu.compute.views import get_owned
from danlu.context import Platform
from danlu.core.errors import DanluError, NotFound
from danlu.core.weekdays import days_text
from danlu.db.models import Event, Instance, InstanceSchedule, User


@dataclass(frozen=True)
class ScheduleView:
    stop: str | None
    start: str | None
    days: str
    timezone: str
    description: str
    next_action: str | None
    next_at_ms: int | None


def _timetable(row: InstanceSchedule) -> Timetable:
    return Timetable(
        parse_time(row.stop_hm) if row.stop_hm else None,
        parse_time(row.start_hm) if row.start_hm else None,
        frozenset(int(d) for d in row.days.split(",")),
    )


def _tz(p: Platform) -> ZoneInfo:
    return ZoneInfo(p.settings.timezone)


def _next_due(tt: Timetable, tz: ZoneInfo, after_ms: int) -> int | None:
    nxt = tt.next_change(tz, after_ms)
    return nxt[1] if nxt else None


def view_of(p: Platform, row: InstanceSchedule, now_ms: int) -> ScheduleView:
    tt = _timetable(row)
    nxt = tt.next_change(_tz(p), now_ms)
    return ScheduleView(
        stop=row.stop_hm,
        start=row.start_hm,
        days=days_text(tt.days),
        timezone=p.settings.timezone,
        description=tt.describe(p.settings.timezone),
        next_action=nxt[0] if nxt else None,
        next_at_ms=nxt[1] if nxt else None,
    )


def set_schedule(
    p: Platform, user: User, instance_id: str, stop: str | None, start: str | None, days: str | None
) -> ScheduleView:
    """Replace the instance's schedule; it acts on boundaries from now on (none already past)."""
    now = p.clock.now_ms()
    with p.db.write() as s:
        inst = get_owned(s, user, instance_id, for_update=True)  # another renter's: 404 before any 422
        tt = Timetable.parse(stop, start, days)
        row = s.get(InstanceSchedule, inst.id) or InstanceSchedule(instance_id=inst.id, created_at_ms=now)
        row.stop_hm = f"{tt.stop[0]:02d}:{tt.stop[1]:02d}" if tt.stop else None
        row.start_hm = f"{tt.start[0]:02d}:{tt.start[1]:02d}" if tt.start else None
        row.days = ",".join(str(d) for d in sorted(tt.days))
        row.acted_until_ms = now
        row.next_due_ms = _next_due(tt, _tz(p), now)
        s.add(row)
        s.flush()
        return view_of(p, row, now)


def clear_schedule(p: Platform, user: User, instance_id: str) -> None:
    with p.db.write() as s:
        inst = get_owned(s, user, instance_id, for_update=True)
        row = s.get(InstanceSchedule, inst.id)
        if row is None:
            raise NotFound("schedule_not_found", f"{instance_id} has no schedule; set one with `danlu schedule`")
        s.delete(row)


def schedule_of(p: Platform, instance_id: str) -> ScheduleView | None:
    with p.db.read() as s:
        row = s.get(InstanceSchedule, instance_id)
        return view_of(p, row, p.clock.now_ms()) if row is not None else None


def run_due(p: Platform) -> list[tuple[str, str, str]]:
    """Act on every schedule whose next boundary has come; returns (instance, action, outcome)."""
    now = p.clock.now_ms()
    tz = _tz(p)
    with p.db.read() as s:
        due = list(
            s.execute(
                select(InstanceSchedule.instance_id, InstanceSchedule.acted_until_ms).where(
                    InstanceSchedule.next_due_ms <= now
                )
            )
        )
    done: list[tuple[str, str, str]] = []
    for instance_id, acted_until in due:
        outcome = _act(p, instance_id, acted_until, now, tz)
        if outcome is not None:
            done.append((instance_id, *outcome))
    return done


def _act(p: Platform, instance_id: str, acted_until: int, now: int, tz: ZoneInfo) -> tuple[str, str] | None:
    handle: str | None = None
    start_for: User | None = None
    with p.db.write() as s:
        row = s.get(InstanceSchedule, instance_id, with_for_update=True, populate_existing=True)
        if row is None or row.acted_until_ms != acted_until:
            return None  # cleared or replaced meanwhile
        tt = _timetable(row)
        action = tt.due(tz, row.acted_until_ms, now)
        row.acted_until_ms = now
        row.next_due_ms = _next_due(tt, tz, now)
        inst = s.get(Instance, instance_id, with_for_update=True, populate_existing=True)
        if inst is None or inst.status == Status.DESTROYED.value:
            s.delete(row)
            return None
        what = f"scheduled {action} ({tt.describe(p.settings.timezone)})"
        if action == "stop" and inst.status == Status.PENDING.value:
            return action, "pending: left to start"  # a launch in flight; the next boundary decides
        if action == "stop" and inst.status == Status.RUNNING.value:
            handle = instances.policy_stop(p, s, inst, StopCause.SCHEDULE, what)
            s.add(Event.about_instance(inst, "schedule_stop", what, now))
        elif action == "start" and Status(inst.status) in KEEPS_WORKSPACE:
            start_for = s.get(User, inst.user_id)
        else:
            return (action, f"nothing to do: {inst.status}") if action else None
    if handle is not None:
        instances.terminate_runs(p, [handle])
        return "stop", "stopped"
    assert start_for is not None
    try:
        instances.start(p, start_for, instance_id)
    except DanluError as exc:
        with p.db.write() as s:
            inst = s.get(Instance, instance_id)
            if inst is not None:
                s.add(Event.about_instance(inst, "schedule_failed", f"{what} failed: {exc.message}", now))
        return "start", f"failed: {exc.code}"
    with p.db.write() as s:
        inst = s.get(Instance, instance_id)
        if inst is not None:
            s.add(Event.about_instance(inst, "schedule_start", what, now))
    p.wake_loop()
    return "start", "started"
