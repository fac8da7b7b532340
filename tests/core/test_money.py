from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from danlu.core.errors import InvalidInput
from danlu.core.money import Money, format_minor, parse_amount, round_minor


@pytest.mark.parametrize(
    ("text", "currency", "minor"),
    [("12.34", "CNY", 1234), ("0", "CNY", 0), ("7", "USD", 700), ("0.5", "CNY", 50), ("1000", "JPY", 1000)],
)
def test_parse_amount_to_minor_units(text: str, currency: str, minor: int) -> None:
    assert parse_amount(text, currency) == minor


@pytest.mark.parametrize("bad", ["-1", "1.234", "abc", "", "1e3", "NaN", "inf", "1,5", " ", "0x10"])
def test_parse_amount_rejects_with_a_stable_code(bad: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_amount(bad, "CNY")
    assert err.value.code == "invalid_amount"


def test_parse_rejects_zero_when_asked_and_non_strings() -> None:
    with pytest.raises(InvalidInput):
        parse_amount("0", "CNY", allow_zero=False)
    with pytest.raises(InvalidInput):
        parse_amount(1.5, "CNY")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput) as err:
        parse_amount("1", "XXX")
    assert err.value.code == "unknown_currency"


@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_format_then_parse_round_trips(minor: int) -> None:
    text = format_minor(minor, "CNY")
    assert parse_amount(text.lstrip("-"), "CNY") == abs(minor)


def test_round_minor_is_half_up() -> None:
    assert round_minor(Decimal("2.5")) == 3
    assert round_minor(Decimal("2.4999")) == 2
    assert round_minor(Decimal("-2.5")) == -3


def test_money_refuses_mixed_currencies() -> None:
    assert (Money(150, "CNY") + Money(50, "CNY")).minor == 200
    with pytest.raises(ValueError):
        _ = Money(1, "CNY") + Money(1, "USD")
