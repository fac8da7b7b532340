"""One parser per quantity (issue 27): percentages were parsed three ways (vouchers, commitments, the
student discount) and durations two (run limits, voucher validity). Exact, ASCII only, each caller's
own error code."""

from __future__ import annotations

import pytest

from danlu.core.errors import InvalidInput
from danlu.core.parse import bp_text, duration_s, duration_text, percent_bp


@pytest.mark.parametrize(("text", "bp"), [("20", 2000), ("20%", 2000), (" 12.5 ", 1250), ("0.05", 5), ("100", 10_000)])
def test_percentages_are_exact_basis_points(text: str, bp: int) -> None:
    assert percent_bp(text, code="c", message="m") == bp
    assert bp_text(bp) == text.strip().removesuffix("%")


@pytest.mark.parametrize("bad", ["", "0", "100.01", "1.234", "1e2", "²", "-5", "12,5", "NaN", "99999999999"])
def test_a_bad_percentage_is_the_callers_error(bad: str) -> None:
    with pytest.raises(InvalidInput) as e:
        percent_bp(bad, code="invalid_voucher_percent", message="a percentage is 0.01 to 100")
    assert (e.value.code, e.value.message) == ("invalid_voucher_percent", "a percentage is 0.01 to 100")


def test_zero_only_where_allowed() -> None:
    assert percent_bp("0", code="c", message="m", allow_zero=True) == 0


def test_durations() -> None:
    assert [duration_s(t, code="c", message="m", max_s=10**9) for t in ("90s", "30m", "6h", "2d")] == [
        90,
        1800,
        21600,
        172800,
    ]
    assert [duration_text(s) for s in (90, 1800, 7200, 172800)] == ["90s", "30m", "2h", "2d"]
    for bad in ("", "0s", "5", "5w", "²h", "-1h", "1.5h", "1234567890s"):
        with pytest.raises(InvalidInput):
            duration_s(bad, code="c", message="m", max_s=10**9)
    with pytest.raises(InvalidInput) as e:
        duration_s("11d", code="c", message="m", max_s=10 * 86400, too_long="at most 10d")
    assert e.value.message == "at most 10d"
