"""Packages and reserved commitments: GPUs kept for one billing account for a prepaid term.

A hold (docs/billing.md "Packages and reservations") is bought in one transaction: the term on
sale (danlu.billing.terms), the price (danlu.billing.commitments, the one rater), the payer's
quota, hard caps and money checked, N GPUs on one host marked ``gpus.hold_id`` by the same guarded
UPDATE as a claim (so 20 accounts racing for the last GPU get exactly one hold), cash moved to
revenue, and a ``charges`` row that puts the purchase on the invoice.

While it lasts, a rental of that model by the account (running or started again after a stop)
runs on the held GPUs at no further charge (plan ``held``, price 0: usage is still recorded by the
second), and nobody else can claim them. At its end (``expire_due``, each control-loop pass) or an
early cancellation, an instance still running on it stops or runs on at the on-demand price from
exactly the end, as the buyer chose, and the GPUs are free again. Cancelling needs a quote
(``cancel_quote``, valid :data:`QUOTE_TTL_MS`) that says what comes back; the cancellation then
happens at its own moment and never gives back more than quoted.

Lock order, as elsewhere: instance rows, then the payer's cash row, then the hold row.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from danlu.accounts import policies, teams
from danlu.accounts.payers import billing_account, currency, personal_account, top_up_hint, whose_balance
from danlu.billing import commitments
from danlu.billing.accounts import cash_account, lock_billing_account, post, system_account
from danlu.billing.caps import announce, spent_minor, zone
from danlu.billing.ledger import Posting
from danlu.billing.price_plans import held_plan, plan_for_usage
from danlu.billing.terms import TermView, current_terms, offered, view
from danlu.catalog.gpu_models import resolve_model
from danlu.compute import allocations, instances
from danlu.compute.hold_ends import after_commit, end_hold, lock_instances_on
from danlu.compute.lifecycle import HOLD, HoldState
from danlu.compute.quotas import check_member_quota, check_quota
from danlu.compute.runs import check_may_run
from danlu.compute.views import InstanceView
from danlu.context import Platform
from danlu.core.clock import iso
from danlu.core.errors import Conflict, Forbidden, InsufficientFunds, InvalidInput, NoCapacity, NotFound
from danlu.core.money import format_minor, parse_amount
from danlu.db.models import (
    AllocationRow,
    BillingAccount,
    Budget,
    ChargeRow,
    Gpu,
    Hold,
    HoldQuote,
    HostRow,
    Instance,
    PlanTerm,
    Price,
    PricePlan,
    User,
)

log = logging.getLogger(__name__)
QUOTE_TTL_MS = 10 * 60_000
MAX_HOLD_GPUS = 1024


@dataclass(frozen=True)
class PurchaseQuote:
    term: str
    kind: str
    label: str
    gpu_model: str
    gpu_count: int
    seconds: int
    price_per_hour_minor: int  # on demand, per GPU-hour
    list_minor: int  # the term at the on-demand price
    discount_bp: int
    amount_minor: int  # what buying it costs now
    cancel_fee_bp: int
    rule: str
    starts_at_ms: int
    ends_at_ms: int
    free: int
    currency: str


@dataclass(frozen=True)
class HoldView:
    id: str
    term: str
    kind: str
    account: str
    gpu_model: str
    gpu_count: int
    host: str
    state: str
    on_expiry: str
    starts_at_ms: int
    ends_at_ms: int
    ended_at_ms: int | None
    price_per_hour_minor: int
    discount_bp: int
    cancel_fee_bp: int
    paid_minor: int
    refunded_minor: int
    rule: str
    currency: str
    instance_id: str | None
    in_use_by: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CancelQuote:
    quote_id: str
    hold_id: str
    kind: str
    elapsed_s: int
    paid_minor: int
    used_minor: int
    unused_minor: int
    kept_minor: int  # the fee (package) or the claw-back (reserved)
    refund_minor: int
    rule: str
    consequences: list[str]
    expires_at_ms: int
    currency: str


# --- reading ------------------------------------------------------------------------------------


def _view(s: Session, h: Hold) -> HoldView:
    t = commitments.term(h.term)
    in_use = sorted(
        s.scalars(
            select(AllocationRow.instance_id).where(AllocationRow.hold_id == h.id, AllocationRow.ended_at_ms.is_(None))
        )
    )
    refunded = s.execute(
        select(ChargeRow.amount_minor).where(ChargeRow.hold_id == h.id, ChargeRow.kind == "refund")
    ).scalar_one_or_none()
    host = s.get(HostRow, h.host_id)
    return HoldView(
        id=h.id,
        term=h.term,
        kind=t.kind,
        account=billing_account(s, h.billing_account_id).name,
        gpu_model=h.gpu_model,
        gpu_count=h.gpu_count,
        host=host.name if host is not None else "",
        state=h.state,
        on_expiry=h.on_expiry,
        starts_at_ms=h.starts_at_ms,
        ends_at_ms=h.ends_at_ms,
        ended_at_ms=h.ended_at_ms,
        price_per_hour_minor=h.price_per_hour_minor,
        discount_bp=h.discount_bp,
        cancel_fee_bp=h.cancel_fee_bp,
        paid_minor=h.paid_minor,
        refunded_minor=-(refunded or 0),
        rule=commitments.rule_text(t, h.cancel_fee_bp),
        currency=currency(s),
        instance_id=h.instance_id,
        in_use_by=list(in_use),
    )


def _visible(s: Session, user: User, hold_id: str, *, for_update: bool = False) -> Hold:
    h = s.get(Hold, hold_id, with_for_update=for_update, populate_existing=for_update)
    if h is None or not policies.may_see(s, user, h.user_id, h.billing_account_id):
        raise NotFound("hold_not_found", f"no hold {hold_id}; list yours with `danlu holds`")
    return h


def list_holds(p: Platform, user: User, team: str | None = None) -> list[HoldView]:
    """The payer's holds (``team``'s, or the default team's, or personal), newest first."""
    with p.db.read() as s:
        payer = teams.resolve_payer(s, user, team, spend=False)
        rows = s.scalars(
            select(Hold).where(Hold.billing_account_id == payer).order_by(Hold.created_at_ms.desc(), Hold.id)
        )
        return [_view(s, h) for h in rows]


