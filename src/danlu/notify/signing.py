"""Webhook signatures, retry schedule and the address rule (pure: no I/O but ``check_address``'s
resolution, injected).

A delivery is ``POST URL`` with the JSON body and the headers of the **Standard Webhooks** scheme
(standardwebhooks.com; issue 28), which its libraries in every language verify:

* ``webhook-id``: the event's id, the same on every retry (de-duplicate on it), and signed;
* ``webhook-timestamp``: Unix seconds when this attempt was signed;
* ``webhook-signature``: ``v1,`` + base64 HMAC-SHA256 of ``f"{id}.{timestamp}.{body}"``, keyed with
  the secret's bytes (``whsec_`` + base64; read as those libraries read it, so secrets made before
  they were standard base64 verify too). A receiver rejects timestamps older than a few minutes.

For one release the older headers come too: ``X-Danlu-Event-Id``, ``X-Danlu-Timestamp`` and
``X-Danlu-Signature`` (``sha256=`` + hex HMAC-SHA256 of ``f"{timestamp}.{body}"`` keyed with the
secret's text). They do not sign the event id; move to the standard ones.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Callable, Iterable

BACKOFF_BASE_S = 10
BACKOFF_MAX_S = 6 * 3600
MAX_ATTEMPTS = 12  # 10 s, 20 s, 40 s … capped at 6 h: about a day and a half of retries


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify(secret: str, timestamp: int, body: bytes, header: str) -> bool:
    return hmac.compare_digest(signature(secret, timestamp, body), header)


SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """A webhook's secret as Standard Webhooks writes one: ``whsec_`` + base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def standard_key(secret: str) -> bytes | None:
    """The HMAC key of ``secret``, read as the Standard Webhooks libraries read it (padding added,
    characters outside base64 skipped), so every receiver using one derives the same bytes. None
    for an older urlsafe secret whose base64 letters number one more than a multiple of four: the
    libraries cannot read it at all (they raise), so no standard signature can be made with it."""
    try:
        return base64.b64decode(secret.removeprefix(SECRET_PREFIX) + "==")
    except binascii.Error:
        return None


def standard_headers(
    secret: str, message_id: str, timestamp: int, body: bytes, also: str | None = None
) -> dict[str, str]:
    """The Standard Webhooks headers, or none for a secret no library can read (the hook still gets
    the older ``X-Danlu-Signature``; a new secret gives it these). ``also``: a second secret (the one a
    rotation replaced, while it overlaps): its ``v1,`` signature follows, space-separated, as the
    scheme allows, so a receiver holding either secret verifies."""
    signatures = []
    for one in (secret, also):
        key = standard_key(one) if one else None
        if key is not None:
            mac = hmac.new(key, f"{message_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
            signatures.append("v1," + base64.b64encode(mac).decode())
    if not signatures or standard_key(secret) is None:
        return {}
    return {"webhook-id": message_id, "webhook-timestamp": str(timestamp), "webhook-signature": " ".join(signatures)}


def next_retry_s(attempts: int) -> int | None:
    """Seconds until the next try after ``attempts`` failed ones; None: give up."""
    if attempts >= MAX_ATTEMPTS:
        return None
    return int(min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (attempts - 1)))


# IPv6 prefixes whose last 32 bits are an IPv4 address a gateway on the path may deliver to.
_CARRY_IPV4 = tuple(ipaddress.IPv6Network(n) for n in (
    "::/96",  # IPv4-compatible (deprecated; still routed by some stacks)
    "::ffff:0:0:0/96",  # SIIT IPv4-translated (RFC 7915)
    "64:ff9b::/96",  # NAT64 well-known prefix (RFC 6052)
))  # fmt: skip
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")  # NAT64 local use (RFC 8215): never public
# Where a public IPv6 address may be: global unicast (RFC 4291), or the NAT64 well-known prefix (its IPv4 judged).
# Everything else is refused, whatever Python's is_global says of it (fec0::/10, the old site-local, and
# 5f00::/16, reserved for SRv6 SIDs, were "public" to Python 3.11: an attacker's pass, issue 28).
_PUBLIC_V6 = (ipaddress.IPv6Network("2000::/3"), ipaddress.IPv6Network("64:ff9b::/96"))


def _inside(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries: mapped, compatible, SIIT, NAT64, 6to4, Teredo
    (its server and its de-obfuscated client). Python's ``is_global`` calls these forms public."""
    out = [a for a in (ip.ipv4_mapped, ip.sixtofour) if a is not None]
    out += list(ip.teredo or ())
    if any(ip in net for net in _CARRY_IPV4):
        out.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return out


def forbidden_address(addresses: Iterable[str]) -> str | None:
    """The first address a renter's webhook must not reach (the platform's own machine, its private
    network, link-local metadata services, multicast …, also when an IPv6 form carries one), or None."""
    for text in addresses:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
        if isinstance(ip, ipaddress.IPv6Address):
            if ip in _NAT64_LOCAL:
                return str(ip)
            if ip.ipv4_mapped is None and not any(ip in net for net in _PUBLIC_V6):
                return str(ip)
            for v4 in _inside(ip):
                if not v4.is_global or v4.is_multicast:
                    return str(ip)
            if ip.ipv4_mapped is not None:  # judged as the IPv4 it is (is_global varies by Python)
                continue
        if not ip.is_global or ip.is_multicast:
            return str(ip)
    return None


Resolver = Callable[[str, int], list[str]]
