"""Rent or buy: total cost of owning a GPU against renting the same useful GPU-hours.

Owning: purchase now; every month power (busy at the rated power, idle at ``idle_power_fraction`` of it,
times PUE, at a kWh price) and hosting; the resale value comes back at the end of the depreciation period.
Renting: useful hours × hourly rate. Both are linear in utilisation u, so the break-even utilisation is
``u* = fixed_owning / (rent − busy_power)`` over the period.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from danlu.core.errors import InvalidInput
from danlu.core.money import exponent, format_minor, round_minor

HOURS_PER_MONTH = Decimal(730)


@dataclass(frozen=True, slots=True)
class BuyInputs:
    purchase_minor: int
    currency: str
    rent_rate: Decimal  # major units per GPU-hour
    power_w: Decimal
    kwh_price: Decimal  # major units per kWh
    pue: Decimal = Decimal("1.5")
    years: int = 3
    resale_pct: Decimal = Decimal(20)
    utilisation: Decimal = Decimal("0.5")
    hosting_month_minor: int = 0
    idle_power_fraction: Decimal = Decimal("0.3")

    def __post_init__(self) -> None:
        if self.purchase_minor <= 0 or self.rent_rate <= 0:
            raise InvalidInput("invalid_buy_input", "purchase price and rent rate must be greater than zero")
        if not 0 < self.utilisation <= 1:
            raise InvalidInput("invalid_utilisation", "utilisation is a fraction of hours busy, in (0, 1]")
        if not 1 <= self.years <= 15:
            raise InvalidInput("invalid_years", "depreciation years must be between 1 and 15")
        if not 0 <= self.resale_pct < 100 or self.pue < 1 or self.power_w <= 0 or self.kwh_price < 0:
            raise InvalidInput(
                "invalid_buy_input",
                "resale is a percentage below 100, PUE at least 1, power positive, kWh price ≥ 0",
            )


@dataclass(frozen=True, slots=True)
class BuyResult:
    currency: str
    months: int
    buy_cumulative_minor: tuple[int, ...]  # index m = end of month m (0 = purchase day)
    rent_cumulative_minor: tuple[int, ...]
    break_even_utilisation: float | None  # None: owning never pays (power alone costs more than renting)
    cheaper: str
    rent_rate: Decimal | None = None  # per GPU-hour, as used
    rent_rate_source: str = ""  # where it comes from: "given", "this platform", or a catalog row

    def to_dict(self) -> dict[str, object]:
        c = self.currency
        return {
            "currency": c,
            "months": self.months,
            "cheaper": self.cheaper,
            "rent_rate": None if self.rent_rate is None else str(self.rent_rate),
            "rent_rate_source": self.rent_rate_source,
            "total_buy": format_minor(self.buy_cumulative_minor[-1], c),
            "total_rent": format_minor(self.rent_cumulative_minor[-1], c),
            "break_even_utilisation": None
            if self.break_even_utilisation is None
            else round(self.break_even_utilisation, 4),
            "cumulative": [
                {"month": m, "buy": format_minor(b, c), "rent": format_minor(r, c)}
                for m, (b, r) in enumerate(zip(self.buy_cumulative_minor, self.rent_cumulative_minor, strict=True))
            ],
        }


def rent_or_buy(x: BuyInputs) -> BuyResult:
    scale = Decimal(10) ** exponent(x.currency)
    months = x.years * 12
    kw_rate = x.power_w / 1000 * x.pue * x.kwh_price * scale  # minor units per hour at full power
    busy_power = HOURS_PER_MONTH * kw_rate * (1 - x.idle_power_fraction)  # per month, × u
    idle_power = HOURS_PER_MONTH * kw_rate * x.idle_power_fraction
    rent_month = HOURS_PER_MONTH * x.rent_rate * scale  # per month, × u
    resale = Decimal(x.purchase_minor) * x.resale_pct / 100
    fixed_month = idle_power + x.hosting_month_minor
    buy = [Decimal(x.purchase_minor)]
    rent = [Decimal(0)]
    for m in range(1, months + 1):
        buy.append(buy[-1] + fixed_month + busy_power * x.utilisation - (resale if m == months else 0))
        rent.append(rent[-1] + rent_month * x.utilisation)
    fixed_total = Decimal(x.purchase_minor) - resale + fixed_month * months
    margin = (rent_month - busy_power) * months
    u_star = float(fixed_total / margin) if margin > 0 else None
    buy_minor = tuple(round_minor(v) for v in buy)
    rent_minor = tuple(round_minor(v) for v in rent)
    cheaper = "buy" if buy_minor[-1] < rent_minor[-1] else "rent"
    return BuyResult(x.currency, months, buy_minor, rent_minor, u_star, cheaper, x.rent_rate)
