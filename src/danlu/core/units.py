"""Sizes as people write them: ``512M``, ``16G``, ``1.5T`` (binary units), parsed exactly."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from danlu.core.errors import InvalidInput

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)
_MIB_PER = {"K": Decimal(1) / 1024, "": Decimal(1), "M": Decimal(1), "G": Decimal(1024), "T": Decimal(1024**2)}


def parse_mib(text: str, field: str = "size") -> int:
    """``"16G"`` → 16384 (MiB). A bare number is MiB."""
    m = _SIZE.match(text or "")
    if not m:
        raise InvalidInput("invalid_size", f"{field} is a size like 512M, 16G or 1T")
    try:
        mib = Decimal(m.group(1)) * _MIB_PER[m.group(2).upper()]
    except InvalidOperation:
        raise InvalidInput("invalid_size", f"{field} is a size like 512M, 16G or 1T") from None
    if mib < 1 or mib > 2**50:
        raise InvalidInput("invalid_size", f"{field} must be between 1 MiB and 1 EiB")
    return int(mib)
