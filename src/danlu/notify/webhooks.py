"""Per-user webhooks for the event feed (docs/telemetry.md "Webhooks"): every event a person sees in
``danlu events`` is also POSTed, signed (notify/signing.py), to each of their webhooks, at least once:
a delivery row per (webhook, event) — unique, so it is made once — retried with backoff until the
receiver answers 2xx or the attempts run out. Rows live in the database, so deliveries due before a
restart are sent after it.

Two steps, both driven by the server that holds the control-loop lease:

* ``enqueue`` (a loop phase, database only): each webhook's cursor moves over the feed's new events,
  making their delivery rows in the same transaction.
* ``deliver_due`` (the webhook thread, network): sends due rows, each outside any transaction, and
  records the outcome. A receiver that hangs costs its own timeout, never a control-loop tick.

A renter's URL is a stranger's: it must resolve only to public addresses (not this machine, not
its private networks or link-local metadata services), checked when it is added and again right
before each attempt; the operator may allow private addresses (``--webhook-allow-private``).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

import httpx
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from danlu.compute.sandbox.network import host_addresses
from danlu.context import Platform
from danlu.core.clock import iso
from danlu.core.errors import InvalidInput, NotFound, QuotaExceeded
from danlu.core.states import Machine
from danlu.db.models import Event, User, Webhook, WebhookDelivery
from danlu.notify.feed import visible_to
from danlu.notify.signing import forbidden_address, new_secret, next_retry_s, signature, standard_headers

MAX_PER_USER = 10
MAX_URL = 2048
KINDS = (
    "idle_warning",
    "idle_stop",
    "max_duration",
    "budget_threshold",
    "hold_expired",
    "hold_cancelled",
    "storage_retention_warning",
    "storage_released",
    "snapshot_retention_warning",
    "snapshot_removed",
    "member_removed",
    "schedule_stop",
    "schedule_start",
    "schedule_failed",
    "preemption_notice",
    "low_balance",
    "voucher_expiring",
    "efficiency_hint",
    "budget_stop",
    "balance_stop",
)
TIMEOUT_S = 5.0
BATCH = 50


class Delivery(StrEnum):
    PENDING = "pending"  # waiting for its next attempt
    DELIVERED = "delivered"  # the receiver answered 2xx
    FAILED = "failed"  # out of attempts, or its webhook was removed


PENDING, DELIVERED, FAILED = Delivery.PENDING, Delivery.DELIVERED, Delivery.FAILED
DELIVERY = Machine(
    "webhook delivery", PENDING, {PENDING: frozenset({DELIVERED, FAILED}), DELIVERED: frozenset(), FAILED: frozenset()}
)


@dataclass(frozen=True)
class WebhookView:
    id: int
    url: str
    kinds: list[str]
    created_at_ms: int
    secret: str | None = None  # only in the answer that created it
    delivered: int = 0
    pending: int = 0
    failed: int = 0


def resolve_host(host: str, port: int) -> list[str]:
    return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)})


def check_url(p: Platform, url: str, resolver: Callable[[str, int], list[str]] = resolve_host) -> list[str]:
    """The addresses ``url``'s host resolves to, all public (``--webhook-allow-private``: any); a
    clear ``invalid_webhook_url`` or ``webhook_address_not_allowed`` otherwise."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:  # e.g. a bracketed host that is no IPv6 address: http://[2001:0:8.8.8.8::]/
        raise InvalidInput("invalid_webhook_url", "a webhook is an http:// or https:// URL with a valid host") from None
    if len(url) > MAX_URL or parts.scheme not in ("http", "https") or not host:
        raise InvalidInput("invalid_webhook_url", "a webhook is an http:// or https:// URL with a host name")
    if parts.username or parts.password:
        raise InvalidInput("invalid_webhook_url", "put no user name or password in a webhook URL; it is signed")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise InvalidInput("invalid_webhook_url", "the port of a webhook URL is a number up to 65535") from None
    try:
        addresses = resolver(host, port)
    except OSError:
        raise InvalidInput("invalid_webhook_url", f"{parts.hostname} does not resolve from this server") from None
    if not addresses:
        raise InvalidInput("invalid_webhook_url", f"{parts.hostname} does not resolve from this server")
    bad = None if p.settings.webhook_allow_private else forbidden_address(addresses)
    if bad is not None:
        raise InvalidInput(
            "webhook_address_not_allowed",
            f"{parts.hostname} resolves to {bad}, not a public address; webhooks reach only the internet",
        )
    if not p.settings.webhook_allow_private:
        own = set(host_addresses())  # this machine's public addresses too (its services on 0.0.0.0)
        mine = next((a for a in addresses if a.split("%", 1)[0] in own), None)
        if mine is not None:
            raise InvalidInput(
                "webhook_address_not_allowed",
                f"{parts.hostname} resolves to {mine}, an address of this machine; webhooks reach only the internet",
            )
    return addresses


