"""Who pays: billing accounts (a person's personal one, a team's), each with its cash ledger account,
and the deployment's one currency. Rows only, no money moves here (danlu.billing.accounts posts)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from danlu.core.errors import NotFound
from danlu.db.models import Account, BillingAccount, Setting


def currency(session: Session) -> str:
    value = session.get(Setting, "currency")
    if value is None:
        raise RuntimeError("database is not bootstrapped: no currency setting")
    return value.value


def personal_account(session: Session, user_id: int) -> BillingAccount:
    ba = session.scalars(select(BillingAccount).where(BillingAccount.user_id == user_id)).first()
    if ba is None:
        raise NotFound("account_not_found", "this user has no billing account")
    return ba


def billing_account(session: Session, billing_account_id: int) -> BillingAccount:
    ba = session.get(BillingAccount, billing_account_id)
    if ba is None:
        raise NotFound("account_not_found", "no such billing account")
    return ba


def create_billing_account(
    session: Session, cur: str, *, kind: str, name: str, now_ms: int, user_id: int | None = None
) -> BillingAccount:
    """A new billing account with its cash ledger account at zero."""
    ba = BillingAccount(kind=kind, user_id=user_id, name=name, credit_limit_minor=0, created_at_ms=now_ms)
    session.add(ba)
    session.flush()
    session.add(Account(kind="cash", ref=f"ba:{ba.id}", billing_account_id=ba.id, currency=cur, balance_minor=0))
    session.flush()
    return ba


def whose_balance(ba: BillingAccount) -> str:
    """How a message names the payer's balance: "the balance" of one's own account, "team NAME's balance"."""
    return f"team {ba.name}'s balance" if ba.kind == "team" else "the balance"


def top_up_hint(ba: BillingAccount) -> str:
    """What to do when the payer's money does not cover something: a team's is topped up by the operator
    for the team, which its members cannot do from their own balance."""
    if ba.kind == "team":
        return f"ask the operator to top up the team (`danlu admin team topup {ba.name} AMOUNT`)"
    return "top up first"
