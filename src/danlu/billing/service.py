"""Billing services for the API and CLI: top-ups, credit limits, prices, balances, statements."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import String, cast, func, literal, select
from sqlalchemy.orm import Session

from danlu.accounts import teams
from danlu.accounts.payers import billing_account, currency, personal_account
from danlu.accounts.service import get_user_by_name
from danlu.billing.accounts import cash_account, find_transaction, idempotency_key, topup
from danlu.billing.price_plans import record_price
from danlu.catalog.gpu_models import resolve_model
from danlu.context import Platform
from danlu.core.errors import Conflict, InvalidInput, NotFound
from danlu.core.money import format_minor, parse_amount
from danlu.db.models import Account, BillingAccount, LedgerEntry, LedgerTransaction, Price, Team, User


@dataclass
class BalanceView:
    balance_minor: int
    credit_limit_minor: int
    currency: str

    def as_dict(self) -> dict[str, str]:
        return {
            "balance": format_minor(self.balance_minor, self.currency),
            "credit_limit": format_minor(self.credit_limit_minor, self.currency),
            "currency": self.currency,
        }


def _balance_view(s: Session, billing_account_id: int) -> BalanceView:
    return BalanceView(
        cash_account(s, billing_account_id).balance_minor,
        billing_account(s, billing_account_id).credit_limit_minor,
        currency(s),
    )


def balance(p: Platform, user: User, team: str | None = None) -> BalanceView:
    """The cash balance of the caller's personal account, or of ``team`` (any member may look)."""
    with p.db.read() as s:
        return _balance_view(
            s, teams.payer_named(s, user, team)
        )


def personal_balances(p: Platform) -> dict[str, BalanceView]:
    """Every personal account's cash balance and credit limit by user name (the operator's list)."""
    with p.db.read() as s:
        cur = currency(s)
        rows = s.execute(
            select(User.name, Account.balance_minor, BillingAccount.credit_limit_minor)
            .join(BillingAccount, BillingAccount.user_id == User.id)
            .join(Account, Account.ref == literal("ba:") + cast(BillingAccount.id, String))
            .where(BillingAccount.kind == "personal", Account.kind == "cash")
        ).all()
        return {r[0]: BalanceView(r[1], r[2], cur) for r in rows}


def _payer_by_name(s: Session, name: str, team: bool) -> BillingAccount:
    if team:
        row = s.scalars(select(Team).where(Team.name == name)).first() if len(name) <= 64 else None
        if row is None:
            raise NotFound("team_not_found", f"no team named {name!r}; see `danlu admin team list`")
        return billing_account(s, row.billing_account_id)
    return personal_account(s, get_user_by_name(s, name).id)


def admin_topup(
    p: Platform, name: str, amount: str, key: str | None, *, team: bool = False
) -> tuple[BalanceView, bool]:
    """Top up user (or ``team``) ``name`` by ``amount`` (a decimal string). With the same ``key``
    for the same account and amount, a retry changes nothing and reports ``created=False``; the
    same key for another amount is a conflict. Keys are the account's own: another account's
    identical key is unrelated."""
    key = key or str(uuid.uuid4())
    if not 0 < len(key) <= 120:
        raise InvalidInput("invalid_idempotency_key", "idempotency keys are 1 to 120 characters")
    try:
        with p.db.write() as s:
            ba = _payer_by_name(s, name, team)
            minor = parse_amount(amount, currency(s), allow_zero=False)
            full_key = idempotency_key("topup", ba.id, key)
            existing = find_transaction(s, full_key)
            if existing is None:
                topup(s, ba, minor, full_key, p.clock.now_ms())
            else:
                _check_same_topup(s, existing, ba.id, minor)
            created, ba_id = existing is None, ba.id
    except Conflict as exc:
        if exc.code != "duplicate_transaction":
            raise
        with p.db.read() as s:  # lost a race with the same key: the other request recorded it
            ba_id = _payer_by_name(s, name, team).id
            existing = find_transaction(s, full_key)
            assert existing is not None
            _check_same_topup(s, existing, ba_id, minor)
        created = False
    with p.db.read() as s:
        return _balance_view(s, ba_id), created


