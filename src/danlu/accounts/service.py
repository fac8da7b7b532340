"""Users and tokens. Tokens are random, shown once, stored as SHA-256 hashes, compared in
constant time. (A slow password hash is unnecessary: tokens carry 256 bits of entropy.)"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Any

from sqlalchemy import inspect, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, make_transient_to_detached
from sqlalchemy.orm.instrumentation import manager_of_class

from danlu.accounts.payers import create_billing_account, currency
from danlu.context import Platform
from danlu.core.errors import Conflict, InvalidInput, NotFound, Unauthorized
from danlu.db.models import ApiToken, User

TOKEN_PREFIX = "dl_"
NAME_RE = re.compile(r"^[a-z][a-z0-9_.-]{1,62}$")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def validate_name(name: str) -> str:
    if not NAME_RE.fullmatch(name):  # match() would take a final newline ("bob\n")
        raise InvalidInput(
            "invalid_user_name",
            "user names are 2-63 characters: lowercase letters, digits, '_', '.', '-', starting with a letter",
        )
    return name


def create_user(session: Session, name: str, now_ms: int, *, is_admin: bool = False) -> tuple[User, str]:
    """Create a user with a personal billing account; returns the user and its token (shown once). A new
    person signs up through danlu.billing.signup, which also grants the sign-up vouchers on offer."""
    validate_name(name)
    token = new_token()
    user = User(name=name, token_hash=hash_token(token), is_admin=is_admin, created_at_ms=now_ms)
    session.add(user)
    try:
        session.flush()
    except IntegrityError:
        raise Conflict("user_exists", f"a user named {name!r} already exists; pick another name") from None
    create_billing_account(session, currency(session), kind="personal", name=name, now_ms=now_ms, user_id=user.id)
    return user, token


def authenticate(session: Session, token: str | None) -> User:
    if not token:
        raise Unauthorized(
            "missing_token", "send your API token as 'Authorization: Bearer TOKEN' (set DANLU_TOKEN for the CLI)"
        )
    digest = hash_token(token)
    user = session.scalars(select(User).where(User.token_hash == digest)).first()
    if user is None:  # a named token (console or `danlu token create`), unless revoked
        named = select(ApiToken.user_id, ApiToken.token_hash).where(
            ApiToken.token_hash == digest, ApiToken.revoked_at_ms.is_(None)
        )
        row = session.execute(named).first()
        if row is not None and hmac.compare_digest(row.token_hash, digest):
            user = session.get(User, row.user_id)
        if user is not None:
            return user
    # Compare in constant time even though the lookup found a row, so timing says nothing.
    if user is None or not hmac.compare_digest(user.token_hash, digest):
        raise Unauthorized("invalid_token", "this API token is not valid; ask your operator for a new one")
    return user


def user_columns(user: User) -> dict[str, Any]:
    """A user's column values (what a cache keeps instead of an ORM object shared between threads)."""
    return {a.key: getattr(user, a.key) for a in inspect(User).column_attrs}


def detached_user(columns: dict[str, Any]) -> User:
    """A User of its own for one request from cached columns, built as the ORM's loader builds one
    (no attribute events), as if a session had loaded and expunged it."""
    user: User = manager_of_class(User).new_instance()
    user.__dict__.update(columns)
    make_transient_to_detached(user)
    return user


def get_user_by_name(session: Session, name: str) -> User:
    user = session.scalars(select(User).where(User.name == name)).first() if len(name) <= 64 else None
    if user is None:
        raise NotFound("user_not_found", f"no user named {name!r}; list users with `danlu admin user list`")
    return user


def rotate_token(session: Session, name: str) -> str:
    """A new token for ``name`` (shown once); the old one stops working at once."""
    user = get_user_by_name(session, name)
    token = new_token()
    user.token_hash = hash_token(token)
    session.flush()
    return token


def revoke_token(session: Session, name: str) -> None:
    """``name``'s token stops working; nothing else changes (rotate to give them a new one)."""
    user = get_user_by_name(session, name)
    user.token_hash = hash_token("revoked:" + secrets.token_hex(32))  # matches no token anyone holds
    session.flush()


def set_gpu_quota(session: Session, name: str, gpus: int | None) -> User:
    """Limit how many GPUs ``name`` may hold at once (None removes the limit). Running work is not
    touched: a quota below what the user holds only stops new claims."""
    if gpus is not None and (isinstance(gpus, bool) or gpus < 0):
        raise InvalidInput("invalid_quota", "a GPU quota is a whole number of GPUs, 0 or more (or null for none)")
    user = get_user_by_name(session, name)
    user.gpu_quota = gpus
    session.flush()
    return user


# -- the operator's account administration, each in its own transaction (the admin router's services)


@dataclass(frozen=True)
class UserInfo:
    name: str
    is_admin: bool
    suspended_reason: str | None
    sandbox_uid: int | None
    gpu_quota: int | None

    @classmethod
    def of(cls, u: User) -> UserInfo:
        return cls(u.name, u.is_admin, u.suspended_reason, u.sandbox_uid, u.gpu_quota)


def list_users(p: Platform) -> list[UserInfo]:
    with p.db.read() as s:
        return [UserInfo.of(u) for u in s.scalars(select(User).order_by(User.id))]


def change_gpu_quota(p: Platform, name: str, gpus: int | None) -> UserInfo:
    with p.db.write() as s:
        return UserInfo.of(set_gpu_quota(s, name, gpus))


def user_info(p: Platform, name: str) -> UserInfo:
    with p.db.read() as s:
        return UserInfo.of(get_user_by_name(s, name))


def rotate_user_token(p: Platform, name: str) -> str:
    """A new token for ``name``, shown once; the old one stops working at once."""
    with p.db.write() as s:
        return rotate_token(s, name)


def revoke_user_token(p: Platform, name: str) -> None:
    with p.db.write() as s:
        revoke_token(s, name)
