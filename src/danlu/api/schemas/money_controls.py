"""Budgets, the student discount, tariffs and stopped storage (issue 9 parts 3, 4, 6, 7)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from pydantic import BaseModel, ConfigDict, Field

from danlu.accounts.service import NAME_RE as USER_NAME_RE
from danlu.api.schemas.common import INSTANCE_ID, NO_CONTROL, Amount, PositiveAmount, Strict, UserName, limited
from danlu.api.schemas.instances import DAYS_PATTERN
from danlu.api.schemas.vouchers import PERCENT, PLAN_CHOICES
from danlu.billing.storage import MAX_SNAPSHOT_QUOTA_GB

# --- budgets, the student discount, tariffs, stopped storage (issue 9 parts 3, 4, 6, 7) ---------

BUDGET_PERIOD = r"^(month|total)$"
MAX_ROW_ID = 2**31 - 1  # the id columns are INTEGER (32-bit on PostgreSQL)
BudgetIdPath = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="A budget's id from `GET /budgets`")]
BudgetTeamQuery = Annotated[
    str | None,
    Query(max_length=64, pattern=USER_NAME_RE.pattern, description="A team you are in (default: your own account)"),
]


class BudgetIn(Strict):
    """One budget per scope: the account (neither ``member`` nor ``instance``), one team member, or
    one instance; setting it again replaces its limits. At least one of ``soft`` and ``hard``
    (a request with neither, or with both ``member`` and ``instance``, answers 422)."""

    member: UserName | None = Field(None, description="A member of the team's account (owners and admins set it)")
    instance: (
        Annotated[
            str,
            Field(pattern=INSTANCE_ID, max_length=32),
            limited("invalid_budget_scope", "instance is an instance id, i- and hex", pattern=INSTANCE_ID, text=32),
        ]
        | None
    ) = Field(None, description="One instance on the account (its renter or the team's managers set it)")
    period: Annotated[
        str,
        Field(pattern=BUDGET_PERIOD),
        limited("invalid_budget_period", "period is month or total", pattern=BUDGET_PERIOD),
    ] = Field("month", description="month: this calendar month (deployment time zone); total: ever")
    soft: PositiveAmount | None = Field(None, description="Events at 50%, 80% and 100% of it")
    hard: PositiveAmount | None = Field(None, description="Usage in the scope stops exactly here")


class BudgetOut(BaseModel):
    id: int
    scope: str = Field(description="account, member:NAME or instance:ID")
    period: str
    soft: str | None
    hard: str | None
    spent: str = Field(description="Charged in the scope this period (vouchers and cash, after discounts)")
    currency: str


INSTITUTION_MAX, EVIDENCE_MAX = 128, 2000
_TEXT = r"[^\x00-\x1f\x7f]*"
_SOLID = r"[^\x00-\x20\x7f\x85\s]"
INSTITUTION = f"^{_TEXT}{_SOLID}{_TEXT}{_SOLID}{_TEXT}$"
"""At least two characters other than spaces (the service strips the name), no control characters."""


class VerificationIn(Strict):
    institution: Annotated[
        str,
        Field(min_length=2, max_length=INSTITUTION_MAX, pattern=INSTITUTION),
        limited(
            "invalid_verification",
            "name your institution (2-128 characters, no control characters)",
            text=INSTITUTION_MAX,
            pattern=INSTITUTION,
        ),
    ]
    evidence: Annotated[
        str,
        Field(max_length=EVIDENCE_MAX, pattern=r"^[^\x00]*$"),
    ] = Field("", description="What shows you are a student: a university e-mail, a card number")


class VerificationOut(BaseModel):
    user: str
    status: str = Field(description="none, pending, approved or refused")
    institution: str
    reason: str = Field(description="Why a request was refused")
    requested_at: str | None
    decided_at: str | None
    discount: str = Field(description="The student discount an approved renter gets now, in percent")


class VerificationRequestOut(VerificationOut):
    evidence: str


class DiscountIn(Strict):
    percent: Annotated[
        str,
        Field(pattern=PERCENT, max_length=6),
        limited(
            "invalid_discount",
            "the student discount is a percentage from 0 to 100, at most 2 decimals",
            pattern=PERCENT,
        ),
    ] = Field(description="0 to 100, at most 2 decimals, e.g. 20 or 12.5")


class DiscountOut(BaseModel):
    percent: str


CLOCK_TIME = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
MULTIPLIER = r"^0(\.[0-9]{1,4})?$"
_BAD_TARIFF_TIME = limited("invalid_tariff", "times are HH:MM in 24 h, e.g. 23:00 (got {value})", pattern=CLOCK_TIME)
TariffIdPath = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="A tariff rule's id from `GET /admin/tariffs`")]


class TariffIn(Strict):
    """A time-of-day rule; ``to`` at or before ``from`` wraps past midnight (equal times answer 422)."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    name: Annotated[
        str,
        Field(min_length=1, max_length=64, pattern=NO_CONTROL),
        limited("invalid_tariff", "a tariff's name is 1 to 64 characters", text=64),
    ]
    days: Annotated[
        list[
            Annotated[
                str,
                Field(pattern=DAYS_PATTERN),
                limited("invalid_tariff", "days are mon … sun, mon-fri, weekdays …", pattern=DAYS_PATTERN),
            ]
        ],
        Field(min_length=1, max_length=7, description="The days a window starts on: mon … sun, mon-fri, weekdays …"),
    ]
    from_: Annotated[str, Field(pattern=CLOCK_TIME), _BAD_TARIFF_TIME] = Field(
        alias="from", description="Local time (deployment time zone), HH:MM"
    )
    to: Annotated[str, Field(pattern=CLOCK_TIME), _BAD_TARIFF_TIME] = Field(description="HH:MM; <= from wraps")
    multiplier: Annotated[
        str,
        Field(pattern=MULTIPLIER, max_length=6),
        limited("invalid_tariff", "a multiplier is 0 to below 1, at most 4 decimals, e.g. 0.5", pattern=MULTIPLIER),
    ] = Field(description="The price factor in the window: 0.5 is -50%")
    plans: Annotated[
        list[
            Annotated[
                str,
                Field(pattern=f"^({PLAN_CHOICES})$"),
                limited("invalid_tariff", "plans are on-demand and interruptible", pattern=f"^({PLAN_CHOICES})$"),
            ]
        ],
        Field(max_length=2, description="Only these plans (empty: every plan)"),
    ] = Field(default_factory=list)


class TariffOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    id: int
    name: str
    days: list[str]
    from_: str = Field(alias="from")
    to: str
    multiplier: str
    plans: list[str] = Field(description="empty: every plan")
    created_at: str | None
    retired_at: str | None = Field(description="null: in force")


RETENTION = (
    r"^(([1-9]|[1-9][0-9]|[1-9][0-9]{2}|[1-7][0-9]{3}|8[0-6][0-9]{2}|87[0-7][0-9]|878[0-4])h"
    r"|([1-9]|[1-9][0-9]|[12][0-9]{2}|3[0-5][0-9]|36[0-6])d)$"
)
"""1h to 8784h, or 1d to 366d: the service's 1 hour to 366 days."""
_BAD_RETENTION = limited(
    "invalid_storage_policy", "a period is hours or days such as 12h or 7d, 1 hour to 366 days", pattern=RETENTION
)


SNAPSHOT_RETENTION = r"^(0|[1-9][0-9]{0,2}d|[12][0-9]{3}d|3[0-5][0-9]{2}d|36[0-5][0-9]d|3660d)$"  # 1d to 3660d
_BAD_SNAPSHOT_RETENTION = limited(
    "invalid_storage_policy", "a snapshot retention is days such as 90d (1d to 3660d), or 0 to keep them",
    pattern=SNAPSHOT_RETENTION,
)  # fmt: skip


class StorageIn(Strict):
    """Only the fields given change. Each period is 1 hour to 366 days, in hours or days."""

    price_gb_month: Amount | None = Field(None, description="What a stopped instance's workspace costs per GB-month")
    warn_after: Annotated[str, Field(pattern=RETENTION), _BAD_RETENTION] | None = Field(
        None, description="Stopped this long, the renter is warned: 12h, 7d (1h to 366d)"
    )
    release_after: Annotated[str, Field(pattern=RETENTION), _BAD_RETENTION] | None = Field(
        None, description="This long after the warning the workspace is released"
    )
    snapshot_price_gb_month: Amount | None = Field(
        None, description="What a kept snapshot costs per GB-month of what it restores (0: free)"
    )
    snapshot_quota_gb: (
        Annotated[
            int,
            Field(ge=0, le=MAX_SNAPSHOT_QUOTA_GB),
            limited(
                "invalid_storage_policy",
                f"snapshot_quota_gb is from 0 (no quota) to {MAX_SNAPSHOT_QUOTA_GB:,} GB",
                lo=0,
                hi=MAX_SNAPSHOT_QUOTA_GB,
            ),
        ]
        | None
    ) = Field(None, description="Each billing account's snapshots together, in GB as restored (0: no quota)")
    snapshot_retention: Annotated[str, Field(pattern=SNAPSHOT_RETENTION), _BAD_SNAPSHOT_RETENTION] | None = Field(
        None,
        description="A snapshot is removed this long after it was taken, warned release_after before: 90d (1d to "
        "3660d), or 0 to keep snapshots until their renter removes them",
    )
    snapshot_before_release: bool | None = Field(
        None, description="Snapshot a stopped workspace due for release first (priced and within quota as any snapshot)"
    )


class StorageOut(BaseModel):
    price_gb_month: str
    warn_after: str
    release_after: str
    currency: str
    snapshot_price_gb_month: str = Field(description="Per GB-month of what a snapshot restores, from its creation")
    snapshot_quota_gb: int = Field(description="Per billing account, as restored; 0: no quota")
    snapshot_retention: str = Field(description="How long a snapshot is kept (e.g. 90d); 0: until removed")
    snapshot_before_release: bool = Field(description="Whether a workspace due for release is snapshotted first")
