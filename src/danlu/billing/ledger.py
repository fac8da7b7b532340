"""Double-entry rules, pure. A transaction is a list of postings whose amounts sum to zero.

Sign convention: a posting adds ``amount_minor`` to its account's balance. A top-up moves money
from the ``external`` account (which goes negative: money that came from outside) to a user; usage
moves money from the user to ``revenue``. Every balance is the sum of its account's entries.
"""

from __future__ import annotations

from dataclasses import dataclass


class UnbalancedTransaction(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Posting:
    account_id: int
    amount_minor: int


def transfer(from_account: int, to_account: int, amount_minor: int) -> list[Posting]:
    """Postings that move ``amount_minor`` (> 0) from one account to another."""
    if amount_minor <= 0:
        raise ValueError("a transfer moves a positive amount")
    return [Posting(from_account, -amount_minor), Posting(to_account, amount_minor)]


def check_balanced(postings: list[Posting]) -> None:
    if not postings:
        raise UnbalancedTransaction("a transaction needs postings")
    total = sum(p.amount_minor for p in postings)
    if total != 0:
        raise UnbalancedTransaction(f"postings sum to {total}, not zero")
