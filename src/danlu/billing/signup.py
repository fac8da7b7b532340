"""A new person: their user and token, their personal billing account (danlu.accounts.service) and the
sign-up vouchers on offer (danlu.billing.vouchers), in one transaction."""

from __future__ import annotations

from sqlalchemy.orm import Session

from danlu.accounts.payers import personal_account
from danlu.accounts.service import UserInfo, create_user
from danlu.billing.vouchers import grant_signup_vouchers
from danlu.context import Platform
from danlu.db.models import User


def sign_up(session: Session, name: str, now_ms: int, *, is_admin: bool = False) -> tuple[User, str]:
    """In the caller's transaction; returns the user and its token (shown once)."""
    user, token = create_user(session, name, now_ms, is_admin=is_admin)
    grant_signup_vouchers(session, personal_account(session, user.id), now_ms)
    return user, token


def register_user(p: Platform, name: str) -> tuple[UserInfo, str]:
    """A new renter with an account; returns it and its token (shown once)."""
    with p.db.write() as s:
        user, token = sign_up(s, name, p.clock.now_ms())
        return UserInfo.of(user), token
