"""Idle auto-stop and maximum duration (docs/telemetry.md): the pure verdict, and the loop's pass
that acts on it with the preemption notice (the deadline file, SIGTERM, SIGKILL at the deadline).

Idle means every sample of every allocated GPU in the last ``idle_stop_s`` is under the threshold,
the run has been running the whole window with no person using it (telemetry.activity: input in a
session, traffic through a port), and samples cover it (the first within a period and a
second of the window's start, the last within a period and a second of now, no gap over two
periods). The pass runs every loop tick on the samples stored so far, so a stop follows the end of
an idle window by at most one sample period.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from sqlalchemy import or_, select

from danlu.compute.instances import policy_stop, terminate_runs
from danlu.compute.lifecycle import Status, StopCause
from danlu.context import Platform
from danlu.core.clock import iso
from danlu.db.models import AllocationRow, Event, Instance, MetricSample

IDLE = "idle:"
OVERTIME = "maximum duration:"
SLACK_MS = 1000


def _pct(pm: float) -> str:
    return f"{pm / 10:.1f}%"


def idle_reason(
    samples: Sequence[tuple[int, int]],
    *,
    window_ms: int,
    threshold_pm: int,
    running_since_ms: int,
    now_ms: int,
    period_ms: int,
) -> str | None:
    """Why the run is idle (the measurement, for its ``stop_reason``), or None. ``samples``: (time,
    utilisation per-mille) of every GPU of the run."""
    if window_ms <= 0 or now_ms - running_since_ms < window_ms:
        return None
    inside = sorted((t, u) for t, u in samples if now_ms - window_ms < t <= now_ms)
    if not inside:
        return None
    times = sorted({t for t, _ in inside})
    if times[0] > now_ms - window_ms + period_ms + SLACK_MS or times[-1] < now_ms - period_ms - SLACK_MS:
        return None
    if any(b - a > 2 * period_ms for a, b in pairwise(times)):
        return None
    utils = [u for _, u in inside]
    if max(utils) >= threshold_pm:
        return None
    mean = sum(utils) / len(utils)
    return (
        f"{IDLE} every GPU under {_pct(threshold_pm)} for {window_ms // 1000} s "
        f"(mean {_pct(mean)}, max {_pct(max(utils))} over {len(times)} samples); stopped at {iso(now_ms)}"
    )


def overtime_reason(*, max_ms: int, running_since_ms: int, now_ms: int) -> str | None:
    if now_ms - running_since_ms < max_ms:
        return None
    ran = (now_ms - running_since_ms) // 1000
    return f"{OVERTIME} ran {ran} s of at most {max_ms // 1000} s; stopped at {iso(now_ms)}"


def warn_lead_ms(window_ms: int) -> int:
    """How long before an idle stop the renter is warned: a quarter of the window, at most 5 min."""
    return min(300_000, window_ms // 4)


@dataclass(frozen=True)
class Verdict:
    instance_id: str
    handle: str
    kind: str  # idle_stop | max_duration | idle_warning
    reason: str
    since_ms: int = 0  # idle_warning: when the idle streak began (one warning per streak)


def verdicts(p: Platform, period_ms: int) -> list[Verdict]:
    """Stops due now, and ``idle_warning`` verdicts for runs idle for all but the last
    ``warn_lead_ms`` of their window."""
    now = p.clock.now_ms()
    with p.db.read() as s:
        runs = s.execute(
            select(
                Instance.id,
                Instance.run_handle,
                Instance.idle_stop_s,
                Instance.idle_threshold_pm,
                Instance.max_duration_s,
                AllocationRow.started_at_ms,
            )
            .join(AllocationRow, AllocationRow.id == Instance.current_allocation_id)
            .where(
                Instance.status == Status.RUNNING.value,
                or_(Instance.idle_stop_s.is_not(None), Instance.max_duration_s.is_not(None)),
            )
        ).all()
        if not runs:
            return []
        longest = max((r.idle_stop_s or 0) for r in runs) * 1000
        samples: dict[str, list[tuple[int, int]]] = defaultdict(list)
        if longest:
            for inst_id, at, util in s.execute(
                select(MetricSample.instance_id, MetricSample.at_ms, MetricSample.util_pm).where(
                    MetricSample.res == "raw",
                    MetricSample.gpu_index >= 0,
                    MetricSample.instance_id.in_([r.id for r in runs if r.idle_stop_s]),
                    MetricSample.at_ms > now - longest,
                )
            ):
                samples[inst_id].append((int(at), int(util or 0)))
    out = []
    for r in runs:
        # a person's use (a keystroke in a session, traffic through a port) restarts the idle window
        quiet_since = max(r.started_at_ms, p.activity.last_ms(r.id))
        if r.max_duration_s and (
            why := overtime_reason(max_ms=r.max_duration_s * 1000, running_since_ms=r.started_at_ms, now_ms=now)
        ):
            out.append(Verdict(r.id, r.run_handle, "max_duration", why))
        elif r.idle_stop_s and (
            why := idle_reason(
                samples.get(r.id, []),
                window_ms=r.idle_stop_s * 1000,
                threshold_pm=r.idle_threshold_pm,
                running_since_ms=quiet_since,
                now_ms=now,
                period_ms=period_ms,
            )
        ):
            out.append(Verdict(r.id, r.run_handle, "idle_stop", why))
        elif r.idle_stop_s and (lead := warn_lead_ms(r.idle_stop_s * 1000)) > 0:
            window = r.idle_stop_s * 1000
            mine = samples.get(r.id, [])
            early = idle_reason(
                mine,
                window_ms=window - lead,
                threshold_pm=r.idle_threshold_pm,
                running_since_ms=quiet_since,
                now_ms=now,
                period_ms=period_ms,
            )
            if early:
                busy = [t for t, u in mine if u >= r.idle_threshold_pm]
                since = max([quiet_since, *busy])
                stop_at = max(since, now - window + lead) + window
                why = (
                    f"idle: every GPU under {_pct(r.idle_threshold_pm)} for {(now - since) // 1000} s; it will be "
                    f"stopped at about {iso(stop_at)} unless a GPU is used (its limit: --idle-stop {r.idle_stop_s}s)"
                )
                out.append(Verdict(r.id, r.run_handle, "idle_warning", why, since))
    return out


def enforce(p: Platform, period_ms: int) -> list[str]:
    """Stop every run its idle or duration limit says to, with the preemption notice; returns their ids."""
    handles: list[str | None] = []
    stopped = []
    for v in verdicts(p, period_ms):
        if v.kind == "idle_warning" and _warned(p, v):
            continue  # said already in this streak: no write transaction each tick
        with p.db.write() as s:
            inst = s.get(Instance, v.instance_id, with_for_update=True, populate_existing=True)
            if inst is None or inst.status != Status.RUNNING.value or inst.run_handle != v.handle:
                continue
            if v.kind == "idle_warning":  # once per idle streak (checked again under the write lock)
                if not _warned(p, v):
                    s.add(Event.about_instance(inst, v.kind, v.reason, p.clock.now_ms()))
                continue
            cause = StopCause.MAX_DURATION if v.kind == "max_duration" else StopCause.IDLE
            handles.append(policy_stop(p, s, inst, cause, v.reason))
            s.add(Event.about_instance(inst, v.kind, v.reason, p.clock.now_ms()))
            stopped.append(inst.id)
    terminate_runs(p, handles)
    return stopped


def _warned(p: Platform, v: Verdict) -> bool:
    with p.db.read() as s:
        return (
            s.execute(
                select(Event.id).where(
                    Event.instance_id == v.instance_id, Event.kind == "idle_warning", Event.at_ms > v.since_ms
                )
            ).first()
            is not None
        )
