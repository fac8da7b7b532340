"""SQLAlchemy 2 models. Money is BigInteger minor units; time is BigInteger epoch milliseconds.

Guards live in the schema: unique idempotency keys, unique usage intervals per allocation, and a
GPU can point at one allocation at most. See docs/locking.md for how rows are claimed.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Setting(Base):
    __tablename__ = "settings"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


CONTROL_LOOP_LEASE = "control-loop"  # the lease of the control loop's work (danlu.server.loop)


class LeaseRow(Base):
    """Background work held by one server at a time (danlu.server.lease)."""

    __tablename__ = "leases"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(256))
    token: Mapped[str] = mapped_column(String(64))
    expires_at_ms: Mapped[int] = mapped_column(BigInteger)


class User(Base):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    # Most GPUs this user may hold at once, rentals and job runs together; NULL = no limit.
    gpu_quota: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The unprivileged OS uid/gid this user's sandboxes run under, allocated on first use from the
    # operator's range; unique, so no two renters ever share one.
    sandbox_uid: Mapped[int | None] = mapped_column(Integer, nullable=True, unique=True)
    # Set while the operator has suspended the user (the reason the user is shown); NULL = active.
    suspended_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The team the user rents on when no --team is given; NULL = the personal account.
    default_team_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    # The web console's sign-in (argon2id, danlu.accounts.credentials); NULL = no password set, so
    # this user signs in with API tokens only.
    password_hash: Mapped[str | None] = mapped_column(String(255), nullable=True)


class ApiToken(Base):
    """A named API token a person made from the console or ``danlu token create`` (beside the one
    token every user has on ``users``). Stored as a SHA-256 hash; revoking sets ``revoked_at_ms``."""

    __tablename__ = "api_tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    hint: Mapped[str] = mapped_column(String(16))  # the token's last characters, to tell tokens apart
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    revoked_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class SshKey(Base):
    """A person's SSH public key for the gateway (danlu.access.ssh). The fingerprint (SHA-256) is
    unique over everyone: a key is one person's, so the gateway knows who connects from it alone."""

    __tablename__ = "ssh_keys"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    public_key: Mapped[str] = mapped_column(Text)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)


class PortLink(Base):
    """A revocable link to one port of one instance through the port proxy (danlu.access.links):
    whoever holds it reaches that app, nothing else. Only the token's SHA-256 is kept."""

    __tablename__ = "port_links"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), index=True)
    port: Mapped[int] = mapped_column(Integer)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_by: Mapped[int] = mapped_column(ForeignKey("users.id"))
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    revoked_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class WebSession(Base):
    """A signed-in browser (the console's session cookie holds a random value; this row its hash).
    ``csrf`` is the token every form of that session must carry."""

    __tablename__ = "web_sessions"
    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    csrf: Mapped[str] = mapped_column(String(64))
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    expires_at_ms: Mapped[int] = mapped_column(BigInteger)


class BillingAccount(Base):
    """Who pays: a person's personal account or a team's shared one (docs/billing.md). Every money
    row (ledger cash and voucher accounts, allocations, instances, jobs, invoices) names one."""

    __tablename__ = "billing_accounts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # personal | team
    # The person a personal account belongs to (unique: one each); NULL for a team's account.
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True, unique=True)
    name: Mapped[str] = mapped_column(String(64))
    credit_limit_minor: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    # When the low-balance event was sent (danlu.notify.alerts); cleared once money lasts again.
    low_balance_warned_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class Team(Base):
    __tablename__ = "teams"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    billing_account_id: Mapped[int] = mapped_column(ForeignKey("billing_accounts.id"), unique=True)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)