def show_hold(p: Platform, user: User, hold_id: str) -> HoldView:
    with p.db.read() as s:
        return _view(s, _visible(s, user, hold_id))


# --- buying -------------------------------------------------------------------------------------


def _check_count(count: int) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= MAX_HOLD_GPUS:
        raise InvalidInput("invalid_gpu_count", f"--count must be a whole number of GPUs, from 1 to {MAX_HOLD_GPUS}")
    return count


def _price(s: Session, term_name: str, gpu_model: str, count: int, now_ms: int) -> PurchaseQuote:
    return _priced(s, term_name, gpu_model, count, now_ms)[0]


def _priced(
    s: Session, term_name: str, gpu_model: str, count: int, now_ms: int
) -> tuple[PurchaseQuote, PlanTerm, PricePlan]:
    """The quote, with the term and price rows it was worked out from (a purchase stores those)."""
    t, row = offered(s, term_name)
    model = resolve_model(gpu_model).name
    plan = plan_for_usage(s, model, "on-demand")
    free, total, per_host = allocations.capacity(s, model)
    if total == 0:
        raise NoCapacity("model_not_offered", f"this platform has no {model} GPUs; see `danlu offers`")
    if count > per_host:
        raise InvalidInput(
            "count_exceeds_host", f"at most {per_host} {model} GPUs fit on one host; hold {per_host} or fewer"
        )
    q = PurchaseQuote(
        term=t.name,
        kind=t.kind,
        label=t.label,
        gpu_model=model,
        gpu_count=count,
        seconds=t.seconds,
        price_per_hour_minor=plan.price_per_hour_minor,
        list_minor=commitments.list_price(plan.price_per_hour_minor, count, t.seconds),
        discount_bp=row.discount_bp,
        amount_minor=commitments.hold_price(plan.price_per_hour_minor, count, t.seconds, row.discount_bp),
        cancel_fee_bp=row.cancel_fee_bp,
        rule=view(row).rule,
        starts_at_ms=now_ms,
        ends_at_ms=now_ms + t.seconds * 1000,
        free=free,
        currency=plan.currency,
    )
    return q, row, plan


def quote(
    p: Platform, user: User, term_name: str, gpu_model: str, count: int, team: str | None = None
) -> PurchaseQuote:
    """What buying would cost now and the rule for cancelling it; changes nothing."""
    _check_count(count)
    with p.db.read() as s:
        teams.resolve_payer(s, user, team, spend=True)
        return _price(s, term_name, gpu_model, count, p.clock.now_ms())


