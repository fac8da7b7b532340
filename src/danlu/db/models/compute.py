"""Compute: hosts and GPUs, instances and their events, batch jobs, snapshots, images, schedules and
metric samples."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import Mapped, mapped_column

from danlu.db.models.base import Base


class HostRow(Base):
    __tablename__ = "hosts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    is_local: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    # What each rental on this host may use, per GPU it rents (set by the operator; shown in offers).
    cpus_per_gpu_milli: Mapped[int] = mapped_column(Integer, default=1000, server_default="1000")
    mem_per_gpu_mb: Mapped[int] = mapped_column(BigInteger, default=4096, server_default="4096")
    disk_per_gpu_mb: Mapped[int] = mapped_column(BigInteger, default=51200, server_default="51200")
    pids_per_gpu: Mapped[int] = mapped_column(Integer, default=1024, server_default="1024")
    # Sandbox network: none | outbound | host (see docs/security.md).
    network_policy: Mapped[str] = mapped_column(String(16), default="none", server_default="none")


class Gpu(Base):
    __tablename__ = "gpus"
    __table_args__ = (UniqueConstraint("host_id", "idx", name="uq_gpus_host_idx"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id"))
    idx: Mapped[int] = mapped_column(Integer)
    uuid: Mapped[str] = mapped_column(String(96), unique=True)
    model: Mapped[str] = mapped_column(String(32), index=True)
    nvml_name: Mapped[str] = mapped_column(String(128))
    vram_mb: Mapped[int] = mapped_column(BigInteger)
    simulated: Mapped[bool] = mapped_column(Boolean)
    # The device node's minor number (/dev/nvidiaN); for a simulated GPU, its index.
    device_minor: Mapped[int | None] = mapped_column(Integer, nullable=True)
    present: Mapped[bool] = mapped_column(Boolean, default=True)
    # A job the platform did not start holds it (another Slurm user's, at the last reconciliation):
    # neither offered nor claimed until it is free again.
    held_by_cluster: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # The allocation holding this GPU, or NULL when free. Claimed by a conditional UPDATE.
    allocation_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True, index=True)
    # The package or reserved commitment keeping this GPU for one billing account (danlu.compute.holds),
    # or NULL. A held GPU is free only to that account's rentals, running or stopped.
    hold_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)


class Instance(Base):
    __tablename__ = "instances"
    __table_args__ = (Index("ix_instances_user_status", "user_id", "status"),)
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))  # who rented it (the actor)
    billing_account_id: Mapped[int] = mapped_column(ForeignKey("billing_accounts.id"), index=True)  # who pays
    # Set when this instance is one run of a batch job (hidden from `ps`; the job owns it).
    job_id: Mapped[str | None] = mapped_column(ForeignKey("jobs.id"), nullable=True, index=True)
    # Rented at the interruptible price: the scheduler may preempt it, always with notice.
    interruptible: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    name: Mapped[str] = mapped_column(String(64), default="")
    status: Mapped[str] = mapped_column(String(16), index=True)
    status_reason: Mapped[str] = mapped_column(Text, default="")
    gpu_model: Mapped[str] = mapped_column(String(32))
    gpu_count: Mapped[int] = mapped_column(Integer)
    command_json: Mapped[str] = mapped_column(Text)
    host_id: Mapped[int | None] = mapped_column(ForeignKey("hosts.id"), nullable=True)
    workspace: Mapped[str] = mapped_column(Text)
    image: Mapped[str] = mapped_column(String(64), default="host", server_default="host")
    # The renter's own environment variables (JSON object), passed into the sandbox only.
    env_json: Mapped[str] = mapped_column(Text, default="{}", server_default="{}")
    # The compute backend's opaque handle of the current run; NULL while none is recorded.
    run_handle: Mapped[str | None] = mapped_column(Text, nullable=True)
    # What the current (or last) run's sandbox was given: uid, limits, network (JSON, for display).
    sandbox_json: Mapped[str] = mapped_column(Text, default="", server_default="")
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    current_allocation_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # While stopped with its workspace kept: the allocation billing that storage (plan "storage"),
    # since when, when the renter was warned of its release, and when it was released.
    storage_allocation_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # Stopped with priced storage, not yet measured: the loop's ``storage`` phase measures the workspace
    # after the stop commits and bills it from this moment (danlu.compute.storage.measure_stored).
    storage_measure_from_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True, index=True)
    stopped_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    storage_warned_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    workspace_released_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    kill_after_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    last_seen_alive_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    updated_at_ms: Mapped[int] = mapped_column(BigInteger)
    # Idle auto-stop (danlu.telemetry.idle): stop when every GPU stayed under the threshold
    # (per-mille) for this many seconds; NULL = never. A run longer than max_duration_s is stopped.
    idle_stop_s: Mapped[int | None] = mapped_column(Integer, nullable=True)
    idle_threshold_pm: Mapped[int] = mapped_column(Integer, default=50, server_default="50")
    max_duration_s: Mapped[int | None] = mapped_column(Integer, nullable=True)
    stop_reason: Mapped[str] = mapped_column(Text, default="", server_default="")  # why it last stopped
    stop_cause: Mapped[str] = mapped_column(String(24), default="", server_default="")  # lifecycle.StopCause


class InstanceEvent(Base):
    __tablename__ = "instance_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), index=True)
    from_status: Mapped[str] = mapped_column(String(16))
    to_status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text)
    at_ms: Mapped[int] = mapped_column(BigInteger)


class Job(Base):
    """A batch workload the scheduler places, may queue, preempt and resume. Each run is an
    instance (``Instance.job_id``); the checkpoint directory persists across runs."""

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_status_seq", "status", "seq"),)
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger)  # arrival order
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    billing_account_id: Mapped[int] = mapped_column(ForeignKey("billing_accounts.id"), index=True)
    status: Mapped[str] = mapped_column(String(16))
    status_reason: Mapped[str] = mapped_column(Text, default="")
    command_json: Mapped[str] = mapped_column(Text)
    gpus: Mapped[int] = mapped_column(Integer)
    gpu_types: Mapped[str] = mapped_column(String(256), default="")  # comma-separated; empty = any priced model
    max_price_minor: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    deadline_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    est_duration_s: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    interruptible: Mapped[bool] = mapped_column(Boolean, default=False)
    priority: Mapped[int] = mapped_column(Integer, default=1)
    submit_ms: Mapped[int] = mapped_column(BigInteger)
    first_start_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    end_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    current_instance_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    notice_deadline_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    image: Mapped[str] = mapped_column(String(64), default="host", server_default="host")
    env_json: Mapped[str] = mapped_column(Text, default="{}", server_default="{}")
    # Given to each run (danlu.telemetry.idle): an idle or over-long run is stopped and the job fails.
    idle_stop_s: Mapped[int | None] = mapped_column(Integer, nullable=True)
    idle_threshold_pm: Mapped[int] = mapped_column(Integer, default=50, server_default="50")
    max_duration_s: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Waits in the queue until this job (the same renter's, submitted before it) has succeeded; cancelled
    # unrun when it fails or is cancelled (``danlu run --after``; danlu.scheduling.jobs.settle_dependencies).
    after_job_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    # Runs in this rental's own workspace, not one of its own (``danlu run --workspace ID``, migration 0028)
    workspace_instance_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    # An elastic job (``danlu run --gpus 2-8``, migration 0029): runs at ``gpus`` to ``gpus_max`` GPUs, the
    # scheduler's choice each run (danlu.scheduling.elastic); None: always ``gpus``.
    gpus_max: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # the count a resize decided (its notice given): its next run takes it, if that fits then
    resize_to: Mapped[int | None] = mapped_column(Integer, nullable=True)


class JobEvent(Base):
    __tablename__ = "job_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), index=True)
    from_status: Mapped[str] = mapped_column(String(16))
    to_status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text)
    at_ms: Mapped[int] = mapped_column(BigInteger)


class Snapshot(Base):
    """A restic snapshot of a stopped instance's workspace in its billing account's repository
    (danlu.compute.snapshots); the instance may be removed since."""

    __tablename__ = "snapshots"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    billing_account_id: Mapped[int] = mapped_column(ForeignKey("billing_accounts.id"))
    instance_id: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(64))
    restic_id: Mapped[str] = mapped_column(String(64))
    size_bytes: Mapped[int] = mapped_column(BigInteger)  # the workspace's files, as restored
    added_bytes: Mapped[int] = mapped_column(BigInteger)  # new data this snapshot stored (the rest was there)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    # Where snapshots are priced: the storage allocation billing it (plan "storage", model "snapshot", MiB of
    # size_bytes) from its creation to its removal (migration 0026)
    allocation_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # When its renter was told it goes at the end of the retention period (migration 0027)
    warned_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class Image(Base):
    """A root filesystem renters can run in. ``host`` is this host's own /usr, /etc … read-only;
    ``rootfs`` images live under the data directory, owned by the platform, bound read-only."""

    __tablename__ = "images"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # host | rootfs
    description: Mapped[str] = mapped_column(Text, default="")
    root_path: Mapped[str] = mapped_column(Text, default="")
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)


class MetricSample(Base):
    """What the control loop measured of one running instance (docs/telemetry.md): its GPU number
    ``gpu_index`` (the host's index), or the run itself (−1: CPU in ``util_pm``, RSS in ``mem_mb``).
    ``res``: raw | 1m | 1h; a 1m or 1h row averages ``samples`` raw ones (``util_max_pm`` their max)."""

    __tablename__ = "metric_samples"
    __table_args__ = (
        Index("ix_metric_samples_instance_res_at", "instance_id", "res", "at_ms"),
        Index("ix_metric_samples_res_at", "res", "at_ms"),
    )
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    instance_id: Mapped[str] = mapped_column(String(32))
    gpu_index: Mapped[int] = mapped_column(Integer)
    at_ms: Mapped[int] = mapped_column(BigInteger)
    res: Mapped[str] = mapped_column(String(4))
    samples: Mapped[int] = mapped_column(Integer, default=1)
    util_pm: Mapped[int | None] = mapped_column(Integer, nullable=True)  # per-mille of the GPU (or of the CPU allotted)
    util_max_pm: Mapped[int | None] = mapped_column(Integer, nullable=True)
    mem_mb: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    power_mw: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    temp_c: Mapped[int | None] = mapped_column(Integer, nullable=True)
    simulated: Mapped[bool] = mapped_column(Boolean, default=False)
    # The run's row only: its workspace (MiB) and its own network namespace's bytes so far (counters).
    disk_mb: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    net_rx_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    net_tx_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class InstanceSchedule(Base):
    """An instance's start/stop timetable (danlu.compute.schedules): stop and/or start at a
    wall-clock time (``HH:MM``, the deployment's zone) on ``days`` (weekday numbers, mon = 0,
    comma-separated). ``acted_until_ms``: every boundary up to then has been acted on;
    ``next_due_ms``: the next one, so the loop selects only due rows."""

    __tablename__ = "instance_schedules"
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), primary_key=True)
    stop_hm: Mapped[str | None] = mapped_column(String(5), nullable=True)
    start_hm: Mapped[str | None] = mapped_column(String(5), nullable=True)
    days: Mapped[str] = mapped_column(String(16))
    acted_until_ms: Mapped[int] = mapped_column(BigInteger)
    next_due_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True, index=True)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
