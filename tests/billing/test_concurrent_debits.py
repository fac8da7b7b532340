"""Two (or sixteen) concurrent debits never overdraw a balance: real threads, real databases."""

from __future__ import annotations

import threading

from danlu.accounts.service import create_user
from danlu.billing import service as billing
from danlu.billing.accounts import post, system_account, user_account
from danlu.billing.ledger import Posting
from danlu.context import Platform
from danlu.core.errors import InsufficientFunds


def test_concurrent_debits_never_overdraw(platform: Platform) -> None:
    with platform.db.write() as s:
        user, _ = create_user(s, "spender", 0)
        uid = user.id
    billing.admin_topup(platform, "spender", "1.00", "seed")  # 100 fen
    results: list[str] = []
    barrier = threading.Barrier(16)

    def debit(i: int) -> None:
        barrier.wait()
        try:
            with platform.db.write() as s:
                acct = user_account(s, uid)
                rev = system_account(s, "revenue")
                post(
                    s,
                    key=f"debit-{i}",
                    kind="usage",
                    memo="test",
                    now_ms=1,
                    postings=[Posting(acct.id, -30), Posting(rev.id, 30)],
                    floors={acct.id: 0},
                )
            results.append("ok")
        except InsufficientFunds:
            results.append("refused")

    threads = [threading.Thread(target=debit, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count("ok") == 3 and results.count("refused") == 13
    with platform.db.read() as s:
        assert user_account(s, uid).balance_minor == 10
    total, _ = billing.ledger_totals(platform)
    assert total == 0
