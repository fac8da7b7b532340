"""Top-up idempotency keys belong to the user they were given for (issue 8, finding 6)."""

from __future__ import annotations

import pytest

from danlu.accounts.service import create_user, get_user_by_name
from danlu.billing import service as billing
from danlu.billing.accounts import user_account
from danlu.context import Platform
from danlu.core.errors import Conflict


def _users(p: Platform, *names: str) -> None:
    with p.db.write() as s:
        for n in names:
            create_user(s, n, 0)


def test_same_key_for_two_users_credits_both(platform: Platform) -> None:
    _users(platform, "ann", "bob")
    a, created_a = billing.admin_topup(platform, "ann", "10.00", "order-1")
    b, created_b = billing.admin_topup(platform, "bob", "10.00", "order-1")
    assert (a.balance_minor, created_a) == (1000, True)
    assert (b.balance_minor, created_b) == (1000, True)  # before the fix: 0 and created=False
    total, _ = billing.ledger_totals(platform)
    assert total == 0


def test_retry_for_the_same_user_changes_nothing(platform: Platform) -> None:
    _users(platform, "ann")
    billing.admin_topup(platform, "ann", "10.00", "order-1")
    again, created = billing.admin_topup(platform, "ann", "10.00", "order-1")
    assert (again.balance_minor, created) == (1000, False)


def test_reusing_a_key_for_another_amount_is_a_conflict(platform: Platform) -> None:
    _users(platform, "ann")
    billing.admin_topup(platform, "ann", "10.00", "order-1")
    with pytest.raises(Conflict) as exc:
        billing.admin_topup(platform, "ann", "99.00", "order-1")
    assert exc.value.code == "idempotency_key_reused"
    with platform.db.read() as s:
        assert user_account(s, get_user_by_name(s, "ann").id).balance_minor == 1000


def test_a_long_key_stays_per_user(platform: Platform) -> None:
    _users(platform, "ann", "bob")
    key = "k" * 120
    billing.admin_topup(platform, "ann", "1.00", key)
    b, created = billing.admin_topup(platform, "bob", "1.00", key)
    assert (b.balance_minor, created) == (100, True)
