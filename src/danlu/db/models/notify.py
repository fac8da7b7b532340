"""Notices: the event feed, webhooks and their deliveries."""

from __future__ import annotations

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from danlu.db.models.base import Base
from danlu.db.models.compute import Instance


class Event(Base):
    """A notice for a person or an account's managers (a team member removed while running,
    a voucher expiring …); the feed issue 10 builds on."""

    __tablename__ = "events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True, index=True)
    billing_account_id: Mapped[int | None] = mapped_column(ForeignKey("billing_accounts.id"), nullable=True, index=True)
    instance_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text)
    at_ms: Mapped[int] = mapped_column(BigInteger)

    @classmethod
    def about_instance(cls, inst: Instance, kind: str, message: str, at_ms: int) -> Event:
        """An event about an instance, for its renter (and, through its payer, a team's managers)."""
        return cls(
            user_id=inst.user_id,
            billing_account_id=inst.billing_account_id,
            instance_id=inst.id,
            kind=kind,
            message=f"{inst.id}: {message}",
            at_ms=at_ms,
        )


class Webhook(Base):
    """A person's webhook (danlu.notify.webhooks): the events they see are POSTed here, signed with
    ``secret``; ``kinds`` (comma-separated, empty = all) filters; ``cursor_event_id`` is the newest
    event already turned into deliveries."""

    __tablename__ = "webhooks"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    url: Mapped[str] = mapped_column(Text)
    secret: Mapped[str] = mapped_column(String(64))
    # during a rotation the old secret signs beside the new one until previous_until_ms
    previous_secret: Mapped[str | None] = mapped_column(String(64), nullable=True)
    previous_until_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    kinds: Mapped[str] = mapped_column(Text, default="")
    cursor_event_id: Mapped[int] = mapped_column(Integer, default=0)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    deleted_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class WebhookDelivery(Base):
    """One event for one webhook: pending until the receiver answers 2xx (delivered) or the
    attempts run out (failed); unique per (webhook, event), so an event is queued once."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("webhook_id", "event_id", name="uq_webhook_deliveries_webhook_event"),
        Index("ix_webhook_deliveries_due", "status", "next_attempt_ms"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    webhook_id: Mapped[int] = mapped_column(ForeignKey("webhooks.id"))
    event_id: Mapped[int] = mapped_column(ForeignKey("events.id"))
    status: Mapped[str] = mapped_column(String(16))  # pending | delivered | failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_ms: Mapped[int] = mapped_column(BigInteger)
    last_status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_error: Mapped[str] = mapped_column(Text, default="")
    delivered_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