def pinned(url: str, address: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """``url`` aimed at ``address``, the one just checked, so a name that resolves elsewhere a
    moment later (DNS rebinding) cannot redirect the request: the URL with the address for its host,
    the Host header, and for https the name the certificate must carry (SNI and verification)."""
    parts = urlsplit(url)
    host = f"[{address}]" if ":" in address else address
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    target = parts._replace(netloc=netloc).geturl()
    name = parts.hostname or ""
    host_header = (f"[{name}]" if ":" in name else name) + ("" if parts.port is None else f":{parts.port}")
    return target, {"Host": host_header}, ({"sni_hostname": name} if parts.scheme == "https" else {})


def add(p: Platform, user: User, url: str, kinds: list[str] | None = None) -> WebhookView:
    unknown = sorted(set(kinds or []) - set(KINDS))
    if unknown:
        raise InvalidInput("invalid_event_kind", f"unknown event kinds {unknown}; known: {', '.join(KINDS)}")
    check_url(p, url)
    secret = new_secret()
    with p.db.write() as s:
        count = s.execute(
            select(func.count()).select_from(Webhook).where(Webhook.user_id == user.id, Webhook.deleted_at_ms.is_(None))
        ).scalar_one()
        if count >= MAX_PER_USER:
            raise QuotaExceeded("too_many_webhooks", f"at most {MAX_PER_USER} webhooks; remove one first")
        newest = s.execute(select(func.max(Event.id))).scalar_one() or 0
        hook = Webhook(
            user_id=user.id,
            url=url,
            secret=secret,
            kinds=",".join(sorted(set(kinds or []))),
            cursor_event_id=newest,  # from now on: a new webhook is not sent the past
            created_at_ms=p.clock.now_ms(),
        )
        s.add(hook)
        s.flush()
        return WebhookView(hook.id, url, sorted(set(kinds or [])), hook.created_at_ms, secret=secret)


def _owned(s: Session, user: User, webhook_id: int) -> Webhook:
    hook = s.get(Webhook, webhook_id)
    if hook is None or hook.user_id != user.id or hook.deleted_at_ms is not None:
        raise NotFound("webhook_not_found", f"no webhook {webhook_id}; list yours with `danlu webhooks`")
    return hook


def list_webhooks(p: Platform, user: User) -> list[WebhookView]:
    with p.db.read() as s:
        hooks = s.scalars(
            select(Webhook).where(Webhook.user_id == user.id, Webhook.deleted_at_ms.is_(None)).order_by(Webhook.id)
        ).all()
        counts: dict[tuple[int, str], int] = {
            (hid, st): n
            for hid, st, n in s.execute(
                select(WebhookDelivery.webhook_id, WebhookDelivery.status, func.count())
                .where(WebhookDelivery.webhook_id.in_([h.id for h in hooks]))
                .group_by(WebhookDelivery.webhook_id, WebhookDelivery.status)
            )
        }
        return [
            WebhookView(
                h.id,
                h.url,
                [k for k in h.kinds.split(",") if k],
                h.created_at_ms,
                delivered=counts.get((h.id, DELIVERED), 0),
                pending=counts.get((h.id, PENDING), 0),
                failed=counts.get((h.id, FAILED), 0),
            )
            for h in hooks
        ]


ROTATION_OVERLAP_MS = 24 * 3_600_000  # the old secret keeps signing beside the new one this long


def rotate_secret(p: Platform, user: User, webhook_id: int) -> WebhookView:
    """A new secret for the webhook, shown once; the old one signs beside it for a day (a second
    signature in ``webhook-signature``) so the receiver can switch without missing a delivery. A
    second rotation inside that day drops the oldest."""
    secret = new_secret()
    with p.db.write() as s:
        hook = _owned(s, user, webhook_id)
        hook.previous_secret, hook.previous_until_ms = hook.secret, p.clock.now_ms() + ROTATION_OVERLAP_MS
        hook.secret = secret
        kinds = [k for k in hook.kinds.split(",") if k]
        return WebhookView(hook.id, hook.url, kinds, hook.created_at_ms, secret=secret)


def remove(p: Platform, user: User, webhook_id: int) -> None:
    with p.db.write() as s:
        hook = _owned(s, user, webhook_id)
        hook.deleted_at_ms = p.clock.now_ms()
        s.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.webhook_id == hook.id, WebhookDelivery.status == PENDING)
            .values(status=FAILED, last_error="webhook removed")
        )


@dataclass(frozen=True)
class DeliveryView:
    id: int
    event_id: int
    kind: str
    status: str
    attempts: int
    last_status_code: int | None
    last_error: str
    next_attempt_ms: int | None
    delivered_at_ms: int | None


def deliveries(p: Platform, user: User, webhook_id: int, limit: int = 50) -> list[DeliveryView]:
    with p.db.read() as s:
        hook = _owned(s, user, webhook_id)
        rows = s.execute(
            select(WebhookDelivery, Event.kind)
            .join(Event, Event.id == WebhookDelivery.event_id)
            .where(WebhookDelivery.webhook_id == hook.id)
            .order_by(WebhookDelivery.id.desc())
            .limit(limit)
        ).all()
        return [
            DeliveryView(
                d.id,
                d.event_id,
                kind,
                d.status,
                d.attempts,
                d.last_status_code,
                d.last_error,
                d.next_attempt_ms if d.status == PENDING else None,
                d.delivered_at_ms,
            )
            for d, kind in rows
        ]


