"""Money as integer minor units.

Every amount on a money path is an ``int`` count of minor units (fen, cents). ``Decimal`` is
used only for rates and intermediates, and every conversion back to minor units goes through
:func:`round_minor`, whose mode is ROUND_HALF_UP (half a fen rounds away from zero). Floats
never appear here: parsing rejects them and formatting never produces them.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from danlu.core.errors import InvalidInput

# ISO 4217 minor-unit exponents for currencies a deployment may plausibly choose.
CURRENCY_EXPONENTS: dict[str, int] = {
    "CNY": 2,
    "USD": 2,
    "EUR": 2,
    "GBP": 2,
    "HKD": 2,
    "SGD": 2,
    "JPY": 0,
    "KRW": 0,
}

ROUNDING = ROUND_HALF_UP


def exponent(currency: str) -> int:
    try:
        return CURRENCY_EXPONENTS[currency.upper()]
    except KeyError:
        known = ", ".join(sorted(CURRENCY_EXPONENTS))
        raise InvalidInput("unknown_currency", f"unknown currency {currency!r}; use one of: {known}") from None


def round_minor(value: Decimal) -> int:
    """The one rounding helper: a Decimal count of minor units to an int, half up."""
    return int(value.quantize(Decimal(1), rounding=ROUNDING))


def parse_amount(text: str | int, currency: str, *, allow_zero: bool = True, field: str = "amount") -> int:
    """Parse a user-typed decimal amount ("12.34") into minor units.

    Rejects negatives, more decimals than the currency has, exponents, NaN/inf and junk, with
    an :class:`InvalidInput` that says what a valid amount looks like.
    """
    exp = exponent(currency)
    example = "12" if exp == 0 else "12." + "3" * exp
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise InvalidInput("invalid_amount", f"{field} must be a decimal string such as {example!r}")
    raw = str(text).strip()
    try:
        if not raw or any(c not in "0123456789.-+" for c in raw):
            raise InvalidOperation
        value = Decimal(raw)
    except InvalidOperation:
        raise InvalidInput(
            "invalid_amount", f"{field} {raw!r} is not a decimal amount; write it like {example!r}"
        ) from None
    if value < 0:
        raise InvalidInput("invalid_amount", f"{field} must not be negative (got {raw})")
    if value == 0 and not allow_zero:
        raise InvalidInput("invalid_amount", f"{field} must be greater than zero")
    scaled = value.scaleb(exp)
    if scaled != scaled.to_integral_value():
        raise InvalidInput(
            "invalid_amount",
            f"{field} {raw!r} has more than {exp} decimal places for {currency.upper()}",
        )
    minor = int(scaled)
    if minor > 10**15:
        raise InvalidInput("invalid_amount", f"{field} {raw!r} is too large")
    return minor


def format_minor(minor: int, currency: str) -> str:
    """Minor units to the decimal string the API and CLI show ("12.34", "-0.05")."""
    exp = exponent(currency)
    if exp == 0:
        return str(minor)
    sign = "-" if minor < 0 else ""
    whole, frac = divmod(abs(minor), 10**exp)
    return f"{sign}{whole}.{frac:0{exp}d}"


@dataclass(frozen=True, slots=True)
class Money:
    """An amount in one currency; arithmetic only between equal currencies."""

    minor: int
    currency: str

    def __add__(self, other: Money) -> Money:
        self._same(other)
        return Money(self.minor + other.minor, self.currency)

    def __sub__(self, other: Money) -> Money:
        self._same(other)
        return Money(self.minor - other.minor, self.currency)

    def __neg__(self) -> Money:
        return Money(-self.minor, self.currency)

    def _same(self, other: Money) -> None:
        if other.currency != self.currency:
            raise ValueError(f"cannot mix {self.currency} and {other.currency}")

    def __str__(self) -> str:
        return format_minor(self.minor, self.currency)
