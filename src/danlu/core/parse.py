"""The one parser of each small quantity people type: percentages (exactly, in basis points) and
durations (``90s``, ``30m``, ``6h``, ``2d``), with their formatters. Pure, no float; each caller names
its own stable error code and message, so a bad value says what to type where it was typed."""

from __future__ import annotations

from danlu.core.errors import InvalidInput

BASIS_POINTS = 10_000  # 100 %
UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def percent_bp(text: str, *, code: str, message: str, allow_zero: bool = False) -> int:
    """``20``, ``20%``, ``12.5`` → basis points, exactly: at most 2 decimals, at most 100 %, above 0
    unless ``allow_zero``. ASCII digits only (``²`` is a digit to Python, not to a person)."""
    raw = text.strip().removesuffix("%").strip()
    whole, _, frac = raw.partition(".")
    if len(raw) > 8 or not raw.isascii() or not whole.isdigit() or (frac and (not frac.isdigit() or len(frac) > 2)):
        raise InvalidInput(code, message)
    bp = int(whole) * 100 + int(frac.ljust(2, "0"))
    if bp > BASIS_POINTS or (bp == 0 and not allow_zero):
        raise InvalidInput(code, message)
    return bp


def bp_text(bp: int) -> str:
    """Basis points as a percentage without its sign: 2000 → ``20``, 1250 → ``12.5``, 5 → ``0.05``."""
    whole, frac = divmod(bp, 100)
    return f"{whole}" + (f".{frac:02d}".rstrip("0") if frac else "")


def duration_s(text: str, *, code: str, message: str, max_s: int, too_long: str | None = None) -> int:
    """``90s``, ``30m``, ``6h``, ``2d`` → seconds, 1 to ``max_s`` (past it: ``too_long`` if given)."""
    unit, digits = text[-1:], text[:-1]
    if unit not in UNITS_S or not digits.isascii() or not digits.isdigit() or len(text) > 9 or int(digits) == 0:
        raise InvalidInput(code, message)
    seconds = int(digits) * UNITS_S[unit]
    if seconds > max_s:
        raise InvalidInput(code, too_long or message)
    return seconds


def duration_text(seconds: int) -> str:
    """Seconds in the largest whole unit: 7200 → ``2h``, 90 → ``90s``."""
    for unit in ("d", "h", "m"):
        if seconds % UNITS_S[unit] == 0 and seconds:
            return f"{seconds // UNITS_S[unit]}{unit}"
    return f"{seconds}s"