def enqueue(p: Platform) -> int:
    """Make the delivery rows of every webhook's new events; returns how many."""
    made = 0
    now = p.clock.now_ms()
    with p.db.write() as s:
        hooks = s.scalars(select(Webhook).where(Webhook.deleted_at_ms.is_(None)).with_for_update()).all()
        newest = s.execute(select(func.max(Event.id))).scalar_one() or 0
        for hook in hooks:
            if hook.cursor_event_id >= newest:
                continue
            user = s.get(User, hook.user_id)
            if user is None:
                continue
            stmt = select(Event.id, Event.kind).where(
                visible_to(user.id), Event.id > hook.cursor_event_id, Event.id <= newest
            )
            kinds = {k for k in hook.kinds.split(",") if k}
            for event_id, kind in s.execute(stmt.order_by(Event.id)):
                if kinds and kind not in kinds:
                    continue
                s.add(
                    WebhookDelivery(
                        webhook_id=hook.id,
                        event_id=event_id,
                        status=PENDING,
                        attempts=0,
                        next_attempt_ms=now,
                        last_error="",
                        created_at_ms=now,
                    )
                )
                made += 1
            hook.cursor_event_id = newest
    return made


@dataclass(frozen=True)
class _Due:
    id: int
    url: str
    secret: str
    event_id: int
    body: bytes
    previous_secret: str | None = None  # a rotation's old secret while it still signs


def _due(p: Platform, now: int, limit: int) -> list[_Due]:
    with p.db.read() as s:
        rows = s.execute(
            select(
                WebhookDelivery.id,
                Webhook.url,
                Webhook.secret,
                Event,
                Webhook.previous_secret,
                Webhook.previous_until_ms,
            )
            .join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
            .join(Event, Event.id == WebhookDelivery.event_id)
            .where(WebhookDelivery.status == PENDING, WebhookDelivery.next_attempt_ms <= now)
            .order_by(WebhookDelivery.next_attempt_ms, WebhookDelivery.id)
            .limit(limit)
        ).all()
        return [
            _Due(
                did,
                url,
                secret,
                ev.id,
                json.dumps(
                    {
                        "id": ev.id,
                        "kind": ev.kind,
                        "message": ev.message,
                        "instance_id": ev.instance_id,
                        "at": iso(ev.at_ms),
                    },
                    separators=(",", ":"),
                ).encode(),
                previous if previous is not None and until is not None and now < until else None,
            )
            for did, url, secret, ev, previous, until in rows
        ]


def _attempt(p: Platform, d: _Due, client: httpx.Client) -> tuple[int | None, str]:
    try:
        addresses = check_url(p, d.url)  # again now: a name may resolve elsewhere than when it was added
    except InvalidInput as exc:
        return None, exc.message
    target, host, extensions = pinned(d.url, addresses[0])
    ts = p.clock.now_ms() // 1000
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "danlu-webhooks",
        "X-Danlu-Event-Id": str(d.event_id),
        "X-Danlu-Delivery": str(d.id),
        "X-Danlu-Timestamp": str(ts),
        "X-Danlu-Signature": signature(d.secret, ts, d.body),  # the older headers, for one release
        **standard_headers(d.secret, str(d.event_id), ts, d.body, also=d.previous_secret),
        **host,
    }
    try:
        r = client.post(target, content=d.body, headers=headers, extensions=extensions)
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"[:500]
    return r.status_code, "" if 200 <= r.status_code < 300 else f"answered {r.status_code}"


def deliver_due(p: Platform, limit: int = BATCH, client: httpx.Client | None = None) -> tuple[int, int]:
    """Send due deliveries once each; returns (delivered, failed attempts)."""
    due = _due(p, p.clock.now_ms(), limit)
    if not due:
        return 0, 0
    own = client is None
    http = client or httpx.Client(timeout=TIMEOUT_S, follow_redirects=False)
    ok = bad = 0
    try:
        for d in due:
            code, error = _attempt(p, d, http)
            now = p.clock.now_ms()
            with p.db.write() as s:
                row = s.get(WebhookDelivery, d.id, with_for_update=True, populate_existing=True)
                if row is None or row.status != PENDING:
                    continue
                row.attempts += 1
                row.last_status_code = code
                row.last_error = error
                if code is not None and 200 <= code < 300:
                    row.status, row.delivered_at_ms = DELIVERY.move(row.status, DELIVERED, "deliver"), now
                    ok += 1
                    continue
                bad += 1
                wait = next_retry_s(row.attempts)
                if wait is None:
                    row.status = DELIVERY.move(row.status, FAILED, "give up on")
                else:
                    row.next_attempt_ms = now + wait * 1000
    finally:
        if own:
            http.close()
    return ok, bad
