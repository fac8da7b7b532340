"""Money alerts for the event feed (docs/telemetry.md "Events"), run by the loop after each meter
pass: ``low_balance`` when a payer's money (vouchers, balance and credit) will run out within
``LOW_BALANCE_WARN_S`` at the current burn, and ``voucher_expiring`` a day before a voucher with
value left expires. Each is said once: a payer is warned again only after its money has lasted
more than twice the warning time (a top-up, a stop); a voucher once.

Both events name the billing account only, so a personal account's owner sees them and, for a
team, its owners and admins (danlu.notify.feed).
"""

from __future__ import annotations

from sqlalchemy import select

from danlu.accounts.payers import currency
from danlu.billing.metering import exhaustion_ms, open_allocations_by_account
from danlu.billing.vouchers import spendable_minor
from danlu.context import Platform
from danlu.core.clock import iso
from danlu.core.money import format_minor
from danlu.db.models import Account, BillingAccount, Event, VoucherCampaign, VoucherGrant

LOW_BALANCE_WARN_S = 3600
VOUCHER_WARN_S = 86_400


def run(p: Platform) -> tuple[int, int]:
    """Both alerts; returns (payers warned, vouchers warned)."""
    with p.db.read() as s:
        cur = currency(s)
    return low_balance(p, cur), vouchers_expiring(p, cur)


def low_balance(p: Platform, currency: str) -> int:
    """Warn each payer whose money runs out within the hour; returns how many were warned."""
    now = p.clock.now_ms()
    with p.db.read() as s:
        by_account = open_allocations_by_account(s)
        budgets = spendable_minor(s, list(by_account), now) if by_account else {}
        warned_now = {
            ba_id: warned
            for ba_id, warned in s.execute(
                select(BillingAccount.id, BillingAccount.low_balance_warned_at_ms).where(
                    BillingAccount.low_balance_warned_at_ms.is_not(None)
                )
            )
        }
    ends = {ba: exhaustion_ms(allocs, budgets.get(ba, 0), now) for ba, allocs in by_account.items()}
    warn = [ba for ba, end in ends.items() if end is not None and end - now <= LOW_BALANCE_WARN_S * 1000]
    lasting = [
        ba for ba in warned_now if (end := ends.get(ba)) is None or end - now > 2 * LOW_BALANCE_WARN_S * 1000
    ]
    sent = 0
    if not lasting and not [ba for ba in warn if ba not in warned_now]:
        return 0  # nothing to say or clear: no write transaction (the meter runs every few seconds)
    with p.db.write() as s:
        for ba_id in lasting:
            row = s.get(BillingAccount, ba_id, with_for_update=True)
            if row is not None:
                row.low_balance_warned_at_ms = None
        for ba_id in warn:
            row = s.get(BillingAccount, ba_id, with_for_update=True, populate_existing=True)
            if row is None or row.low_balance_warned_at_ms is not None:
                continue
            row.low_balance_warned_at_ms = now
            end = ends[ba_id]
            money = format_minor(max(0, budgets.get(ba_id, 0)), currency)
            s.add(
                Event(
                    billing_account_id=ba_id,
                    kind="low_balance",
                    message=f"{row.name}: {money} {currency} left (vouchers, balance and credit) runs out at about "
                    f"{iso(end)} at the current burn; ask the operator for a top up (`danlu balance` shows it) "
                    "or stop something, or running instances stop then",
                    at_ms=now,
                )
            )
            sent += 1
    return sent


def vouchers_expiring(p: Platform, currency: str) -> int:
    """Warn about each voucher with value left that expires within a day; returns how many."""
    now = p.clock.now_ms()
    with p.db.read() as s:
        due = s.execute(
            select(VoucherGrant.id).where(
                VoucherGrant.expired.is_(False),
                VoucherGrant.expiry_warned_at_ms.is_(None),
                VoucherGrant.expires_at_ms.is_not(None),
                VoucherGrant.expires_at_ms > now,
                VoucherGrant.expires_at_ms <= now + VOUCHER_WARN_S * 1000,
            )
        ).first()
    if due is None:
        return 0  # the usual case: no write transaction
    with p.db.write() as s:
        rows = s.execute(
            select(VoucherGrant, Account.balance_minor, VoucherCampaign.name)
            .join(Account, Account.id == VoucherGrant.account_id)
            .join(VoucherCampaign, VoucherCampaign.id == VoucherGrant.campaign_id)
            .where(
                VoucherGrant.expired.is_(False),
                VoucherGrant.expiry_warned_at_ms.is_(None),
                VoucherGrant.expires_at_ms.is_not(None),
                VoucherGrant.expires_at_ms > now,
                VoucherGrant.expires_at_ms <= now + VOUCHER_WARN_S * 1000,
            )
            .with_for_update(of=VoucherGrant)
        ).all()
        for grant, remaining, campaign in rows:
            grant.expiry_warned_at_ms = now
            if remaining <= 0:
                continue  # spent: nothing to lose
            s.add(
                Event(
                    billing_account_id=grant.billing_account_id,
                    kind="voucher_expiring",
                    message=f"voucher {grant.id} ({campaign}) has {format_minor(remaining, currency)} {currency} left "
                    f"and expires at {iso(grant.expires_at_ms)}; it pays for GPU time before your balance",
                    at_ms=now,
                )
            )
    return sum(1 for _, remaining, _ in rows if remaining > 0)
