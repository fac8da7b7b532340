"""One scheduling round for both clocks (issue 11, item 9).

A round is the same on the simulator's virtual clock and on the live server's real one: runs that
ended move their jobs on (each by :func:`danlu.scheduling.lifecycle.after_run`); a view of the cluster
is taken; the pure core decides (:func:`danlu.scheduling.core.schedule`); each decision is handed to
the shell. What differs between the clocks is only where state lives and who carries decisions out,
behind :class:`Shell`: :class:`danlu.scheduling.engine.Engine` keeps it in memory and drives a
simulated executor; :class:`danlu.scheduling.live.LiveShell` keeps it in the database and drives the
instance service (real sandboxes, Slurm). So a fix to the round is a fix to both, and a simulated
result comes from the code that runs live.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from danlu.scheduling.core import schedule
from danlu.scheduling.model import ClusterView, Defer, Preempt, Start
from danlu.scheduling.policies import Policy


class Shell(Protocol):
    def settle(self, now_ms: int) -> int:
        """Runs that ended (exited, lost, past their notice) move their jobs on; how many did."""

    def view(self, now_ms: int) -> ClusterView | None:
        """The core's view now, or None when there is nothing to decide (no round)."""

    def start(self, d: Start, now_ms: int) -> bool:
        """Start a run as decided; False when it could not be started (the job waits, with why)."""

    def notice(self, d: Preempt, now_ms: int) -> bool:
        """Give a running job (or interruptible rental) its notice (preemption, demotion, migration)."""

    def defer(self, d: Defer, now_ms: int) -> None:
        """Leave a job queued, showing why (and remembering an off-peak wake-up)."""


@dataclass
class RoundReport:
    settled: int = 0  # jobs moved on because their run ended
    started: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)  # noticed: preemptions, demotions, migrations
    deferred: int = 0
    ran: bool = False  # the core was asked (there was something to decide)
    cpu_s: float = 0.0  # the core's own time


def run_round(shell: Shell, policy: Policy, now_ms: int) -> RoundReport:
    report = RoundReport(settled=shell.settle(now_ms))
    view = shell.view(now_ms)
    if view is None:
        return report
    began = time.process_time()
    decisions = schedule(view, policy)
    report.cpu_s = time.process_time() - began
    report.ran = True
    for d in decisions:
        if isinstance(d, Start):
            if shell.start(d, now_ms):
                report.started.append(d.job_id)
        elif isinstance(d, Preempt):
            if shell.notice(d, now_ms):
                report.preempted.append(d.job_id)
        else:
            shell.defer(d, now_ms)
            report.deferred += 1
    return report
