"""Users and tokens. Tokens are random, shown once, stored as SHA-256 hashes, compared in
constant time. (A slow password hash is unnecessary: tokens carry 256 bits of entropy.)"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from danlu.billing.accounts import currency, ensure_accounts
from danlu.core.errors import Conflict, InvalidInput, NotFound, Unauthorized
from danlu.db.models import User

TOKEN_PREFIX = "dl_"
NAME_RE = re.compile(r"^[a-z][a-z0-9_.-]{1,62}$")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def validate_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise InvalidInput(
            "invalid_user_name",
            "user names are 2-63 characters: lowercase letters, digits, '_', '.', '-', starting with a letter",
        )
    return name


def create_user(session: Session, name: str, now_ms: int, *, is_admin: bool = False) -> tuple[User, str]:
    """Create a user with a ledger account; returns the user and its token (shown once)."""
    validate_name(name)
    token = new_token()
    user = User(name=name, token_hash=hash_token(token), is_admin=is_admin, credit_limit_minor=0, created_at_ms=now_ms)
    session.add(user)
    try:
        session.flush()
    except IntegrityError:
        raise Conflict("user_exists", f"a user named {name!r} already exists; pick another name") from None
    ensure_accounts(session, currency(session), user.id)
    return user, token


def authenticate(session: Session, token: str | None) -> User:
    if not token:
        raise Unauthorized(
            "missing_token", "send your API token as 'Authorization: Bearer TOKEN' (set DANLU_TOKEN for the CLI)"
        )
    digest = hash_token(token)
    user = session.scalars(select(User).where(User.token_hash == digest)).first()
    # Compare in constant time even though the lookup found a row, so timing says nothing.
    if user is None or not hmac.compare_digest(user.token_hash, digest):
        raise Unauthorized("invalid_token", "this API token is not valid; ask your operator for a new one")
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
