"""What every service needs, built once by the server (or a test): the database, the clock, the
executor and the settings. Services take it as their first argument; nothing below reads globals."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from danlu.compute.executor import Executor
from danlu.core.clock import Clock
from danlu.db.engine import Database


@dataclass
class Settings:
    data_dir: Path
    stop_grace_s: int = 10  # SIGTERM → SIGKILL on `stop`
    exhausted_grace_s: int = 0  # SIGTERM → SIGKILL when a balance runs out ("at once")
    min_prepaid_seconds: int = 60  # a rental must be covered for at least this long
    meter_interval_s: float = 10.0  # ledger postings; live cost is computed between them
    tick_interval_s: float = 1.0  # process reconciliation
    scheduler_policy: str = "danlu"  # live job scheduling policy (danlu.scheduling.policies)
    preempt_notice_s: int = 60  # guaranteed notice before a preempted run is killed
    job_default_duration_s: int = 3600  # backfill estimate for jobs submitted without --est-duration
    job_max_attempts: int = 3  # runs lost with their node are retried this many times in all

    def __post_init__(self) -> None:
        if self.meter_interval_s >= self.min_prepaid_seconds:
            raise ValueError(
                f"meter interval ({self.meter_interval_s} s) must be shorter than the prepaid minimum "
                f"({self.min_prepaid_seconds} s), or a new rental could run past its balance unmetered"
            )


@dataclass
class Platform:
    db: Database
    clock: Clock
    executor: Executor
    settings: Settings

    @property
    def workspaces(self) -> Path:
        return self.settings.data_dir / "workspaces"

    @property
    def run_dirs(self) -> Path:
        return self.settings.data_dir / "runs"
