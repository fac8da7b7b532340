"""What every service needs, built once by the server (or a test): the database, the clock, the
compute backend, what sandboxing it gives, and the settings. Services take it as their first
argument; nothing below reads globals."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from danlu.backend import Backend, SandboxStatus
from danlu.core.activity import Activity
from danlu.core.clock import Clock
from danlu.core.throttle import Throttle
from danlu.db.engine import Database


@dataclass(frozen=True)
class Retention:
    """How long telemetry samples are kept at each resolution (docs/telemetry.md), an operator setting."""

    raw_s: int = 3600  # every sample, for an hour
    minute_s: int = 7 * 86400  # 1-minute averages, for a week
    hour_s: int = 365 * 86400  # 1-hour averages, for a year


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
    # Demotion by attained service (danlu and danlu-cost policies; docs/scheduling.md): a checkpointing
    # job that has had this many GPU-seconds of service may make way for a shorter one (None: never),
    # after running at least demote_slice_s since its last start.
    demote_after_s: int | None = 8 * 3600
    demote_slice_s: int = 3600
    resize_cooldown_s: int = 1800  # an elastic job runs this long at one GPU count before a resize
    job_default_duration_s: int = 3600  # backfill estimate for jobs submitted without --est-duration
    job_max_attempts: int = 3  # runs lost with their node are retried this many times in all
    sandbox_uid_first: int = 2_000_000  # renters' sandbox uids: first + user id, below first + count
    sandbox_uid_count: int = 1_000_000
    # Where what sandboxes bind lives (workspaces, job folders, control folders, images, simulated
    # devices); it and its ancestors must be traversable by renters' uids. Default: data_dir.
    sandbox_dir: Path | None = None
    timezone: str = "UTC"  # the deployment's zone: invoice periods are its calendar months
    invoice_grace_s: int = 3 * 86400  # a month's invoice is finalised this long after the month ends
    sample_interval_s: float = 5.0  # telemetry: how often running instances are sampled
    retention: Retention = field(default_factory=Retention)  # raw / 1-minute / 1-hour samples kept
    # Idle auto-stop (danlu.telemetry.idle): applied to rentals and jobs that do not set their own,
    # and the longest window a renter may ask for; None = no default / no maximum.
    idle_stop_default_s: int | None = None
    idle_stop_max_s: int | None = None
    idle_threshold_default_pm: int = 50  # 5 %
    # Webhooks (danlu.notify.webhooks) reach only public addresses unless the operator allows more.
    webhook_allow_private: bool = False
    # The SSH gateway (danlu.access.ssh): off unless a port is given (0: any free port, for tests).
    ssh_host: str = "127.0.0.1"
    ssh_port: int | None = None

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
    backend: Backend
    settings: Settings
    sandbox: SandboxStatus = field(default_factory=lambda: SandboxStatus("off", "unsandboxed"))
    # Asks the control loop for a tick now (set by ControlLoop; a no-op without one): after a stop,
    # so the GPUs are freed as soon as the process has ended, not at the next regular tick.
    wake_loop: Callable[[], None] = field(default=lambda: None, repr=False)
    # Ends a stopped rental's transfer sandbox (danlu.access.transfer; set by the app that makes them) before
    # the rental starts or goes: a resize must never check a file system still mounted in one.
    end_transfers: Callable[[str], None] = field(default=lambda instance_id: None, repr=False)
    # Instances this process has committed as pending and is launching (danlu.compute.instances
    # .begin_launch): the control loop must not judge them abandoned before the backend knows them.
    launches: set[str] = field(default_factory=set, repr=False)
    # When a person last used each instance (sessions' input, port traffic): idle auto-stop reads it.
    activity: Activity = field(default_factory=Activity, repr=False)
    # Wrong console passwords (per account and per address) and wrong API tokens (per address).
    sign_in_throttle: Throttle = field(default_factory=lambda: Throttle(free=5, what="passwords"), repr=False)
    token_throttle: Throttle = field(default_factory=lambda: Throttle(free=20, what="API tokens"), repr=False)

    @property
    def sandbox_root(self) -> Path:
        return self.settings.sandbox_dir or self.settings.data_dir

    @property
    def workspaces(self) -> Path:
        return self.sandbox_root / "workspaces"

    @property
    def run_dirs(self) -> Path:
        return self.settings.data_dir / "runs"

    def control_dir(self, instance_id: str) -> Path:
        """Platform-written, read-only to the run (``/run/danlu``): the preemption deadline."""
        return self.sandbox_root / "control" / instance_id
