"""Opening a rental's allocation (from danlu.compute.instances, issue 27: one place for each decision): the
price row of its plan, the payer's locks, a package or reservation of theirs to run on, the quotas, the balance
and vouchers covering ``min_prepaid_seconds``, the hard budget caps, and the GPUs claimed and bound. Used by
rentals, starts and the job scheduler's runs (danlu.scheduling.live)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from danlu.accounts.payers import billing_account, currency, personal_account, top_up_hint, whose_balance
from danlu.billing import posting, tariffs
from danlu.billing.accounts import cash_account, lock_billing_account
from danlu.billing.caps import covers, hard_caps
from danlu.billing.metering import usable_vouchers, voucher_slots
from danlu.billing.price_plans import held_plan, plan_for_usage
from danlu.billing.pricing import Plan
from danlu.billing.rating import Rate, cumulative_cost
from danlu.billing.student import allocation_discount_bp
from danlu.compute import allocations
from danlu.compute.quotas import check_member_quota, check_quota
from danlu.context import Platform
from danlu.core.errors import Conflict, InsufficientFunds, InvalidInput, NoCapacity
from danlu.core.money import format_minor
from danlu.db.models import AllocationRow, Gpu, Hold, Instance, Price


def plan_price(session: Session, gpu_model: str, plan: str) -> Price:
    """The price row for a model, checked to offer ``plan``; says what the operator must do if not."""
    price = session.get(Price, gpu_model)
    if price is None:
        raise InvalidInput(
            "no_price",
            f"{gpu_model} has no price yet; the operator sets one with `danlu admin price set {gpu_model} PRICE`",
        )
    if plan == "interruptible" and price.interruptible_price_per_hour_minor is None:
        raise InvalidInput(
            "no_interruptible_price",
            f"{gpu_model} is not offered as interruptible; the operator sets that price with "
            f"`danlu admin price set {gpu_model} PRICE --interruptible SPOT_PRICE`",
        )
    return price


def new_allocation(s: Session, inst: Instance, plan: str, now_ms: int, *, hold: Hold | None = None) -> AllocationRow:
    """An open allocation for ``inst`` starting now at the current price plan of ``plan``, with the
    payer's discount, flushed so it has an id (GPUs not yet bound). On a ``hold``'s GPUs it is
    plan ``held`` at price 0: the hold was prepaid."""
    if hold is not None:
        row = held_plan(s, inst.gpu_model, currency(s), now_ms)
        plan = row.kind
    else:
        row = plan_for_usage(s, inst.gpu_model, plan)
    alloc = AllocationRow(
        instance_id=inst.id,
        user_id=inst.user_id,
        billing_account_id=inst.billing_account_id,
        host_id=None,
        gpu_model=inst.gpu_model,
        gpu_count=inst.gpu_count,
        gpu_indices="",
        plan=plan,
        price_plan_id=row.id,
        price_per_hour_minor=row.price_per_hour_minor,
        discount_bp=0 if hold is not None else allocation_discount_bp(s, inst.billing_account_id),
        tariffs_json="" if hold is not None else tariffs.snapshot(s, plan, now_ms),
        currency=row.currency,
        hold_id=hold.id if hold is not None else None,
        started_at_ms=now_ms,
        ended_at_ms=None,
        billed_until_ms=now_ms,
        billed_minor=0,
        settled=False,
    )
    s.add(alloc)
    s.flush()
    return alloc


def open_allocation(
    p: Platform,
    session: Session,
    inst: Instance,
    now_ms: int,
    *,
    plan: str = "on-demand",
    host_id: int | None = None,
    hold: Hold | None = None,
    parts: Sequence[tuple[int, int]] = (),
) -> AllocationRow:
    """Claim GPUs for ``inst`` at the current price of ``plan``, after checking that what the payer
    can spend (vouchers in scope, balance and credit limit) covers ``min_prepaid_seconds`` of it;
    on ``hold``'s GPUs (or else on an idle hold of the payer's for the model, if any) at no cost."""
    # Lock order: the renter's personal account (serialises the person's claims, so quota checks
    # hold across the accounts they rent on), then the payer's if it is another (a team's).
    personal = personal_account(session, inst.user_id).id
    lock_billing_account(session, personal)
    if inst.billing_account_id != personal:
        lock_billing_account(session, inst.billing_account_id)
    if hold is None and inst.job_id is None and plan == "on-demand":  # the payer's package or reservation first
        hold = allocations.usable_hold(session, inst.billing_account_id, inst.gpu_model, inst.gpu_count, now_ms)
    if hold is not None:
        return _open_on_hold(session, inst, hold, now_ms)
    if inst.job_id is None:  # job runs are kept within quota by the scheduler
        check_quota(session, inst.user_id, inst.gpu_count)
        check_member_quota(session, inst.billing_account_id, inst.user_id, inst.gpu_count)
    if allocations.capacity(session, inst.gpu_model)[1] == 0:
        raise NoCapacity("model_not_offered", f"this platform has no {inst.gpu_model} GPUs; see `danlu offers`")
    price = plan_price(session, inst.gpu_model, plan)
    row = plan_for_usage(session, inst.gpu_model, plan)
    cash = cash_account(session, inst.billing_account_id).balance_minor
    payer = billing_account(session, inst.billing_account_id)
    credit_limit = payer.credit_limit_minor
    needed = cumulative_cost(
        Rate(
            row.price_per_hour_minor,
            inst.gpu_count,
            now_ms,
            Plan(plan),
            # the tariffs it will be rated with (a cheaper window in force asked for the list price before)
            tariffs=tariffs.parse_snapshot(tariffs.snapshot(session, plan, now_ms)),
            discount_bp=allocation_discount_bp(session, inst.billing_account_id),
        ),
        p.settings.min_prepaid_seconds,
    )
    slots = voucher_slots(usable_vouchers(session, inst.billing_account_id, now_ms))
    cash_needed = posting.split([posting.Charge(0, inst.gpu_model, plan, max(needed, 1))], slots).cash_minor
    if cash_needed > 0 and cash + credit_limit < cash_needed:
        cur = price.currency
        raise InsufficientFunds(
            "insufficient_funds",
            f"{whose_balance(payer)} {format_minor(cash, cur)} {cur} (and vouchers) does not cover "
            f"{p.settings.min_prepaid_seconds} s of {inst.gpu_count}× {inst.gpu_model} "
            f"({format_minor(needed, cur)} {cur}); {top_up_hint(payer)}",
        )
    if inst.job_id is None:
        _check_hard_caps(session, inst, now_ms, max(needed, 1))
    alloc = new_allocation(session, inst, plan, now_ms)
    if parts:  # a gang over several hosts (a job on a backend that spans hosts): each part claimed, all or none
        claimed = [allocations.claim(session, inst.gpu_model, n, alloc.id, host_id=h) for h, n in parts]
        _bind(session, inst, alloc, claimed[0][0], [g for _, gpus in claimed for g in gpus])
        return alloc
    _bind(session, inst, alloc, *allocations.claim(session, inst.gpu_model, inst.gpu_count, alloc.id, host_id=host_id))
    return alloc


def _check_hard_caps(session: Session, inst: Instance, now_ms: int, needed: int) -> None:
    """A rental under a hard cap that covers it (the payer's, the renter's or this instance's) needs room for
    the same ``min_prepaid_seconds`` as the balance (``needed``): the meter only runs every interval, so a
    rental with less room would run past the cap, unpaid, until the next pass stopped it (rent and start
    were accepted at a spent cap and killed seconds later, until issue 11's last stop)."""
    for budget, left in hard_caps(session, inst.billing_account_id, now_ms):
        if covers(budget, inst.user_id, inst.id) and left < needed:
            cur = currency(session)
            what = {"account": "the account's", "member": "your"}.get(budget.scope.partition(":")[0], "this instance's")
            raise Conflict(
                "budget_cap_reached",
                f"{what} hard budget cap of {format_minor(int(budget.hard_minor or 0), cur)} {cur} has "
                f"{format_minor(left, cur)} {cur} left, less than the {format_minor(needed, cur)} {cur} a rental "
                "must be covered for; raise it (`danlu budget set --hard …`) or wait for the next period",
            )


def _open_on_hold(session: Session, inst: Instance, hold: Hold, now_ms: int) -> AllocationRow:
    """Run ``inst`` on idle GPUs its payer's ``hold`` keeps: nothing more to pay (the hold was
    prepaid). The buyer's own held GPUs already count against their quotas; anyone else's use of
    a team's hold counts against theirs."""
    if hold.user_id != inst.user_id:
        check_quota(session, inst.user_id, inst.gpu_count)
        check_member_quota(session, inst.billing_account_id, inst.user_id, inst.gpu_count)
    alloc = new_allocation(session, inst, "on-demand", now_ms, hold=hold)
    _bind(session, inst, alloc, *allocations.claim(session, inst.gpu_model, inst.gpu_count, alloc.id, hold_id=hold.id))
    return alloc


def _bind(session: Session, inst: Instance, alloc: AllocationRow, host_id: int, gpus: list[Gpu]) -> None:
    alloc.host_id = host_id
    alloc.gpu_indices = ",".join(str(g.idx) for g in gpus)
    inst.host_id = host_id
    inst.current_allocation_id = alloc.id