def buy(
    p: Platform,
    user: User,
    term_name: str,
    gpu_model: str,
    count: int,
    on_expiry: str = "stop",
    team: str | None = None,
    expected_price: str | None = None,
) -> HoldView:
    """Buy a hold; with ``expected_price`` (the price the buyer was shown) only at that price."""
    _check_count(count)
    commitments.check_on_expiry(on_expiry)
    with p.db.write() as s:
        payer = teams.resolve_payer(s, user, team, spend=True)
        now = p.clock.now_ms()
        h = buy_in(p, s, user, payer, term_name, gpu_model, count, on_expiry, now, None, expected_price)
        return _view(s, h)


def _check_caps(s: Session, payer: int, user_id: int, amount: int, now_ms: int) -> None:
    """A purchase that would take the account or the buyer past a hard cap is refused whole."""
    tz = zone(s)
    for b in s.scalars(select(Budget).where(Budget.billing_account_id == payer, Budget.hard_minor.is_not(None))):
        if b.scope not in ("account", f"member:{user_id}"):
            continue
        spent, cap = spent_minor(s, b, now_ms, tz), int(b.hard_minor or 0)
        if spent + amount > cap:
            cur = currency(s)
            raise Conflict(
                "budget_cap_reached",
                f"this costs {format_minor(amount, cur)} {cur} and the hard cap ({b.scope}) of "
                f"{format_minor(cap, cur)} has {format_minor(max(0, cap - spent), cur)} left; "
                "raise the cap (`danlu budget set`) or buy less",
            )


def buy_in(
    p: Platform,
    s: Session,
    user: User,
    payer: int,
    term_name: str,
    gpu_model: str,
    count: int,
    on_expiry: str,
    now_ms: int,
    instance_id: str | None = None,
    expected_price: str | None = None,
) -> Hold:
    """Buy a hold inside the caller's transaction (``rent --package package-week`` buys and rents in
    one). ``expected_price``: the price the buyer confirmed; any other is refused (409)."""
    check_may_run(p, user)  # a suspended renter buys nothing; nor does anyone but the operator without a sandbox
    commitments.check_on_expiry(on_expiry)
    q, row, plan = _priced(s, term_name, gpu_model, _check_count(count), now_ms)
    t = commitments.term(q.term)
    cur = q.currency
    expected_minor = None if expected_price is None else parse_amount(expected_price, cur, field="expected price")
    if expected_minor is not None and expected_minor != q.amount_minor:
        raise Conflict(
            "price_changed",
            f"{t.name} of {count}x {q.gpu_model} now costs {format_minor(q.amount_minor, cur)} {cur}, not the "
            f"{format_minor(expected_minor, cur)} you confirmed; look again (`danlu plans`) and confirm the new price",
        )
    account = _check_can_pay(s, user, payer, q, t, count, now_ms)
    hold_id = "h-" + secrets.token_hex(5)
    host_id, _gpus = allocations.hold(s, q.gpu_model, count, hold_id)
    held_plan(s, q.gpu_model, cur, now_ms)  # the row rentals on it are recorded at
    h = Hold(
        id=hold_id,
        billing_account_id=payer,
        user_id=user.id,
        term=t.name,
        plan_term_id=row.id,
        gpu_model=q.gpu_model,
        gpu_count=count,
        host_id=host_id,
        price_plan_id=plan.id,
        price_per_hour_minor=plan.price_per_hour_minor,
        discount_bp=row.discount_bp,
        cancel_fee_bp=row.cancel_fee_bp,
        paid_minor=q.amount_minor,
        on_expiry=on_expiry,
        state=HOLD.initial,
        instance_id=instance_id,
        starts_at_ms=now_ms,
        ends_at_ms=now_ms + t.seconds * 1000,
        created_at_ms=now_ms,
    )
    s.add(h)
    s.flush()
    _post_purchase(s, h, q, t, account, now_ms)
    announce(s, payer, now_ms)  # soft budget thresholds count purchases too
    return h


def _check_can_pay(
    s: Session, user: User, payer: int, q: PurchaseQuote, t: commitments.Term, count: int, now_ms: int
) -> BillingAccount:
    """Lock the buyer's and the payer's accounts (the rentals' order) and check quotas, hard caps and the
    money; returns the payer's account."""
    cur = q.currency
    personal = personal_account(s, user.id).id
    balance = lock_billing_account(s, personal)
    if payer != personal:
        balance = lock_billing_account(s, payer)
    check_quota(s, user.id, count)
    check_member_quota(s, payer, user.id, count)
    _check_caps(s, payer, user.id, q.amount_minor, now_ms)
    account = billing_account(s, payer)
    if balance - q.amount_minor < -account.credit_limit_minor:
        raise InsufficientFunds(
            "insufficient_funds",
            f"{t.label} of {count}x {q.gpu_model} costs {format_minor(q.amount_minor, cur)} {cur} and "
            f"{whose_balance(account)} is {format_minor(balance, cur)} {cur}; {top_up_hint(account)} "
            "(vouchers pay for usage, not for packages)",
        )
    return account


