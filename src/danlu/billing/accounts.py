"""Ledger accounts and postings in the database: the only code that writes ledger rows.

A balance changes only here, in the transaction that inserts its entries, through a conditional
``UPDATE ... WHERE balance - amount >= floor`` whose row count says whether it was allowed. Two
concurrent debits therefore can never overdraw: the second one re-checks against the first's
committed result (PostgreSQL re-evaluates the WHERE after the row lock; SQLite serialises writers).
"""

from __future__ import annotations

import hashlib

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from danlu.accounts.payers import currency, personal_account
from danlu.billing.ledger import Posting, check_balanced
from danlu.core.errors import Conflict, InsufficientFunds, NotFound
from danlu.core.money import format_minor
from danlu.db.models import Account, BillingAccount, LedgerEntry, LedgerTransaction

SYSTEM_KINDS = ("external", "revenue", "promotions")


def system_account(session: Session, kind: str) -> Account:
    acct = session.scalars(select(Account).where(Account.kind == kind, Account.ref == "system")).first()
    if acct is None:
        raise RuntimeError(f"system account {kind!r} missing; the server bootstraps it on start")
    return acct


def cash_account(session: Session, billing_account_id: int) -> Account:
    acct = session.scalars(
        select(Account).where(Account.kind == "cash", Account.ref == f"ba:{billing_account_id}")
    ).first()
    if acct is None:
        raise NotFound("account_not_found", "this billing account has no cash account")
    return acct


def user_account(session: Session, user_id: int) -> Account:
    """The cash account of the user's personal billing account."""
    return cash_account(session, personal_account(session, user_id).id)


def lock_billing_account(session: Session, billing_account_id: int) -> int:
    """Lock the billing account's cash row for this transaction and return its balance. Every
    path that bills an account takes this lock first, so billing work of one payer is serialised
    in one order (cash account, then vouchers, then allocations) on PostgreSQL; SQLite writers
    are serialised anyway."""
    return session.execute(
        select(Account.balance_minor)
        .where(Account.kind == "cash", Account.ref == f"ba:{billing_account_id}")
        .with_for_update()
    ).scalar_one()


def ensure_accounts(session: Session, cur: str) -> None:
    """The system accounts, created once."""
    for kind in SYSTEM_KINDS:
        if session.scalars(select(Account).where(Account.kind == kind, Account.ref == "system")).first() is None:
            session.add(Account(kind=kind, ref="system", billing_account_id=None, currency=cur, balance_minor=0))
    session.flush()


def idempotency_key(prefix: str, *parts: object) -> str:
    raw = ":".join(str(p) for p in parts)
    if len(prefix) + len(raw) < 120:
        return f"{prefix}:{raw}"
    return f"{prefix}:sha256:{hashlib.sha256(raw.encode()).hexdigest()}"


def post(
    session: Session,
    *,
    key: str,
    kind: str,
    memo: str,
    postings: list[Posting],
    now_ms: int,
    floors: dict[int, int] | None = None,
) -> LedgerTransaction:
    """Record a balanced transaction and apply it to the cached balances.

    ``floors`` maps account ids to the lowest balance the posting may leave (``-credit_limit``
    for a user); a posting that would cross it raises :class:`InsufficientFunds` and the caller's
    transaction rolls back. A repeated ``key`` raises :class:`Conflict` (unique constraint).
    """
    check_balanced(postings)
    tx = LedgerTransaction(idempotency_key=key, kind=kind, memo=memo, created_at_ms=now_ms)
    session.add(tx)
    try:
        session.flush()
    except IntegrityError:
        raise Conflict("duplicate_transaction", f"transaction {key!r} was already recorded") from None
    floors = floors or {}
    for p in postings:
        session.add(LedgerEntry(transaction_id=tx.id, account_id=p.account_id, amount_minor=p.amount_minor))
        stmt = update(Account).where(Account.id == p.account_id)
        if p.account_id in floors and p.amount_minor < 0:
            stmt = stmt.where(Account.balance_minor + p.amount_minor >= floors[p.account_id])
        result = session.execute(
            stmt.values(balance_minor=Account.balance_minor + p.amount_minor),
            execution_options={"synchronize_session": False},
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            raise InsufficientFunds(
                "insufficient_funds", "the balance does not cover this charge; top up and try again"
            )
    session.flush()
    return tx


def find_transaction(session: Session, key: str) -> LedgerTransaction | None:
    return session.scalars(select(LedgerTransaction).where(LedgerTransaction.idempotency_key == key)).first()


def topup(session: Session, ba: BillingAccount, amount_minor: int, key: str, now_ms: int) -> LedgerTransaction:
    """Credit a billing account from the external account. Replaying the same key returns the
    first transaction unchanged (and changes nothing), so a retried top-up never pays twice."""
    existing = find_transaction(session, key)
    if existing is not None:
        return existing
    cur = currency(session)
    ext = system_account(session, "external")
    acct = cash_account(session, ba.id)
    return post(
        session,
        key=key,
        kind="topup",
        memo=f"top-up of {format_minor(amount_minor, cur)} {cur} for {ba.name}",
        postings=[Posting(ext.id, -amount_minor), Posting(acct.id, amount_minor)],
        now_ms=now_ms,
    )
