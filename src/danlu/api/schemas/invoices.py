"""Invoices and the cost of an instance (danlu.billing.invoices, danlu.compute.cost)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from pydantic import BaseModel, Field

from danlu.accounts.service import NAME_RE as USER_NAME_RE
from danlu.api.schemas.common import Strict, limited

# --- invoices and cost (danlu.billing.invoices, danlu.compute.cost) ------------------------------

PERIOD = r"^2[0-9]{3}-(0[1-9]|1[0-2])$"  # 2000-01 to 2999-12, as danlu.billing.periods.check_period
_BAD_PERIOD = limited(
    "invalid_period",
    "a period is a month written YYYY-MM (2000-01 to 2999-12), e.g. 2026-01, not {value}",
    pattern=PERIOD,
)
PeriodPath = Annotated[str, Path(pattern=PERIOD, max_length=7, description="A month, YYYY-MM (deployment time zone)")]
InvoiceTeamQuery = Annotated[
    str | None,
    Query(max_length=64, pattern=USER_NAME_RE.pattern, description="A team you are in (default: your default team)"),
]
InvoiceFormatQuery = Annotated[
    str, Query(pattern="^(json|csv|html)$", description="json, csv or html (self-contained)")
]
InvoiceLangQuery = Annotated[
    str, Query(pattern="^(en|zh_CN)$", description="the html statement's language: en or zh_CN (json and csv: en)")
]


class InvoiceLineOut(BaseModel):
    instance_id: str
    description: str
    plan: str
    seconds: int = Field(
        description="Whole billed seconds of the allocation, whatever its GPU count (list price = seconds × GPUs × "
        "price per GPU-hour); a package's or reservation's line: its term, a refund's: minus the unused part"
    )
    price_per_hour: str = Field(description="Per GPU-hour")
    gross: str = Field(description="List price")
    discount: str
    vouchers: str
    cash: str
    amount: str = Field(description="gross - discount = vouchers + cash")
    adjustment: bool = Field(description="Usage of an earlier, already final month posted after it closed")


class InvoiceOut(BaseModel):
    period: str
    status: str = Field(description="draft (derived, may change) | final (numbered, immutable)")
    number: int | None
    account: str
    account_kind: str
    currency: str
    finalized_at_ms: int | None
    lines: list[InvoiceLineOut]
    gross: str
    discount: str
    vouchers: str
    cash: str
    total: str


class CostLineOut(BaseModel):
    allocation_id: int
    description: str = Field(description="posted | not yet posted")
    plan: str
    tariff: str | None
    seconds: int
    gpus: int
    price_per_hour: str = Field(description="The list price per GPU-hour")
    multiplier: str = Field("1", description="The tariff's multiplier: the price applied is price_per_hour × it")
    gross: str
    discount: str
    vouchers: str = Field(description="An amount, or pending (not posted yet)")
    cash: str = Field(description="An amount, or pending (not posted yet)")
    amount: str
    posted: bool


class CostOut(BaseModel):
    instance_id: str
    currency: str
    cost: str = Field(description="The sum of the lines' amounts")
    lines: list[CostLineOut]


class FinalizeIn(Strict):
    period: Annotated[str, Field(pattern=PERIOD, max_length=7), _BAD_PERIOD] | None = Field(
        None, description="A month that has ended (grace waived); omitted: every month past its grace window"
    )


class FinalizeOut(BaseModel):
    finalized: int = Field(description="Invoices written")