def _post_purchase(
    s: Session, h: Hold, q: PurchaseQuote, t: commitments.Term, account: BillingAccount, now_ms: int
) -> None:
    """The purchase in the ledger (cash to revenue, balancing to zero) and as a charge line of the invoice."""
    cash = cash_account(s, account.id)
    tx = post(
        s,
        key=f"hold:{h.id}:purchase",
        kind="hold",
        memo=f"{t.name} of {h.gpu_count}x {q.gpu_model} ({h.id})",
        postings=[Posting(cash.id, -q.amount_minor), Posting(system_account(s, "revenue").id, q.amount_minor)],
        now_ms=now_ms,
        floors={cash.id: -account.credit_limit_minor},
    )
    s.add(
        ChargeRow(
            billing_account_id=account.id,
            user_id=h.user_id,
            hold_id=h.id,
            kind="purchase",
            plan=t.name,
            description=f"{t.name} ({t.label}) of {h.gpu_count} x {q.gpu_model}, hold {h.id}, "
            f"{iso(h.starts_at_ms)} to {iso(h.ends_at_ms)}",
            at_ms=now_ms,
            seconds=t.seconds,
            price_per_hour_minor=q.price_per_hour_minor,
            gross_minor=q.list_minor,
            discount_minor=q.list_minor - q.amount_minor,
            amount_minor=q.amount_minor,
            transaction_id=tx.id,
        )
    )
    s.flush()


# --- ending -------------------------------------------------------------------------------------


def _cancellation(h: Hold, now_ms: int) -> commitments.Cancellation:
    t = commitments.term(h.term)
    elapsed = (max(now_ms, h.starts_at_ms) - h.starts_at_ms) // 1000
    return commitments.cancellation(
        t, h.price_per_hour_minor, h.gpu_count, h.discount_bp, h.cancel_fee_bp, h.paid_minor, elapsed
    )


def _check_may_cancel(s: Session, user: User, h: Hold, now_ms: int) -> None:
    """Cancelling stops what runs on the hold and moves money: its buyer, or the team's owners and
    admins (as stopping another member's instance needs), and never a viewer."""
    spender = policies.may_spend(s, user, h.billing_account_id)
    if not spender or not policies.may_manage(s, user, h.user_id, h.billing_account_id):
        raise Forbidden("team_role_required", "only the hold's buyer or the team's owners and admins may cancel it")
    if h.state != HoldState.ACTIVE:
        raise Conflict("hold_not_active", f"hold {h.id} is {h.state}; there is nothing to cancel")
    if now_ms >= h.ends_at_ms:  # over, and the loop is about to end it at exactly its end
        raise Conflict("hold_not_active", f"hold {h.id} ended at {iso(h.ends_at_ms)}; there is nothing to cancel")


def cancel_quote(p: Platform, user: User, hold_id: str) -> CancelQuote:
    """What cancelling ``hold_id`` now gives back (stored: the cancel call must name it)."""
    with p.db.write() as s:
        h = _visible(s, user, hold_id)
        now = p.clock.now_ms()
        _check_may_cancel(s, user, h, now)
        c = _cancellation(h, now)
        q = HoldQuote(
            id="q-" + secrets.token_hex(12),
            hold_id=h.id,
            user_id=user.id,
            refund_minor=c.refund_minor,
            kept_minor=c.kept_minor,
            created_at_ms=now,
            expires_at_ms=now + QUOTE_TTL_MS,
        )
        s.add(q)
        then = "run on at the on-demand price" if h.on_expiry == "on-demand" else "be stopped"
        consequences = [
            f"{inst} will {then}"
            for inst in s.scalars(
                select(AllocationRow.instance_id).where(
                    AllocationRow.hold_id == h.id, AllocationRow.ended_at_ms.is_(None)
                )
            )
        ]
        consequences.append(f"the {h.gpu_count} held {h.gpu_model} GPU(s) go back to the pool")
        t = commitments.term(h.term)
        return CancelQuote(
            quote_id=q.id,
            hold_id=h.id,
            kind=t.kind,
            elapsed_s=c.elapsed_s,
            paid_minor=h.paid_minor,
            used_minor=c.used_minor,
            unused_minor=c.unused_minor,
            kept_minor=c.kept_minor,
            refund_minor=c.refund_minor,
            rule=commitments.rule_text(t, h.cancel_fee_bp),
            consequences=consequences,
            expires_at_ms=q.expires_at_ms,
            currency=currency(s),
        )