class TeamMember(Base):
    __tablename__ = "team_members"
    __table_args__ = (UniqueConstraint("team_id", "user_id", name="uq_team_members_team_user"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    role: Mapped[str] = mapped_column(String(16))  # owner | admin | member | viewer
    # Most GPUs this member may hold at once on the team's account; NULL = no limit.
    gpu_quota: Mapped[int | None] = mapped_column(Integer, nullable=True)
    added_at_ms: Mapped[int] = mapped_column(BigInteger)


class Account(Base):
    """A ledger account. ``balance_minor`` is a projection of its entries, kept in the same
    transaction as the entries and guarded by a conditional UPDATE (never read-modify-write).

    ``kind``: cash (a billing account's balance), voucher (one voucher grant's unspent value),
    revenue, external (money from outside), promotions (where voucher value comes from).
    ``ref`` names the owner (``ba:ID``, ``grant:ID``, ``system``); (kind, ref) is unique, so a
    billing account has one cash account and a grant one voucher account."""

    __tablename__ = "accounts"
    __table_args__ = (UniqueConstraint("kind", "ref", name="uq_accounts_kind_ref"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    ref: Mapped[str] = mapped_column(String(64))
    billing_account_id: Mapped[int | None] = mapped_column(ForeignKey("billing_accounts.id"), nullable=True, index=True)
    currency: Mapped[str] = mapped_column(String(3))
    balance_minor: Mapped[int] = mapped_column(BigInteger, default=0)


class LedgerTransaction(Base):
    __tablename__ = "ledger_transactions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    idempotency_key: Mapped[str] = mapped_column(String(128), unique=True)
    kind: Mapped[str] = mapped_column(String(16))  # topup | usage
    memo: Mapped[str] = mapped_column(Text, default="")
    created_at_ms: Mapped[int] = mapped_column(BigInteger)


class LedgerEntry(Base):
    __tablename__ = "ledger_entries"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    transaction_id: Mapped[int] = mapped_column(ForeignKey("ledger_transactions.id"), index=True)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id"), index=True)
    amount_minor: Mapped[int] = mapped_column(BigInteger)


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


class Price(Base):
    __tablename__ = "prices"
    gpu_model: Mapped[str] = mapped_column(String(32), primary_key=True)
    price_per_hour_minor: Mapped[int] = mapped_column(BigInteger)
    # Price of preemptible capacity (interruptible jobs, and every preemption notice period); NULL = not offered.
    interruptible_price_per_hour_minor: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    currency: Mapped[str] = mapped_column(String(3))
    updated_at_ms: Mapped[int] = mapped_column(BigInteger)


class PricePlan(Base):
    """One version of a price: rows are never updated except to mark them superseded, so an
    allocation pointing at one is always rated by the price it started with."""

    __tablename__ = "price_plans"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    gpu_model: Mapped[str] = mapped_column(String(32), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # on-demand | interruptible
    price_per_hour_minor: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    superseded_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


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


class AllocationRow(Base):
    """GPUs bound to an instance for one interval; the unit the meter reads. The price is
    locked when the allocation starts, so a price change never re-rates running work."""

    __tablename__ = "allocations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    billing_account_id: Mapped[int] = mapped_column(ForeignKey("billing_accounts.id"), index=True)
    host_id: Mapped[int | None] = mapped_column(ForeignKey("hosts.id"), nullable=True)  # set once GPUs are claimed
    gpu_model: Mapped[str] = mapped_column(String(32))
    gpu_count: Mapped[int] = mapped_column(Integer)
    gpu_indices: Mapped[str] = mapped_column(String(256))
    plan: Mapped[str] = mapped_column(String(16), default="on-demand", server_default="on-demand")
    # The (immutable) price plan row this allocation is rated by; plan and price_per_hour_minor are
    # its copies, kept on the row so the meter reads one table.
    price_plan_id: Mapped[int] = mapped_column(ForeignKey("price_plans.id"), index=True)
    price_per_hour_minor: Mapped[int] = mapped_column(BigInteger)
    # A discount on GPU time fixed when the allocation starts (the student discount), basis points.
    discount_bp: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The operator's tariff rules (off-peak prices) in force when the allocation started, as JSON:
    # what the meter rates it by for its whole life (danlu.billing.tariffs). Empty = none.
    tariffs_json: Mapped[str] = mapped_column(Text, default="", server_default="")
    currency: Mapped[str] = mapped_column(String(3))
    # The hold whose prepaid GPUs this allocation runs on (plan "held", price 0); NULL otherwise.
    hold_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    started_at_ms: Mapped[int] = mapped_column(BigInteger)
    ended_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    billed_until_ms: Mapped[int] = mapped_column(BigInteger)
    billed_minor: Mapped[int] = mapped_column(BigInteger, default=0)
    settled: Mapped[bool] = mapped_column(Boolean, default=False, index=True)


class UsageRecordRow(Base):
    """One metered interval of one allocation. (allocation_id, start_ms) is its identity: a
    retried or replayed meter tick collides here instead of charging twice."""

    __tablename__ = "usage_records"
    __table_args__ = (UniqueConstraint("allocation_id", "start_ms", name="uq_usage_alloc_start"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    allocation_id: Mapped[int] = mapped_column(ForeignKey("allocations.id"))
    start_ms: Mapped[int] = mapped_column(BigInteger)
    end_ms: Mapped[int] = mapped_column(BigInteger)
    amount_minor: Mapped[int] = mapped_column(BigInteger)  # what was charged: vouchers + cash
    # The split of the charge: list price, the discount off it, and what vouchers paid (the rest is cash).
    gross_minor: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    discount_minor: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    voucher_minor: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # The final invoice this interval is on (NULL until one is finalised): an interval is on one only.
    invoice_id: Mapped[int | None] = mapped_column(ForeignKey("invoices.id"), nullable=True, index=True)
    # NULL when the interval rated 0 minor units (e.g. a few seconds of a cheap GPU): the seconds
    # are still recorded, so usage intervals tile every allocation with no gap.
    transaction_id: Mapped[int | None] = mapped_column(ForeignKey("ledger_transactions.id"), nullable=True)


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


class VoucherCampaign(Base):
    """A kind of voucher the operator offers: a fixed amount (or a percentage of each charge up to
    ``amount_minor``), for some usage, granted on sign-up, by code or by hand."""

    __tablename__ = "voucher_campaigns"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    amount_minor: Mapped[int] = mapped_column(BigInteger)  # value of each grant (a percentage's cap)
    percent_bp: Mapped[int | None] = mapped_column(Integer, nullable=True)  # NULL = a fixed amount
    scope_model: Mapped[str | None] = mapped_column(String(32), nullable=True)  # NULL = any GPU model
    scope_plan: Mapped[str | None] = mapped_column(String(16), nullable=True)  # NULL = any plan
    trigger: Mapped[str] = mapped_column(String(16))  # signup | code | manual
    code: Mapped[str | None] = mapped_column(String(64), nullable=True, unique=True)
    eligibility: Mapped[str] = mapped_column(String(16), default="all")  # all | new | student
    valid_from_ms: Mapped[int] = mapped_column(BigInteger)
    valid_until_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # last moment to redeem
    valid_for_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # a grant's life
    max_redemptions: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_per_account: Mapped[int] = mapped_column(Integer, default=1)
    redemptions: Mapped[int] = mapped_column(Integer, default=0)
    priority: Mapped[int] = mapped_column(Integer, default=100)  # lower is spent first
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)


class VoucherGrant(Base):
    """One voucher held by one billing account; its unspent value is the balance of its own
    ledger account. (campaign, account, n) is unique, so redemptions beyond ``max_per_account``
    collide in the database however many arrive at once."""

    __tablename__ = "voucher_grants"
    __table_args__ = (UniqueConstraint("campaign_id", "billing_account_id", "n", name="uq_voucher_grants_once"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    campaign_id: Mapped[int] = mapped_column(ForeignKey("voucher_campaigns.id"), index=True)
    billing_account_id: Mapped[int] = mapped_column(ForeignKey("billing_accounts.id"), index=True)
    n: Mapped[int] = mapped_column(Integer)
    account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id"), unique=True)
    granted_at_ms: Mapped[int] = mapped_column(BigInteger)
    expires_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    expired: Mapped[bool] = mapped_column(Boolean, default=False)
    expiry_warned_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # voucher_expiring sent
    # The person who redeemed a code (NULL: sign-up and operator grants): a code is once per person too.
    redeemed_by_user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True, index=True)


class Invoice(Base):
    """One billing account's statement for one calendar month (deployment time zone). Draft while
    the month (plus the grace window) is open; then final, numbered, and immutable (triggers)."""

    __tablename__ = "invoices"
    __table_args__ = (UniqueConstraint("billing_account_id", "period", name="uq_invoices_account_period"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    billing_account_id: Mapped[int] = mapped_column(ForeignKey("billing_accounts.id"), index=True)
    period: Mapped[str] = mapped_column(String(7))  # YYYY-MM
    status: Mapped[str] = mapped_column(String(8))  # draft | final
    number: Mapped[int | None] = mapped_column(Integer, nullable=True, unique=True)
    currency: Mapped[str] = mapped_column(String(3))
    total_minor: Mapped[int] = mapped_column(BigInteger, default=0)
    finalized_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class InvoiceLine(Base):
    __tablename__ = "invoice_lines"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    invoice_id: Mapped[int] = mapped_column(ForeignKey("invoices.id"), index=True)
    instance_id: Mapped[str] = mapped_column(String(32))
    description: Mapped[str] = mapped_column(Text)
    plan: Mapped[str] = mapped_column(String(16))
    seconds: Mapped[int] = mapped_column(BigInteger)
    price_per_hour_minor: Mapped[int] = mapped_column(BigInteger)
    gross_minor: Mapped[int] = mapped_column(BigInteger)
    discount_minor: Mapped[int] = mapped_column(BigInteger)
    voucher_minor: Mapped[int] = mapped_column(BigInteger)
    cash_minor: Mapped[int] = mapped_column(BigInteger)
    adjustment: Mapped[bool] = mapped_column(Boolean, default=False)  # usage of an earlier, closed period


class IdempotencyRecord(Base):
    """A mutating money request's first response, by (caller scope, key)."""

    __tablename__ = "idempotency_records"
    __table_args__ = (UniqueConstraint("scope", "key", name="uq_idempotency_scope_key"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    scope: Mapped[str] = mapped_column(String(128))
    key: Mapped[str] = mapped_column(String(128))
    request_hash: Mapped[str] = mapped_column(String(64))
    response_json: Mapped[str] = mapped_column(Text)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)


class Event(Base):
    """A notice for a person or an account's managers (a team member removed while running,
    a voucher expiring …); the feed issue 10 builds on."""

    __tablename__ = "events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True, index=True)
    billing_account_id: Mapped[int | None] = mapped_column(ForeignKey("billing_accounts.id"), nullable=True, index=True)
    instance_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text)
    at_ms: Mapped[int] = mapped_column(BigInteger)

    @classmethod
    def about_instance(cls, inst: Instance, kind: str, message: str, at_ms: int) -> Event:
        """An event about an instance, for its renter (and, through its payer, a team's managers)."""
        return cls(
            user_id=inst.user_id,
            billing_account_id=inst.billing_account_id,
            instance_id=inst.id,
            kind=kind,
            message=f"{inst.id}: {message}",
            at_ms=at_ms,
        )


class Verification(Base):
    """A renter's request for academic (student) verification and the operator's decision; the
    latest decided row of a user is their status. An approved one gives their personal account the
    operator's student discount on GPU time (``settings.student_discount_bp``)."""

    __tablename__ = "verifications"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    status: Mapped[str] = mapped_column(String(16))  # pending | approved | refused
    institution: Mapped[str] = mapped_column(String(128))
    evidence: Mapped[str] = mapped_column(Text, default="")  # e.g. a university e-mail address
    reason: Mapped[str] = mapped_column(Text, default="")  # the operator's, when decided
    requested_at_ms: Mapped[int] = mapped_column(BigInteger)
    decided_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class Budget(Base):
    """A spending limit on a billing account, one member's spending on it, or one instance.
    ``scope`` is ``account``, ``member:USER_ID`` or ``instance:ID``; (account, scope) is unique.
    Soft: events at 50/80/100 %. Hard: the meter bills up to the cap exactly and stops the work."""

    __tablename__ = "budgets"
    __table_args__ = (UniqueConstraint("billing_account_id", "scope", name="uq_budgets_account_scope"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    billing_account_id: Mapped[int] = mapped_column(ForeignKey("billing_accounts.id"), index=True)
    scope: Mapped[str] = mapped_column(String(64))
    period: Mapped[str] = mapped_column(String(8))  # month | total
    soft_minor: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    hard_minor: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # The highest soft threshold already announced (0, 50, 80, 100) in ``notified_period``.
    notified_pct: Mapped[int] = mapped_column(Integer, default=0)
    notified_period: Mapped[str] = mapped_column(String(7), default="")
    created_at_ms: Mapped[int] = mapped_column(BigInteger)


class TariffRule(Base):
    """An operator's time-of-day price rule (off-peak hours, weekends) in the deployment's time
    zone. Rules are never edited: retiring one sets ``retired_at_ms``; an allocation is rated by the
    rules in force when it started, so a change never re-rates running or past work."""

    __tablename__ = "tariff_rules"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    days: Mapped[str] = mapped_column(String(32))  # mon,tue,... (the day a window starts on)
    start: Mapped[str] = mapped_column(String(5))  # HH:MM
    end: Mapped[str] = mapped_column(String(5))  # HH:MM; <= start wraps past midnight
    multiplier: Mapped[str] = mapped_column(String(16))  # a decimal, e.g. "0.5"
    plans: Mapped[str] = mapped_column(String(64), default="")  # comma-separated; empty = all
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    retired_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class PlanTerm(Base):
    """The operator's terms for one package or reserved commitment length (``package-day`` …
    ``reserved-12m``): the discount off the on-demand price and the fee kept on an early
    cancellation of a package. Versioned like price plans: a change supersedes the row, and a hold
    keeps the row it was bought under."""

    __tablename__ = "plan_terms"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    term: Mapped[str] = mapped_column(String(16))
    discount_bp: Mapped[int] = mapped_column(Integer)
    cancel_fee_bp: Mapped[int] = mapped_column(Integer)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    superseded_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class Hold(Base):
    """A package or reserved commitment: ``gpu_count`` GPUs of one model on one host kept for one
    billing account from ``starts_at_ms`` to ``ends_at_ms`` (``gpus.hold_id``), prepaid at the
    on-demand price of ``price_plan_id`` less ``discount_bp``. state: active | expired | cancelled."""

    __tablename__ = "holds"
    __table_args__ = (Index("ix_holds_state_ends", "state", "ends_at_ms"),)
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    billing_account_id: Mapped[int] = mapped_column(ForeignKey("billing_accounts.id"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))  # who bought it
    term: Mapped[str] = mapped_column(String(16))
    plan_term_id: Mapped[int] = mapped_column(ForeignKey("plan_terms.id"))
    gpu_model: Mapped[str] = mapped_column(String(32))
    gpu_count: Mapped[int] = mapped_column(Integer)
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id"))
    price_plan_id: Mapped[int] = mapped_column(ForeignKey("price_plans.id"))  # the on-demand row priced from
    price_per_hour_minor: Mapped[int] = mapped_column(BigInteger)  # its on-demand price per GPU-hour
    discount_bp: Mapped[int] = mapped_column(Integer)
    cancel_fee_bp: Mapped[int] = mapped_column(Integer)
    paid_minor: Mapped[int] = mapped_column(BigInteger)
    on_expiry: Mapped[str] = mapped_column(String(16))  # stop | on-demand
    state: Mapped[str] = mapped_column(String(16))
    instance_id: Mapped[str | None] = mapped_column(String(32), nullable=True)  # rented with it, if any
    starts_at_ms: Mapped[int] = mapped_column(BigInteger)
    ends_at_ms: Mapped[int] = mapped_column(BigInteger)
    ended_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # expired or cancelled at
    created_at_ms: Mapped[int] = mapped_column(BigInteger)


class ChargeRow(Base):
    """A one-off amount on an account's invoice beside metered usage: a hold's purchase, or the
    refund of an early cancellation (negative). (hold, kind) is unique: a hold is paid for once
    and refunded at most once, however many requests race."""

    __tablename__ = "charges"
    __table_args__ = (UniqueConstraint("hold_id", "kind", name="uq_charges_hold_kind"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    billing_account_id: Mapped[int] = mapped_column(ForeignKey("billing_accounts.id"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    hold_id: Mapped[str] = mapped_column(ForeignKey("holds.id"))
    kind: Mapped[str] = mapped_column(String(16))  # purchase | refund
    plan: Mapped[str] = mapped_column(String(16))
    description: Mapped[str] = mapped_column(Text)
    at_ms: Mapped[int] = mapped_column(BigInteger)
    seconds: Mapped[int] = mapped_column(BigInteger)  # the term's seconds bought, or (negative) given back
    price_per_hour_minor: Mapped[int] = mapped_column(BigInteger)
    gross_minor: Mapped[int] = mapped_column(BigInteger)
    discount_minor: Mapped[int] = mapped_column(BigInteger)
    amount_minor: Mapped[int] = mapped_column(BigInteger)  # what cash paid (negative: given back)
    transaction_id: Mapped[int] = mapped_column(ForeignKey("ledger_transactions.id"))
    invoice_id: Mapped[int | None] = mapped_column(ForeignKey("invoices.id"), nullable=True, index=True)


class HoldQuote(Base):
    """What cancelling a hold early gives back, as shown to the renter; the cancel call must name
    an unexpired quote of the same hold (it then cancels at its own moment, never for more)."""

    __tablename__ = "hold_quotes"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    hold_id: Mapped[str] = mapped_column(ForeignKey("holds.id"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    refund_minor: Mapped[int] = mapped_column(BigInteger)
    kept_minor: Mapped[int] = mapped_column(BigInteger)  # the fee (package) or claw-back (reserved)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    expires_at_ms: Mapped[int] = mapped_column(BigInteger)


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


class Webhook(Base):
    """A person's webhook (danlu.notify.webhooks): the events they see are POSTed here, signed with
    ``secret``; ``kinds`` (comma-separated, empty = all) filters; ``cursor_event_id`` is the newest
    event already turned into deliveries."""

    __tablename__ = "webhooks"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    url: Mapped[str] = mapped_column(Text)
    secret: Mapped[str] = mapped_column(String(64))
    # during a rotation the old secret signs beside the new one until previous_until_ms
    previous_secret: Mapped[str | None] = mapped_column(String(64), nullable=True)
    previous_until_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    kinds: Mapped[str] = mapped_column(Text, default="")
    cursor_event_id: Mapped[int] = mapped_column(Integer, default=0)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    deleted_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


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


class WebhookDelivery(Base):
    """One event for one webhook: pending until the receiver answers 2xx (delivered) or the
    attempts run out (failed); unique per (webhook, event), so an event is queued once."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("webhook_id", "event_id", name="uq_webhook_deliveries_webhook_event"),
        Index("ix_webhook_deliveries_due", "status", "next_attempt_ms"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    webhook_id: Mapped[int] = mapped_column(ForeignKey("webhooks.id"))
    event_id: Mapped[int] = mapped_column(ForeignKey("events.id"))
    status: Mapped[str] = mapped_column(String(16))  # pending | delivered | failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_ms: Mapped[int] = mapped_column(BigInteger)
    last_status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_error: Mapped[str] = mapped_column(Text, default="")
    delivered_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
