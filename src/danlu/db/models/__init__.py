"""SQLAlchemy 2 models. Money is BigInteger minor units; time is BigInteger epoch milliseconds.

Guards live in the schema: unique idempotency keys, unique usage intervals per allocation, and a
GPU can point at one allocation at most. See docs/locking.md for how rows are claimed.

One module per area (base, people, money, compute, notify); every model is imported here, so
``from danlu.db.models import X`` and the metadata Alembic reads see them all.
"""

from __future__ import annotations

from danlu.db.models.base import (
    CONTROL_LOOP_LEASE,
    NAMING,
    Base,
    LeaseRow,
    Setting,
)
from danlu.db.models.compute import (
    Gpu,
    HostRow,
    Image,
    Instance,
    InstanceEvent,
    InstanceSchedule,
    Job,
    JobEvent,
    MetricSample,
    Snapshot,
)
from danlu.db.models.money import (
    Account,
    AllocationRow,
    BillingAccount,
    Budget,
    ChargeRow,
    Hold,
    HoldQuote,
    IdempotencyRecord,
    Invoice,
    InvoiceLine,
    LedgerEntry,
    LedgerTransaction,
    PlanTerm,
    Price,
    PricePlan,
    TariffRule,
    UsageRecordRow,
    VoucherCampaign,
    VoucherGrant,
)
from danlu.db.models.notify import Event, Webhook, WebhookDelivery
from danlu.db.models.people import (
    ApiToken,
    PortLink,
    SshKey,
    Team,
    TeamMember,
    User,
    Verification,
    WebSession,
)

__all__ = [
    "CONTROL_LOOP_LEASE",
    "NAMING",
    "Account",
    "AllocationRow",
    "ApiToken",
    "Base",
    "BillingAccount",
    "Budget",
    "ChargeRow",
    "Event",
    "Gpu",
    "Hold",
    "HoldQuote",
    "HostRow",
    "IdempotencyRecord",
    "Image",
    "Instance",
    "InstanceEvent",
    "InstanceSchedule",
    "Invoice",
    "InvoiceLine",
    "Job",
    "JobEvent",
    "LeaseRow",
    "LedgerEntry",
    "LedgerTransaction",
    "MetricSample",
    "PlanTerm",
    "PortLink",
    "Price",
    "PricePlan",
    "Setting",
    "Snapshot",
    "SshKey",
    "TariffRule",
    "Team",
    "TeamMember",
    "UsageRecordRow",
    "User",
    "Verification",
    "VoucherCampaign",
    "VoucherGrant",
    "WebSession",
    "Webhook",
    "WebhookDelivery",
]
