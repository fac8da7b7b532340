"""Passwords, named API tokens and browser sessions (the web console's sign-in; docs/console.md).

- Passwords are hashed with argon2id (argon2-cffi's defaults: 64 MiB, 3 passes), never stored or
  logged in clear; a wrong name and a wrong password answer the same, after the same work.
- Named API tokens sit beside the one token every user has: made and revoked from the console or
  ``danlu token``, shown once, stored as SHA-256 hashes like that one.
- A browser session is a random cookie value whose SHA-256 is the row's key, with its own CSRF
  token and a fixed lifetime; signing out deletes the row, so the cookie is worthless at once.
"""

from __future__ import annotations

import hmac
import os
import re
import secrets
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from danlu.accounts.service import get_user_by_name, hash_token, new_token
from danlu.context import Platform
from danlu.core.errors import Conflict, InvalidInput, NotFound, Unauthorized
from danlu.db.models import ApiToken, User, WebSession

CONSOLE_COOKIE = "danlu_session"  # the web console's session cookie (HttpOnly, SameSite=Lax, path /)

_HASHER = PasswordHasher()


@cache
def _dummy_hash() -> str:
    """Verifying against this when the user does not exist (or has no password) costs the same as a
    real check, so the answer's timing does not tell which user names exist. Made on the first
    sign-in, not at import (an argon2 hash is ~0.2 s of CPU every server start would pay)."""
    return _HASHER.hash("danlu: no such user")


MIN_PASSWORD = 10
MAX_PASSWORD = 256
SESSION_MS = 12 * 3600 * 1000  # a sign-in lasts 12 hours, then the console asks again
MAX_TOKENS = 50  # live named tokens per person


# The API's schema states both rules as patterns (danlu.api.routers.credentials), so a request the
# schema allows is one these accept.
PASSWORD_RE = re.compile(r"^[^\x00-\x1f\x7f\s]([^\x00-\x1f\x7f]*[^\x00-\x1f\x7f\s])?$")
TOKEN_NAME_RE = re.compile(r"^\s*[^\x00-\x1f\x7f\s][^\x00-\x1f\x7f]*$")


def check_password_rules(password: str) -> None:
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        raise InvalidInput(
            "invalid_password", f"a password is {MIN_PASSWORD} to {MAX_PASSWORD} characters; choose a longer one"
        )
    if not PASSWORD_RE.fullmatch(password):
        raise InvalidInput("invalid_password", "a password has no leading or trailing spaces and no control characters")


def set_password(p: Platform, name: str, password: str) -> None:
    """Set (or replace) ``name``'s console password. Every browser signed in as them is signed out."""
    check_password_rules(password)
    digest = _HASHER.hash(password)  # slow: outside the transaction
    with p.db.write() as s:
        user = get_user_by_name(s, name)
        user.password_hash = digest
        s.execute(delete(WebSession).where(WebSession.user_id == user.id))


def check_password(p: Platform, name: str, password: str, address: str | None = None) -> int:
    """The id of the user whose name and password these are; else 401 ``bad_credentials`` (the same
    answer for an unknown name, a user without a password, a suspended-free check of the password).
    Guesses are throttled per account and per client ``address`` (danlu.core.throttle): past five
    wrong ones, ``429 too_many_attempts`` before any hashing."""
    keys = [f"name:{name[:64].lower()}"] + ([f"addr:{address}"] if address else [])
    p.sign_in_throttle.check(keys, p.clock.now_ms())
    with p.db.read() as s:
        row = s.execute(select(User.id, User.password_hash).where(User.name == name[:64])).first()
    stored = row.password_hash if row is not None and row.password_hash else None
    try:
        ok = _HASHER.verify(stored or _dummy_hash(), password[:MAX_PASSWORD]) and stored is not None
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        ok = False
    if not ok or row is None:
        p.sign_in_throttle.failed(keys, p.clock.now_ms())
        raise Unauthorized("bad_credentials", "the user name or the password is wrong; try again or ask your operator")
    p.sign_in_throttle.succeeded(keys[:1])  # the account's count; the address keeps its own
    return int(row.id)


# ---------------------------------------------------------------------------- browser sessions


@dataclass(frozen=True)
class WebSessionInfo:
    user_id: int
    csrf: str
    expires_at_ms: int


