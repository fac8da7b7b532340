"""One rule for a run's end, shared by the simulator's engine and the live server (issue 11, item 9)."""

from __future__ import annotations

import pytest

from danlu.scheduling import engine, jobs, live
from danlu.scheduling.lifecycle import (
    CANCELLED,
    FAILED,
    QUEUED,
    SUCCEEDED,
    RunEnd,
    after_run,
    notice_deadline,
)


@pytest.mark.parametrize(
    ("end", "status", "words"),
    [
        (RunEnd("exited", 0), SUCCEEDED, "code 0"),
        (RunEnd("exited", 3), FAILED, "code 3"),
        (RunEnd("exited", 137, detail="stopped: max duration 1 h reached"), FAILED, "max duration"),
        (RunEnd("exited", 0, noticed=True), QUEUED, "preempted; requeued"),  # checkpointed on notice
        (RunEnd("stopped", noticed=True), QUEUED, "resumes from DANLU_CHECKPOINT_DIR"),
        (RunEnd("exited", 0, noticed=True, work_left=False), SUCCEEDED, "code 0"),  # the simulator knows
        (RunEnd("stopped", noticed=True, work_left=False), SUCCEEDED, "finished"),
        (RunEnd("exited", 1, noticed=True, work_left=False), FAILED, "code 1"),
        (RunEnd("stopped", detail="balance exhausted"), QUEUED, "run stopped: balance exhausted"),
        (RunEnd("never_started", failures=1, detail="no bwrap"), QUEUED, "requeued (1 of 3)"),
        (RunEnd("never_started", failures=3, detail="no bwrap"), FAILED, "could not start 3 times"),
        (RunEnd("lost", failures=2), QUEUED, "retrying from the checkpoint"),
        (RunEnd("lost", failures=3), FAILED, "lost 3 times"),
        (RunEnd("lost", failures=3, noticed=True), FAILED, "lost 3 times"),  # a loss counts even under notice
        (RunEnd("limit", detail="idle for 10 min"), FAILED, "idle for 10 min"),
        (RunEnd("exited", 0, noticed=True, cancel_requested=True), CANCELLED, "cancelled"),
    ],
)
def test_after_run(end: RunEnd, status: str, words: str) -> None:
    got, reason = after_run(end)
    assert got == status and words in reason


def test_a_notice_is_never_shorter_than_the_operators_period() -> None:
    assert notice_deadline(1_000, 500, 60_000) == 60_500
    assert notice_deadline(90_000, 500, 60_000) == 90_000


def test_both_clocks_use_the_one_rule() -> None:
    """The engine and the live job service decide with lifecycle's functions, not copies of them."""
    assert engine.after_run is after_run and jobs.after_run is after_run
    assert engine.notice_deadline is notice_deadline and live.notice_deadline is notice_deadline
