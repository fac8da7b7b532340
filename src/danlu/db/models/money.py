"""Money: billing accounts, the ledger, prices and plans, allocations and their usage records, vouchers,
invoices, idempotency records, budgets, tariffs, packages and reservations (holds) and their charges."""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from danlu.db.models.base import Base


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