def open_session(p: Platform, user_id: int) -> tuple[str, WebSessionInfo]:
    """A new session for ``user_id``: the cookie's value (shown to the browser only) and the row."""
    cookie = secrets.token_urlsafe(32)
    now = p.clock.now_ms()
    info = WebSessionInfo(user_id, secrets.token_urlsafe(32), now + SESSION_MS)
    with p.db.write() as s:
        s.execute(delete(WebSession).where(WebSession.expires_at_ms <= now))  # tidy while here
        s.add(
            WebSession(
                id_hash=hash_token(cookie),
                user_id=user_id,
                csrf=info.csrf,
                created_at_ms=now,
                expires_at_ms=info.expires_at_ms,
            )
        )
    return cookie, info


def with_password(p: Platform) -> set[str]:
    """The names of the users who can sign in to the console (a password is set)."""
    with p.db.read() as s:
        return set(s.scalars(select(User.name).where(User.password_hash.is_not(None))))


def signed_in(p: Platform, cookie: str | None) -> tuple[User, WebSessionInfo] | None:
    """The console's signed-in user of this cookie (detached from its session), or None."""
    with p.db.read() as s:
        found = session_user(s, cookie, p.clock.now_ms())
        if found is not None:
            s.expunge(found[0])
        return found


def session_user(s: Session, cookie: str | None, now_ms: int) -> tuple[User, WebSessionInfo] | None:
    """The signed-in user of this cookie, or None (no cookie, unknown, expired)."""
    if not cookie or len(cookie) > 128:
        return None
    row = s.get(WebSession, hash_token(cookie))
    if row is None or row.expires_at_ms <= now_ms:
        return None
    user = s.get(User, row.user_id)
    if user is None:
        return None
    return user, WebSessionInfo(row.user_id, row.csrf, row.expires_at_ms)


def close_session(p: Platform, cookie: str | None) -> None:
    if cookie and len(cookie) <= 128:
        with p.db.write() as s:
            s.execute(delete(WebSession).where(WebSession.id_hash == hash_token(cookie)))


def csrf_ok(expected: str, given: str | None) -> bool:
    return bool(given) and hmac.compare_digest(expected.encode(), (given or "").encode())


# ---------------------------------------------------------------------------- named API tokens


@dataclass(frozen=True)
class TokenInfo:
    id: int
    name: str
    hint: str
    created_at_ms: int
    revoked_at_ms: int | None


def _info(t: ApiToken) -> TokenInfo:
    return TokenInfo(t.id, t.name, t.hint, t.created_at_ms, t.revoked_at_ms)


def create_api_token(p: Platform, user: User, name: str) -> tuple[TokenInfo, str]:
    """A new named token for ``user``; returns it and the token itself (shown once)."""
    if not TOKEN_NAME_RE.fullmatch(name) or len(name.strip()) > 64:
        raise InvalidInput("invalid_token_name", "name the token in 1 to 64 printable characters, e.g. 'laptop'")
    token = new_token()
    with p.db.write() as s:
        live = s.scalars(select(ApiToken.id).where(ApiToken.user_id == user.id, ApiToken.revoked_at_ms.is_(None))).all()
        if len(live) >= MAX_TOKENS:
            raise Conflict("too_many_tokens", f"you have {MAX_TOKENS} live tokens; revoke one you no longer use")
        row = ApiToken(
            user_id=user.id, name=name, token_hash=hash_token(token), hint=token[-4:], created_at_ms=p.clock.now_ms()
        )
        s.add(row)
        s.flush()
        return _info(row), token


def list_api_tokens(p: Platform, user: User) -> list[TokenInfo]:
    with p.db.read() as s:
        rows = s.scalars(select(ApiToken).where(ApiToken.user_id == user.id).order_by(ApiToken.id.desc()))
        return [_info(t) for t in rows]


def revoke_api_token(p: Platform, user: User, token_id: int) -> TokenInfo:
    """Revoke one of ``user``'s named tokens; another person's token id answers 404."""
    with p.db.write() as s:
        row = s.get(ApiToken, token_id) if 0 < token_id < 2**31 else None
        if row is None or row.user_id != user.id:
            raise NotFound("token_not_found", f"you have no API token {token_id}; list them with `danlu token list`")
        if row.revoked_at_ms is None:
            row.revoked_at_ms = p.clock.now_ms()  # the API's user cache reads api_tokens too: seen at once
        return _info(row)


def ensure_admin_password(p: Platform, data_dir: Path, admin_name: str) -> str | None:
    """On a server's start: when the operator's user has no console password yet, make one, save it
    in DATA_DIR/admin-password (mode 0600) and return it (printed once); else None."""
    with p.db.read() as s:
        user = get_user_by_name(s, admin_name)
        if user.password_hash is not None:
            return None
    password = secrets.token_urlsafe(15)
    set_password(p, admin_name, password)
    path = data_dir / "admin-password"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(password + "\n")
    os.chmod(path, 0o600)
    return password
