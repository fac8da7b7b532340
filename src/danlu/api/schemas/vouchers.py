"""Voucher campaigns, grants and redemptions (issue 9)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from danlu.api.schemas.common import GpuModel, PositiveAmount, Strict, TeamName, UserName, limited

VOUCHER_CODE = r"^[A-Za-z0-9_-]{4,64}$"
VoucherCode = Annotated[
    str,
    Field(pattern=VOUCHER_CODE, description="4-64 letters, digits, '-' or '_'"),
    limited("invalid_voucher_code", "a voucher code is 4-64 letters, digits, '-' or '_'", pattern=VOUCHER_CODE),
]
DURATION = r"^[1-9][0-9]{0,6}[smhd]$"
# 0.01 to 100, at most two decimals; never zero (danlu.billing.vouchers.parse_percent refuses it).
PERCENT = r"^(100(\.0{1,2})?|0?[1-9](\.[0-9]{1,2})?|[1-9][0-9](\.[0-9]{1,2})?|0{1,2}\.([1-9][0-9]?|0[1-9]))$"
ISO_TIME = (
    r"^[12][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[T ]([01][0-9]|2[0-3]):[0-5][0-9]"
    r"(:[0-5][0-9](\.[0-9]{1,6})?)?(Z|[+-]([01][0-9]|2[0-3]):?[0-5][0-9])$"
)
PLAN_CHOICES = "on-demand|interruptible"
MAX_REDEMPTIONS = 10**9


MaxRedemptions = Annotated[
    int,
    Field(ge=1, le=MAX_REDEMPTIONS),
    limited("invalid_voucher_limit", f"max_redemptions is 1 to {MAX_REDEMPTIONS}", lo=1, hi=MAX_REDEMPTIONS),
]
PerAccount = Annotated[
    int, Field(ge=1, le=1000), limited("invalid_voucher_limit", "per_account is 1 to 1000", lo=1, hi=1000)
]
VoucherPriority = Annotated[
    int,
    Field(ge=0, le=10_000),
    limited("invalid_voucher_priority", "priority is 0 (spent first) to 10000", lo=0, hi=10_000),
]


class RedeemIn(Strict):
    code: VoucherCode
    team: TeamName | None = Field(None, description="Redeem onto this team's account (member or above)")


class CampaignIn(Strict):
    # A code exactly when on=code (danlu.billing.vouchers._check_spec), stated for clients and fuzzers.
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"properties": {"on": {"const": "code"}, "code": {"type": "string"}}, "required": ["on", "code"]},
                {"properties": {"on": {"enum": ["signup", "manual"]}, "code": {"type": "null"}}},
            ]
        }
    )

    name: TeamName
    amount: PositiveAmount = Field(description="Each voucher's value (for a percentage voucher: its cap)")
    percent: (
        Annotated[
            str,
            Field(pattern=PERCENT),
            limited("invalid_voucher_percent", "a percentage is 0.01 to 100, e.g. 50 or 12.5", pattern=PERCENT),
        ]
        | None
    ) = Field(None, description="Pays this percentage of each charge, up to the amount")
    valid_for: Annotated[
        str,
        Field(pattern=DURATION),
        limited("invalid_voucher_validity", "valid_for is a duration such as 30m, 72h or 7d", pattern=DURATION),
    ] = Field(description="How long each voucher lasts once granted: 30m, 72h, 7d (s, m, h, d)")
    until: (
        Annotated[
            str,
            Field(pattern=ISO_TIME),
            limited(
                "invalid_voucher_validity",
                "until is ISO-8601 with a timezone, e.g. 2027-01-01T00:00:00Z",
                pattern=ISO_TIME,
            ),
        ]
        | None
    ) = Field(None, description="Last moment vouchers can be had (ISO-8601 with timezone)")
    on: Annotated[
        str,
        Field(pattern="^(signup|code|manual)$"),
        limited("invalid_voucher_trigger", "on is one of signup, code, manual", pattern="^(signup|code|manual)$"),
    ]
    code: VoucherCode | None = Field(None, description="For on=code: what renters type")
    gpu_model: GpuModel | None = Field(None, description="Pays only for this GPU model")
    plan: (
        Annotated[
            str,
            Field(pattern=f"^({PLAN_CHOICES})$"),
            limited("invalid_voucher_plan", "plan is on-demand or interruptible", pattern=f"^({PLAN_CHOICES})$"),
        ]
        | None
    ) = Field(None, description="Pays only for this plan")
    max_redemptions: MaxRedemptions | None = Field(None, description="Vouchers in all (null: no limit)")
    per_account: PerAccount = Field(1, description="Vouchers per billing account")
    priority: VoucherPriority = Field(100, description="Lower is spent first")
    eligibility: Annotated[
        str,
        Field(pattern="^(all|new)$"),
        limited("invalid_voucher_eligibility", "eligibility is all or new", pattern="^(all|new)$"),
    ] = "all"


class CampaignOut(BaseModel):
    name: str
    amount: str
    percent: str | None
    valid_for: str | None
    until: str | None
    on: str
    code: str | None
    gpu_model: str | None
    plan: str | None
    max_redemptions: int | None
    per_account: int
    redemptions: int
    priority: int
    eligibility: str
    active: bool
    currency: str
    created_at: str | None


class GrantIn(Strict):
    """Exactly one of ``user`` and ``team``."""

    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"properties": {"user": {"type": "string"}}, "required": ["user"]},
                {"properties": {"team": {"type": "string"}}, "required": ["team"]},
            ]
        }
    )

    user: UserName | None = None
    team: TeamName | None = None


class VoucherOut(BaseModel):
    id: int
    campaign: str
    amount: str
    remaining: str
    percent: str | None
    gpu_model: str | None
    plan: str | None
    granted_at: str | None
    expires_at: str | None = Field(description="ISO-8601 UTC; null: never expires")
    status: str = Field(description="active, spent or expired")
    currency: str
