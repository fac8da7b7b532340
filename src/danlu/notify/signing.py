"""Webhook signatures, retry schedule and the address rule (pure: no I/O but ``check_address``'s
resolution, injected).

A delivery is ``POST URL`` with the JSON body and these headers:

* ``X-Danlu-Event-Id``: the event's id, the same on every retry (de-duplicate on it);
* ``X-Danlu-Timestamp``: Unix seconds when this attempt was signed;
* ``X-Danlu-Signature``: ``sha256=`` + hex HMAC-SHA256 of ``f"{timestamp}.{body}"`` keyed with the
  webhook's secret. A receiver recomputes it over the raw body, compares in constant time
  (``hmac.compare_digest``) and rejects timestamps older than a few minutes (replays).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Callable, Iterable

BACKOFF_BASE_S = 10
BACKOFF_MAX_S = 6 * 3600
MAX_ATTEMPTS = 12  # 10 s, 20 s, 40 s … capped at 6 h: about a day and a half of retries


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify(secret: str, timestamp: int, body: bytes, header: str) -> bool:
    return hmac.compare_digest(signature(secret, timestamp, body), header)


def next_retry_s(attempts: int) -> int | None:
    """Seconds until the next try after ``attempts`` failed ones; None: give up."""
    if attempts >= MAX_ATTEMPTS:
        return None
    return int(min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (attempts - 1)))


def forbidden_address(addresses: Iterable[str]) -> str | None:
    """The first address a renter's webhook must not reach (the platform's own machine, its private
    network, link-local metadata services, multicast …), or None."""
    for text in addresses:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if not ip.is_global or ip.is_multicast:
            return str(ip)
    return None


Resolver = Callable[[str, int], list[str]]