def cancel(p: Platform, user: User, hold_id: str, quote_id: str) -> HoldView:
    """Cancel ``hold_id`` now, as quoted by ``quote_id`` (unexpired, the caller's, this hold's): the
    refund is worked out at this moment, so it is at most the quoted one."""
    with p.db.write() as s:
        h = _visible(s, user, hold_id)
        q = s.get(HoldQuote, quote_id)
        if q is None or q.hold_id != h.id or q.user_id != user.id:
            raise NotFound("quote_not_found", f"no quote {quote_id} for {hold_id}; get one with `danlu hold cancel`")
        now = p.clock.now_ms()
        if now >= q.expires_at_ms:
            raise Conflict("quote_expired", "that quote has expired (they last 10 minutes); ask for a new one")
        locked = lock_instances_on(s, h.id)
        lock_billing_account(s, h.billing_account_id)
        h = _visible(s, user, hold_id, for_update=True)
        # Never earlier than the quote: a clock that stepped back must not give more than quoted.
        now = max(p.clock.now_ms(), q.created_at_ms)
        _check_may_cancel(s, user, h, now)
        c = _cancellation(h, now)
        why = f"{h.term} hold {h.id} cancelled early by {user.name}"
        ended = end_hold(p, s, h, now, HoldState.CANCELLED, why, locked)
        cash = cash_account(s, h.billing_account_id)
        t = commitments.term(h.term)
        tx = post(
            s,
            key=f"hold:{h.id}:refund",
            kind="refund",
            memo=f"refund of {h.term} hold {h.id}",
            postings=[Posting(system_account(s, "revenue").id, -c.refund_minor), Posting(cash.id, c.refund_minor)],
            now_ms=now,
        )
        cur = currency(s)
        kept = "fee" if t.kind == "package" else "discount clawed back"
        s.add(
            ChargeRow(
                billing_account_id=h.billing_account_id,
                user_id=h.user_id,  # the buyer's: a member budget never gains from cancelling another's hold
                hold_id=h.id,
                kind="refund",
                plan=h.term,
                description=f"refund of {h.term} hold {h.id}, cancelled by {user.name} at {iso(now)} after "
                f"{c.elapsed_s} s: unused {format_minor(c.unused_minor, cur)} "
                f"less {kept} {format_minor(c.kept_minor, cur)}",
                at_ms=now,
                seconds=-(t.seconds - c.elapsed_s),
                price_per_hour_minor=h.price_per_hour_minor,
                gross_minor=-c.refund_minor,
                discount_minor=0,
                amount_minor=-c.refund_minor,
                transaction_id=tx.id,
            )
        )
        s.flush()
        out = _view(s, h)
    after_commit(p, ended)
    return out


def list_plans(p: Platform) -> tuple[str, list[tuple[TermView, dict[str, int]]]]:
    """The terms on sale with what one GPU of each priced model here costs for the whole term."""
    with p.db.read() as s:
        models = set(s.scalars(select(Gpu.model).where(Gpu.present.is_(True)).distinct()))
        prices = {
            row.gpu_model: row.price_per_hour_minor
            for row in s.scalars(select(Price).where(Price.gpu_model.in_(models)).order_by(Price.gpu_model))
        }
        out = []
        for row in current_terms(s).values():
            v = view(row)
            out.append((v, {m: commitments.hold_price(pr, 1, v.seconds, v.discount_bp) for m, pr in prices.items()}))
        return currency(s), out


def rent_on_new_hold(
    p: Platform,
    user: User,
    term_name: str,
    on_expiry: str,
    gpu_model: str,
    gpu_count: int,
    command: list[str],
    expected_price: str | None = None,
    **rent_args: Any,
) -> InstanceView:
    """``rent --package TERM``: buy a hold of exactly the rental's GPUs (at ``expected_price`` if
    given) and run the rental on that hold, in one transaction (either both happen or neither)."""
    commitments.check_on_expiry(on_expiry)
    if rent_args.get("interruptible"):
        raise InvalidInput("invalid_plan", "a package or reservation keeps its GPUs; it cannot also be interruptible")

    def buy_first(s: Session, inst: Instance, now_ms: int) -> Hold:
        ba, n = inst.billing_account_id, inst.gpu_count
        return buy_in(p, s, user, ba, term_name, inst.gpu_model, n, on_expiry, now_ms, inst.id, expected_price)

    return instances.rent(p, user, gpu_model, gpu_count, command, before_claim=buy_first, **rent_args)
