"""Request and response models of packages and reserved commitments (danlu.compute.holds)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path
from pydantic import BaseModel, Field

from danlu.api.schemas.common import (
    TERM_CHOICES,
    TERM_TEXT,
    Amount,
    GpuCount,
    GpuModel,
    OnExpiry,
    Strict,
    TeamName,
    TermName,
    limited,
)
from danlu.billing.commitments import format_bp
from danlu.billing.terms import TermView
from danlu.compute.holds import CancelQuote, HoldView, PurchaseQuote
from danlu.core.clock import iso
from danlu.core.money import format_minor

TermPath = Annotated[str, Path(pattern=f"^({TERM_CHOICES})$", description=TERM_TEXT)]
HOLD_ID = r"^h-[0-9a-f]{1,32}$"
HoldIdPath = Annotated[str, Path(pattern=HOLD_ID, description="A hold's id from `GET /holds`")]
QUOTE_ID = r"^q-[0-9a-f]{1,32}$"
PCT = r"^(100(\.0{1,2})?|[0-9]{1,2}(\.[0-9]{1,2})?)$"
Percent = Annotated[
    str,
    Field(pattern=PCT, max_length=6, description="0 to 100, at most 2 decimals, e.g. 20 or 12.5"),
    limited("invalid_percent", "a percentage is 0 to 100 with at most 2 decimals, e.g. 20 or 12.5", pattern=PCT),
]
DISCOUNT = r"^[0-9]{1,2}(\.[0-9]{1,2})?$"
Discount = Annotated[
    str,
    Field(pattern=DISCOUNT, max_length=5, description="0 to 99.99, at most 2 decimals, e.g. 20 or 12.5"),
    limited("invalid_percent", "a discount is 0 to 99.99 percent, at most 2 decimals, e.g. 20", pattern=DISCOUNT),
]


class HoldIn(Strict):
    term: TermName
    gpu_model: GpuModel
    gpu_count: GpuCount = 1
    on_expiry: OnExpiry = "stop"
    team: TeamName | None = Field(None, description="Buy on this team's account (member or above)")
    expected_price: Amount | None = Field(
        None, description="The price you were quoted (POST /plans/quote): if it changed, 409 price_changed"
    )


class HoldQuoteIn(Strict):
    term: TermName
    gpu_model: GpuModel
    gpu_count: GpuCount = 1
    team: TeamName | None = None


class CancelIn(Strict):
    quote_id: Annotated[
        str,
        Field(pattern=QUOTE_ID, description="The id of an unexpired quote from POST /holds/{id}/cancel-quote"),
        limited("invalid_quote", "quote_id is the id a cancel quote gave (q-…)", pattern=QUOTE_ID),
    ]


class PlanTermIn(Strict):
    discount: Discount = Field(description="Off the on-demand price, in percent")
    cancel_fee: Percent = Field("0", description="Kept of a package's unused part on early cancellation")


class PlanTermOut(BaseModel):
    term: str
    kind: str
    label: str
    days: int
    discount: str
    cancel_fee: str
    rule: str

    @classmethod
    def of(cls, v: TermView) -> PlanTermOut:
        return cls(
            term=v.term,
            kind=v.kind,
            label=v.label,
            days=v.seconds // 86_400,
            discount=v.discount,
            cancel_fee=v.cancel_fee,
            rule=v.rule,
        )


class PlanOut(PlanTermOut):
    prices: dict[str, str] = Field(description="What one GPU of each model costs for the whole term")
    currency: str


class PurchaseQuoteOut(BaseModel):
    term: str
    kind: str
    label: str
    gpu_model: str
    gpu_count: int
    price_per_hour: str = Field(description="The on-demand price per GPU-hour it is priced from")
    list_price: str = Field(description="The same time on demand")
    discount: str
    price: str = Field(description="What it costs, paid at once")
    cancel_fee: str
    rule: str
    starts_at: str | None
    ends_at: str | None
    free: int
    currency: str

    @classmethod
    def of(cls, q: PurchaseQuote) -> PurchaseQuoteOut:
        cur = q.currency
        return cls(
            term=q.term,
            kind=q.kind,
            label=q.label,
            gpu_model=q.gpu_model,
            gpu_count=q.gpu_count,
            price_per_hour=format_minor(q.price_per_hour_minor, cur),
            list_price=format_minor(q.list_minor, cur),
            discount=format_bp(q.discount_bp),
            price=format_minor(q.amount_minor, cur),
            cancel_fee=format_bp(q.cancel_fee_bp),
            rule=q.rule,
            starts_at=iso(q.starts_at_ms),
            ends_at=iso(q.ends_at_ms),
            free=q.free,
            currency=cur,
        )


class HoldOut(BaseModel):
    id: str
    term: str
    kind: str
    account: str
    gpu_model: str
    gpu_count: int
    host: str
    state: str
    on_expiry: str
    starts_at: str | None
    ends_at: str | None
    ended_at: str | None
    price_per_hour: str
    discount: str
    cancel_fee: str
    paid: str
    refunded: str
    rule: str
    currency: str
    instance_id: str | None = Field(description="The instance rented with it, if any")
    in_use_by: list[str] = Field(description="Instances running on its GPUs now")

    @classmethod
    def of(cls, v: HoldView) -> HoldOut:
        cur = v.currency
        return cls(
            id=v.id,
            term=v.term,
            kind=v.kind,
            account=v.account,
            gpu_model=v.gpu_model,
            gpu_count=v.gpu_count,
            host=v.host,
            state=v.state,
            on_expiry=v.on_expiry,
            starts_at=iso(v.starts_at_ms),
            ends_at=iso(v.ends_at_ms),
            ended_at=iso(v.ended_at_ms),
            price_per_hour=format_minor(v.price_per_hour_minor, cur),
            discount=format_bp(v.discount_bp),
            cancel_fee=format_bp(v.cancel_fee_bp),
            paid=format_minor(v.paid_minor, cur),
            refunded=format_minor(v.refunded_minor, cur),
            rule=v.rule,
            currency=cur,
            instance_id=v.instance_id,
            in_use_by=v.in_use_by,
        )


class CancelQuoteOut(BaseModel):
    quote_id: str
    hold_id: str
    kind: str
    elapsed_seconds: int
    paid: str
    used: str = Field(description="The discounted value of the time held so far")
    unused: str
    kept: str = Field(description="The fee (a package) or the discount clawed back (a reservation)")
    refund: str = Field(description="What comes back now; less if you confirm later, never more")
    rule: str
    consequences: list[str]
    expires_at: str | None
    currency: str

    @classmethod
    def of(cls, q: CancelQuote) -> CancelQuoteOut:
        cur = q.currency
        return cls(
            quote_id=q.quote_id,
            hold_id=q.hold_id,
            kind=q.kind,
            elapsed_seconds=q.elapsed_s,
            paid=format_minor(q.paid_minor, cur),
            used=format_minor(q.used_minor, cur),
            unused=format_minor(q.unused_minor, cur),
            kept=format_minor(q.kept_minor, cur),
            refund=format_minor(q.refund_minor, cur),
            rule=q.rule,
            consequences=q.consequences,
            expires_at=iso(q.expires_at_ms),
            currency=cur,
        )
