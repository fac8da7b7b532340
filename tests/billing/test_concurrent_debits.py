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


def test_stops_racing_meter_passes_never_deadlock(platform: Platform) -> None:
    """A stop (user account, then revenue) racing meter passes: every stop succeeds, the books
    balance. On PostgreSQL this deadlocked while one meter transaction spanned all users."""
    import threading

    from danlu.compute import instances
    from danlu.compute.reconcile import meter_all
    from tests.fakes import RecordingBackend

    platform.backend = RecordingBackend()
    billing.set_price(platform, "T4", "36.00")
    billing.set_price(platform, "A100-80GB", "36.00")
    users = []
    for i in range(4):
        with platform.db.write() as s:
            user, _ = create_user(s, f"racer{i}", 0)
            s.expunge(user)
        billing.admin_topup(platform, f"racer{i}", "100.00", f"seed{i}")
        users.append(user)
    rented = [
        (u, instances.rent(platform, u, "T4" if i % 2 else "A100-80GB", 1, ["x"]).id) for i, u in enumerate(users)
    ]
    clock = platform.clock
    done = threading.Event()
    errors: list[BaseException] = []

    def meter_loop() -> None:
        while not done.is_set():
            clock.advance(seconds=1)  # type: ignore[attr-defined]
            try:
                meter_all(platform)
            except BaseException as exc:
                errors.append(exc)

    def stopper(user: object, iid: str) -> None:
        try:
            instances.stop(platform, user, iid)  # type: ignore[arg-type]
        except BaseException as exc:
            errors.append(exc)

    meter = threading.Thread(target=meter_loop)
    meter.start()
    stops = [threading.Thread(target=stopper, args=pair) for pair in rented]
    for t in stops:
        t.start()
    for t in stops:
        t.join()
    done.set()
    meter.join()
    assert errors == []
    total, _ = billing.ledger_totals(platform)
    assert total == 0


def test_twenty_debits_of_ten_on_a_team_balance_of_a_hundred_take_exactly_ten(platform: Platform) -> None:
    """Issue 9: a team's shared balance under concurrent spenders — exactly ten of twenty succeed."""
    from danlu.accounts import teams
    from danlu.accounts.payers import personal_account
    from danlu.billing.accounts import cash_account

    with platform.db.write() as s:
        owner, _ = create_user(s, "teamowner", 0)
    view = teams.create_team(platform, owner, "lab")
    billing.admin_topup(platform, view.name, "1.00", "seed", team=True)  # 100 fen
    with platform.db.read() as s:
        ba_id = teams.resolve_payer(s, owner, "lab", spend=True)
        assert ba_id != personal_account(s, owner.id).id
    results: list[str] = []
    barrier = threading.Barrier(20)

    def debit(i: int) -> None:
        barrier.wait()
        try:
            with platform.db.write() as s:
                acct = cash_account(s, ba_id)
                rev = system_account(s, "revenue")
                post(
                    s,
                    key=f"team-debit-{i}",
                    kind="usage",
                    memo="test",
                    now_ms=1,
                    postings=[Posting(acct.id, -10), Posting(rev.id, 10)],
                    floors={acct.id: 0},
                )
            results.append("ok")
        except InsufficientFunds:
            results.append("refused")

    threads = [threading.Thread(target=debit, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count("ok") == 10 and results.count("refused") == 10
    with platform.db.read() as s:
        assert cash_account(s, ba_id).balance_minor == 0
    assert billing.ledger_totals(platform)[0] == 0
