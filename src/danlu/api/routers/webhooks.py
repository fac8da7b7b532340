"""Per-user webhooks for the event feed (danlu.notify.webhooks): add (the signing secret is shown
once), list with delivery counts, remove, and a webhook's recent deliveries."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, Field

from danlu.api.deps import CurrentUser, PlatformDep
from danlu.api.paging import ListRoute, paged
from danlu.api.schemas.common import Strict, errors, limited
from danlu.core.clock import iso
from danlu.notify import webhooks as svc

router = APIRouter(route_class=ListRoute, prefix="/webhooks", tags=["events"], responses=errors(401))
WebhookIdPath = Annotated[int, Path(ge=1, le=2**31 - 1, description="A webhook id (danlu webhooks)")]
KIND = "^(" + "|".join(svc.KINDS) + ")$"
Kind = Annotated[
    str, Field(pattern=KIND), limited("invalid_event_kind", "an event kind: " + ", ".join(svc.KINDS), pattern=KIND)
]


class WebhookIn(Strict):
    url: Annotated[
        str,
        Field(min_length=1, max_length=svc.MAX_URL, description="http(s) URL on a public address"),
        limited("invalid_webhook_url", "a webhook URL is at most 2048 characters, without control characters",
                text=svc.MAX_URL),
    ]  # fmt: skip
    kinds: list[Kind] = Field(default_factory=list, max_length=16, description="Only these kinds (none: all)")


class WebhookOut(BaseModel):
    id: int
    url: str
    kinds: list[str]
    created_at: str
    secret: str | None = Field(None, description="Signs every delivery (webhook-signature); shown only once")
    delivered: int
    pending: int
    failed: int

    @classmethod
    def of(cls, v: svc.WebhookView) -> WebhookOut:
        return cls(
            id=v.id,
            url=v.url,
            kinds=v.kinds,
            created_at=iso(v.created_at_ms) or "",
            secret=v.secret,
            delivered=v.delivered,
            pending=v.pending,
            failed=v.failed,
        )


class DeliveryOut(BaseModel):
    id: int
    event_id: int
    kind: str
    status: str = Field(description="pending, delivered or failed (attempts ran out)")
    attempts: int
    last_status_code: int | None
    last_error: str
    next_attempt_at: str | None
    delivered_at: str | None


@router.post("", response_model=WebhookOut, status_code=201, responses=errors(400, 422, 429))
def add(body: WebhookIn, p: PlatformDep, user: CurrentUser) -> WebhookOut:
    """POST every new event you see (`danlu events`) to ``url``, signed with the secret returned
    here, signed in the Standard Webhooks scheme (``webhook-id``, ``webhook-timestamp``,
    ``webhook-signature: v1,base64(HMAC(secret bytes, "{id}.{timestamp}.{body}"))``); at least
    once, retried with backoff; de-duplicate on ``webhook-id``. The older X-Danlu-* headers come
    too for one release."""
    return WebhookOut.of(svc.add(p, user, body.url, list(body.kinds)))


@router.get("", response_model=list[WebhookOut], **paged("id"))
def list_webhooks(p: PlatformDep, user: CurrentUser) -> list[WebhookOut]:
    return [WebhookOut.of(v) for v in svc.list_webhooks(p, user)]


@router.post("/{webhook_id}/rotate-secret", response_model=WebhookOut, responses=errors(404))
def rotate_secret(webhook_id: WebhookIdPath, p: PlatformDep, user: CurrentUser) -> WebhookOut:
    """A new signing secret, shown once. For a day the old one signs too: ``webhook-signature`` carries
    both ``v1,`` signatures (space-separated), so a receiver holding either verifies; then only the new."""
    return WebhookOut.of(svc.rotate_secret(p, user, webhook_id))


@router.delete("/{webhook_id}", status_code=204, responses=errors(404))
def remove(webhook_id: WebhookIdPath, p: PlatformDep, user: CurrentUser) -> Response:
    svc.remove(p, user, webhook_id)
    return Response(status_code=204)


@router.get("/{webhook_id}/deliveries", response_model=list[DeliveryOut], responses=errors(404))
def deliveries(webhook_id: WebhookIdPath, p: PlatformDep, user: CurrentUser) -> list[DeliveryOut]:
    return [
        DeliveryOut(
            id=d.id,
            event_id=d.event_id,
            kind=d.kind,
            status=d.status,
            attempts=d.attempts,
            last_status_code=d.last_status_code,
            last_error=d.last_error,
            next_attempt_at=iso(d.next_attempt_ms),
            delivered_at=iso(d.delivered_at_ms),
        )
        for d in svc.deliveries(p, user, webhook_id)
    ]
