"""A job's life, one rule for both clocks (pure; issue 11, item 9).

The simulator's engine (:mod:`danlu.scheduling.engine`) and the live server (:mod:`danlu.scheduling.jobs`,
:mod:`danlu.scheduling.live`) keep their state in different places, memory and the database, but decide
with the same functions here: which state a job takes when one of its runs ends (:func:`after_run`),
and when a notice ends (:func:`notice_deadline`). A fix to either rule is a fix to both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

QUEUED, RUNNING, STOPPING = "queued", "running", "stopping"
SUCCEEDED, FAILED, CANCELLED = "succeeded", "failed", "cancelled"
JOB_TRANSITIONS: dict[str, frozenset[str]] = {
    QUEUED: frozenset({RUNNING, CANCELLED, FAILED}),
    RUNNING: frozenset({STOPPING, QUEUED, SUCCEEDED, FAILED, CANCELLED}),
    STOPPING: frozenset({QUEUED, SUCCEEDED, FAILED, CANCELLED}),
    SUCCEEDED: frozenset(),
    FAILED: frozenset(),
    CANCELLED: frozenset(),
}
TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED})

# how a run ended: its command exited (``exit_code``); it never started; its node was lost; the job's
# own idle or duration limit stopped it; or the platform stopped it (a notice's deadline, a balance)
How = Literal["exited", "never_started", "lost", "limit", "stopped"]


@dataclass(frozen=True, slots=True)
class RunEnd:
    how: How
    exit_code: int | None = None
    noticed: bool = False  # the job was stopping under a notice (preempted, demoted or migrated)
    cancel_requested: bool = False
    # whether work is left; the simulator knows, the live server cannot tell (a run told to checkpoint
    # and exit exits 0 like a finished one), so there it is always assumed
    work_left: bool = True
    failures: int = 0  # runs of this job that ended the same way so far (never started, lost), this one included
    max_attempts: int = 3
    detail: str = ""  # the run's own reason (the instance's status reason, the limit that stopped it)


def after_run(end: RunEnd) -> tuple[str, str]:
    """(the job's next status, the reason it shows) once a run has ended."""
    if end.cancel_requested:
        return CANCELLED, "cancelled by user"
    if end.noticed and end.how in ("exited", "stopped") and end.work_left:
        return QUEUED, "preempted; requeued, resumes from DANLU_CHECKPOINT_DIR"
    if end.how == "exited":
        if end.exit_code == 0:
            return SUCCEEDED, "command exited with code 0"
        return FAILED, end.detail or f"command exited with code {end.exit_code}"
    if end.how == "never_started":
        if end.failures < end.max_attempts:
            return QUEUED, f"run never started ({end.detail}); requeued ({end.failures} of {end.max_attempts})"
        return FAILED, f"run could not start {end.failures} times; giving up: {end.detail}"
    if end.how == "lost":
        if end.failures < end.max_attempts:
            return (
                QUEUED,
                f"run lost with its node ({end.failures} of at most {end.max_attempts}); retrying from the checkpoint",
            )
        return FAILED, f"run lost {end.failures} times; giving up"
    if end.how == "limit":  # the job's own idle or duration limit: it ends here
        return FAILED, end.detail
    if not end.work_left:
        return SUCCEEDED, "finished"
    return QUEUED, f"run stopped: {end.detail}"  # stopped by the platform (e.g. balance exhausted): wait


def notice_deadline(requested_ms: int, now_ms: int, notice_ms: int) -> int:
    """When a noticed run must be off its GPUs: as the decision asks, never sooner than the notice."""
    return max(requested_ms, now_ms + notice_ms)
