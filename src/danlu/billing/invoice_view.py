"""What an invoice reads like: its lines and the invoice as the API, the CLI and the statement show them
(danlu.billing.invoices derives and stores them; danlu.billing.invoice_render writes them out). Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from danlu.core.money import format_minor


@dataclass(frozen=True)
class LineView:
    instance_id: str
    description: str
    plan: str
    seconds: int
    price_per_hour_minor: int  # per GPU-hour
    gross_minor: int
    discount_minor: int
    voucher_minor: int
    cash_minor: int
    adjustment: bool = False

    @property
    def amount_minor(self) -> int:
        return self.gross_minor - self.discount_minor

    def as_dict(self, cur: str) -> dict[str, object]:
        return {
            "instance_id": self.instance_id,
            "description": self.description,
            "plan": self.plan,
            "seconds": self.seconds,
            "price_per_hour": format_minor(self.price_per_hour_minor, cur),
            "gross": format_minor(self.gross_minor, cur),
            "discount": format_minor(self.discount_minor, cur),
            "vouchers": format_minor(self.voucher_minor, cur),
            "cash": format_minor(self.cash_minor, cur),
            "amount": format_minor(self.amount_minor, cur),
            "adjustment": self.adjustment,
        }


@dataclass(frozen=True)
class InvoiceView:
    billing_account_id: int
    account_name: str
    account_kind: str
    period: str
    status: str  # draft | final
    number: int | None
    currency: str
    lines: list[LineView] = field(default_factory=list)
    finalized_at_ms: int | None = None

    def total(self, attr: str) -> int:
        return sum(int(getattr(line, attr)) for line in self.lines)

    @property
    def total_minor(self) -> int:
        return self.total("amount_minor")

    def as_dict(self) -> dict[str, object]:
        cur = self.currency
        return {
            "period": self.period,
            "status": self.status,
            "number": self.number,
            "account": self.account_name,
            "account_kind": self.account_kind,
            "currency": cur,
            "finalized_at_ms": self.finalized_at_ms,
            "lines": [line.as_dict(cur) for line in self.lines],
            "gross": format_minor(self.total("gross_minor"), cur),
            "discount": format_minor(self.total("discount_minor"), cur),
            "vouchers": format_minor(self.total("voucher_minor"), cur),
            "cash": format_minor(self.total("cash_minor"), cur),
            "total": format_minor(self.total_minor, cur),
        }
