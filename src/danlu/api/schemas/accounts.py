"""A person's account: ledger lines, balances, users and their tokens."""

from __future__ import annotations

from pydantic import BaseModel, Field

from danlu.api.schemas.common import Reason, Strict, UserName


class LedgerLineOut(BaseModel):
    transaction_id: int = Field(description="the next page is `?before=` the last line's transaction_id")
    kind: str
    memo: str
    at_ms: int
    amount: str


class BalanceOut(BaseModel):
    balance: str
    credit_limit: str
    currency: str


class UserCreate(Strict):
    name: UserName


class UserOut(BaseModel):
    name: str
    token: str | None = None
    is_admin: bool = False
    suspended_reason: str | None = None
    sandbox_uid: int | None = None


class ReasonIn(Strict):
    reason: Reason


class TokenOut(BaseModel):
    name: str
    token: str | None
