"""People and how they sign in: users, API tokens, SSH keys, port links, web sessions, teams, student
verification."""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from danlu.db.models.base import Base


class User(Base):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    # Most GPUs this user may hold at once, rentals and job runs together; NULL = no limit.
    gpu_quota: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The unprivileged OS uid/gid this user's sandboxes run under, allocated on first use from the
    # operator's range; unique, so no two renters ever share one.
    sandbox_uid: Mapped[int | None] = mapped_column(Integer, nullable=True, unique=True)
    # Set while the operator has suspended the user (the reason the user is shown); NULL = active.
    suspended_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The team the user rents on when no --team is given; NULL = the personal account.
    default_team_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    # The web console's sign-in (argon2id, danlu.accounts.credentials); NULL = no password set, so
    # this user signs in with API tokens only.
    password_hash: Mapped[str | None] = mapped_column(String(255), nullable=True)


class ApiToken(Base):
    """A named API token a person made from the console or ``danlu token create`` (beside the one
    token every user has on ``users``). Stored as a SHA-256 hash; revoking sets ``revoked_at_ms``."""

    __tablename__ = "api_tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    hint: Mapped[str] = mapped_column(String(16))  # the token's last characters, to tell tokens apart
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    revoked_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class SshKey(Base):
    """A person's SSH public key for the gateway (danlu.access.ssh). The fingerprint (SHA-256) is
    unique over everyone: a key is one person's, so the gateway knows who connects from it alone."""

    __tablename__ = "ssh_keys"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    public_key: Mapped[str] = mapped_column(Text)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)


class PortLink(Base):
    """A revocable link to one port of one instance through the port proxy (danlu.access.links):
    whoever holds it reaches that app, nothing else. Only the token's SHA-256 is kept."""

    __tablename__ = "port_links"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    instance_id: Mapped[str] = mapped_column(ForeignKey("instances.id"), index=True)
    port: Mapped[int] = mapped_column(Integer)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_by: Mapped[int] = mapped_column(ForeignKey("users.id"))
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    revoked_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class WebSession(Base):
    """A signed-in browser (the console's session cookie holds a random value; this row its hash).
    ``csrf`` is the token every form of that session must carry."""

    __tablename__ = "web_sessions"
    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    csrf: Mapped[str] = mapped_column(String(64))
    created_at_ms: Mapped[int] = mapped_column(BigInteger)
    expires_at_ms: Mapped[int] = mapped_column(BigInteger)


class Team(Base):
    __tablename__ = "teams"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    billing_account_id: Mapped[int] = mapped_column(ForeignKey("billing_accounts.id"), unique=True)
    created_at_ms: Mapped[int] = mapped_column(BigInteger)


class TeamMember(Base):
    __tablename__ = "team_members"
    __table_args__ = (UniqueConstraint("team_id", "user_id", name="uq_team_members_team_user"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    role: Mapped[str] = mapped_column(String(16))  # owner | admin | member | viewer
    # Most GPUs this member may hold at once on the team's account; NULL = no limit.
    gpu_quota: Mapped[int | None] = mapped_column(Integer, nullable=True)
    added_at_ms: Mapped[int] = mapped_column(BigInteger)


class Verification(Base):
    """A renter's request for academic (student) verification and the operator's decision; the
    latest decided row of a user is their status. An approved one gives their personal account the
    operator's student discount on GPU time (``settings.student_discount_bp``)."""

    __tablename__ = "verifications"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    status: Mapped[str] = mapped_column(String(16))  # pending | approved | refused
    institution: Mapped[str] = mapped_column(String(128))
    evidence: Mapped[str] = mapped_column(Text, default="")  # e.g. a university e-mail address
    reason: Mapped[str] = mapped_column(Text, default="")  # the operator's, when decided
    requested_at_ms: Mapped[int] = mapped_column(BigInteger)
    decided_at_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
