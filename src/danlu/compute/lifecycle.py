"""The instance state machine, pure. Every change of state goes through :func:`check_transition`
and is recorded with a reason (danlu.compute.instances.transition)."""

from __future__ import annotations

from enum import StrEnum

from danlu.core.errors import Conflict
from danlu.core.states import Machine


class Status(StrEnum):
    PENDING = "pending"  # GPUs claimed, process being launched
    RUNNING = "running"
    STOPPING = "stopping"  # stop requested: billing has ended, process is being terminated
    STOPPED = "stopped"  # workspace kept, no GPUs, no GPU billing
    EXITED = "exited"  # the command ended by itself; exit_code says how
    LOST = "lost"  # the process vanished without an exit status
    FAILED = "failed"  # the command never started (the launch failed, or the server died first): not billed
    DESTROYED = "destroyed"


class StopCause(StrEnum):
    """Why a run was stopped, typed (``instances.stop_cause``; the words are in ``stop_reason``). Whatever
    acts on a stop decides from this, never from the words: a job whose run its own limit stopped fails,
    one stopped for any other cause is queued again (danlu.scheduling.jobs.on_run_finished)."""

    USER = "user"  # `danlu stop`
    IDLE = "idle"  # the run's idle auto-stop (danlu.telemetry.idle)
    MAX_DURATION = "max_duration"  # the run's maximum duration
    SCHEDULE = "schedule"  # the rental's start/stop schedule (danlu.compute.schedules)
    BUDGET_CAP = "budget_cap"  # a hard budget reached (danlu.compute.reconcile)
    BALANCE = "balance"  # the payer's balance ran out
    HOLD_ENDED = "hold_ended"  # the package or reservation it ran on ended (danlu.compute.holds)
    OPERATOR = "operator"  # the operator stopped it, or suspended the account (danlu.compute.operator)
    JOB_CANCELLED = "job_cancelled"  # `danlu job cancel`
    PREEMPTED = "preempted"  # the scheduler took the GPUs back, with notice (danlu.scheduling.live)


# The renter's own limits: a job run stopped by one of these fails rather than runs again.
RENTERS_LIMITS = frozenset({StopCause.IDLE, StopCause.MAX_DURATION})

S = Status
TRANSITIONS: dict[Status, frozenset[Status]] = {
    S.PENDING: frozenset({S.RUNNING, S.EXITED, S.LOST, S.FAILED, S.STOPPED, S.DESTROYED}),
    S.RUNNING: frozenset({S.STOPPING, S.EXITED, S.LOST, S.FAILED, S.DESTROYED}),
    S.STOPPING: frozenset({S.STOPPED, S.LOST, S.DESTROYED}),
    S.STOPPED: frozenset({S.PENDING, S.DESTROYED}),
    S.EXITED: frozenset({S.PENDING, S.DESTROYED}),
    S.LOST: frozenset({S.PENDING, S.DESTROYED}),
    S.FAILED: frozenset({S.PENDING, S.DESTROYED}),
    S.DESTROYED: frozenset(),
}

HAS_PROCESS = frozenset({S.PENDING, S.RUNNING, S.STOPPING})
# No process, workspace kept: a rental here is billed for its stored workspace (danlu.billing.storage).
KEEPS_WORKSPACE = frozenset({S.STOPPED, S.EXITED, S.LOST, S.FAILED})
BILLED = frozenset({S.PENDING, S.RUNNING})  # at the rental's plan; a preemption notice bills STOPPING

NEXT_STEP = {
    S.RUNNING: "stop it first with `danlu stop ID`",
    S.STOPPING: "wait until it has stopped (`danlu show ID`)",
    S.PENDING: "wait until it is running",
    S.DESTROYED: "it is gone; rent a new instance",
    S.STOPPED: "start it with `danlu start ID` or remove it with `danlu rm ID`",
    S.EXITED: "start it again with `danlu start ID` or remove it with `danlu rm ID`",
    S.LOST: "start it again with `danlu start ID` or remove it with `danlu rm ID`",
    S.FAILED: "start it again with `danlu start ID` or remove it with `danlu rm ID`",
}


def check_transition(current: Status, target: Status, action: str) -> None:
    if target not in TRANSITIONS[current]:
        raise Conflict(
            "invalid_state",
            f"cannot {action} an instance that is {current.value}; {NEXT_STEP.get(current, '')}".rstrip("; "),
            status=current.value,
        )


class HoldState(StrEnum):
    ACTIVE = "active"  # its GPUs are kept for the buyer until ends_at_ms
    EXPIRED = "expired"  # its term ended
    CANCELLED = "cancelled"  # ended early, with the refund its terms give


HOLD = Machine(
    "hold",
    HoldState.ACTIVE,
    {
        HoldState.ACTIVE: frozenset({HoldState.EXPIRED, HoldState.CANCELLED}),
        HoldState.EXPIRED: frozenset(),
        HoldState.CANCELLED: frozenset(),
    },
)