def _check_same_topup(s: Session, tx: LedgerTransaction, billing_account_id: int, amount_minor: int) -> None:
    credited = s.execute(
        select(LedgerEntry.amount_minor).where(
            LedgerEntry.transaction_id == tx.id, LedgerEntry.account_id == cash_account(s, billing_account_id).id
        )
    ).scalar_one_or_none()
    if credited != amount_minor:
        raise Conflict(
            "idempotency_key_reused",
            "this Idempotency-Key was already used for a different top-up of this account; use a new key",
        )


def set_credit_limit(p: Platform, name: str, amount: str, *, team: bool = False) -> BalanceView:
    with p.db.write() as s:
        ba = _payer_by_name(s, name, team)
        ba.credit_limit_minor = parse_amount(amount, currency(s), field="credit limit")
        s.flush()
        return _balance_view(s, ba.id)


def set_price(p: Platform, gpu_model: str, price_per_hour: str, interruptible: str | None = None) -> Price:
    """Set the on-demand price per GPU-hour (and optionally the interruptible one). Running
    allocations keep the price they started at."""
    model = resolve_model(gpu_model).name
    now = p.clock.now_ms()
    with p.db.write() as s:
        cur = currency(s)
        minor = parse_amount(price_per_hour, cur, allow_zero=False, field="price per hour")
        spot = (
            parse_amount(interruptible, cur, allow_zero=False, field="interruptible price")
            if interruptible is not None
            else None
        )
        if spot is not None and spot > minor:
            raise InvalidInput(
                "invalid_interruptible_price", "the interruptible price must not exceed the on-demand price"
            )
        price = s.get(Price, model)
        if price is None:
            price = Price(gpu_model=model, price_per_hour_minor=minor, currency=cur, updated_at_ms=now)
            s.add(price)
        price.price_per_hour_minor, price.updated_at_ms = minor, now
        record_price(s, model, "on-demand", minor, cur, now)
        if interruptible is not None:
            price.interruptible_price_per_hour_minor = spot
            record_price(s, model, "interruptible", spot, cur, now)
        s.flush()
        return price


def statement(
    p: Platform, user: User, limit: int = 100, team: str | None = None, before: int | None = None
) -> list[dict[str, object]]:
    """The cash ledger entries of the caller's personal account (or ``team``'s), newest first;
    ``before``: only transactions older than that id (the cursor of the next page)."""
    with p.db.read() as s:
        acct = cash_account(
            s, teams.payer_named(s, user, team)
        )
        cur = currency(s)
        rows = s.execute(
            select(
                LedgerTransaction.id,
                LedgerTransaction.kind,
                LedgerTransaction.memo,
                LedgerTransaction.created_at_ms,
                LedgerEntry.amount_minor,
            )
            .join(LedgerEntry, LedgerEntry.transaction_id == LedgerTransaction.id)
            .where(LedgerEntry.account_id == acct.id, *([LedgerTransaction.id < before] if before else []))
            .order_by(LedgerTransaction.id.desc())
            .limit(limit)
        ).all()
        return [
            {"transaction_id": r[0], "kind": r[1], "memo": r[2], "at_ms": r[3], "amount": format_minor(r[4], cur)}
            for r in rows
        ]


def ledger_totals(p: Platform) -> tuple[int, int]:
    """(sum of all entries, number of transactions): the sum is zero in a healthy ledger."""
    with p.db.read() as s:
        total = s.execute(select(func.coalesce(func.sum(LedgerEntry.amount_minor), 0))).scalar_one()
        count = s.execute(select(func.count(LedgerTransaction.id))).scalar_one()
        return int(total), int(count)
