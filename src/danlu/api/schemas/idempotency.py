"""Idempotency keys (danlu.billing.idempotency)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Header

# --- idempotency (danlu.billing.idempotency) -----------------------------------------------------

IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        min_length=1,
        max_length=120,
        pattern=r"^[\x21-\x7e]+$",
        description=(
            "Retry-safe: the same key (yours, on this endpoint) with the same request answers the first "
            "response again and changes nothing; with another request it is 409 idempotency_key_reused"
        ),
    ),
]
