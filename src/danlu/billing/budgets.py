"""Budgets and caps per billing account, per member on a team's account, and per instance.

* **Spent** is what was charged (vouchers and cash, after discounts) for usage in the scope: this
  calendar month (deployment time zone) for a monthly budget, ever for a total one.
* **Soft limit**: events at 50 %, 80 % and 100 % of it, each once per period.
* **Hard cap**: the meter bills the scope's allocations exactly up to the instant the cap is
  reached (the same cumulative rater and binary search as for an exhausted balance) and ends them
  there; the control loop then stops the instances with the preemption notice (SIGTERM and the
  deadline file). Nothing is ever charged beyond a hard cap: the notice period is not billed.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from danlu.accounts import policies, teams
from danlu.accounts.payers import currency
from danlu.accounts.service import get_user_by_name
from danlu.billing.caps import spent_minor, zone
from danlu.context import Platform
from danlu.core.errors import Forbidden, InvalidInput, NotFound
from danlu.core.money import parse_amount
from danlu.db.models import Budget, Instance, User

PERIODS = ("month", "total")


@dataclass(frozen=True)
class BudgetView:
    id: int
    scope: str  # account | member:NAME | instance:ID
    period: str
    soft_minor: int | None
    hard_minor: int | None
    spent_minor: int
    currency: str


def _payer(s: Session, user: User, team: str | None) -> int:
    """The caller's personal account, or ``team``'s (any member may look; changes check roles)."""
    return teams.payer_named(s, user, team)


def _scope_for(s: Session, user: User, ba_id: int, member: str | None, instance: str | None) -> str:
    if member is not None and instance is not None:
        raise InvalidInput("invalid_budget_scope", "a budget is for the account, one --member or one --instance")
    if instance is not None:
        inst = s.get(Instance, instance) if len(instance) <= 32 else None
        if inst is None or inst.billing_account_id != ba_id or not policies.may_see(s, user, inst.user_id, ba_id):
            raise NotFound("instance_not_found", f"no instance {instance!r} on this account; see `danlu ps`")
        if not policies.may_manage(s, user, inst.user_id, ba_id):
            raise Forbidden("team_role_required", "only the renter or the team's managers set this instance's budget")
        return f"instance:{instance}"
    if policies.role_on(s, user, ba_id) not in policies.MANAGERS:
        raise Forbidden("team_role_required", "account and member budgets are set by the account's owners and admins")
    if member is not None:
        other = get_user_by_name(s, member)
        if policies.role_on(s, other, ba_id) is None:
            raise NotFound("member_not_found", f"{member} is not a member of this account")
        return f"member:{other.id}"
    return "account"


def set_budget(
    p: Platform,
    user: User,
    *,
    team: str | None,
    member: str | None = None,
    instance: str | None = None,
    period: str = "month",
    soft: str | None = None,
    hard: str | None = None,
) -> BudgetView:
    if period not in PERIODS:
        raise InvalidInput("invalid_budget_period", f"--period is one of {', '.join(PERIODS)}")
    if soft is None and hard is None:
        raise InvalidInput("invalid_budget", "give --soft, --hard or both (amounts in the account's currency)")
    with p.db.write() as s:
        ba_id = _payer(s, user, team)
        scope = _scope_for(s, user, ba_id, member, instance)
        cur = currency(s)
        soft_minor = parse_amount(soft, cur, allow_zero=False, field="soft limit") if soft is not None else None
        hard_minor = parse_amount(hard, cur, allow_zero=False, field="hard cap") if hard is not None else None
        if soft_minor is not None and hard_minor is not None and soft_minor > hard_minor:
            raise InvalidInput(
                "invalid_budget",
                f"the soft limit {soft} is above the hard cap {hard}, so it could never warn (the cap stops "
                "spending first); set it at or below the cap",
            )
        row = s.scalars(select(Budget).where(Budget.billing_account_id == ba_id, Budget.scope == scope)).first()
        if row is None:
            row = Budget(
                billing_account_id=ba_id,
                scope=scope,
                period=period,
                notified_pct=0,
                notified_period="",
                created_at_ms=p.clock.now_ms(),
            )
            s.add(row)
        row.period, row.soft_minor, row.hard_minor = period, soft_minor, hard_minor
        s.flush()
        return _view(s, row, p.clock.now_ms())


def _label(s: Session, scope: str) -> str:
    kind, _, ref = scope.partition(":")
    if kind == "member":
        u = s.get(User, int(ref))
        return f"member:{u.name if u else ref}"
    return scope


def _view(s: Session, b: Budget, now_ms: int) -> BudgetView:
    return BudgetView(
        b.id, _label(s, b.scope), b.period, b.soft_minor, b.hard_minor, spent_minor(s, b, now_ms, zone(s)), currency(s)
    )


def list_budgets(p: Platform, user: User, team: str | None = None) -> list[BudgetView]:
    with p.db.read() as s:
        ba_id = _payer(s, user, team)
        rows = s.scalars(select(Budget).where(Budget.billing_account_id == ba_id).order_by(Budget.id))
        return [_view(s, b, p.clock.now_ms()) for b in rows]


def remove_budget(p: Platform, user: User, budget_id: int, team: str | None = None) -> None:
    with p.db.write() as s:
        row = s.get(Budget, budget_id)
        if row is None or policies.role_on(s, user, row.billing_account_id) is None:
            raise NotFound("budget_not_found", f"no budget {budget_id}; see `danlu budget list`")
        kind, _, ref = row.scope.partition(":")
        inst = s.get(Instance, ref) if kind == "instance" else None
        allowed = (
            policies.may_manage(s, user, inst.user_id, row.billing_account_id)
            if inst is not None
            else policies.role_on(s, user, row.billing_account_id) in policies.MANAGERS
        )
        if not allowed:
            raise Forbidden("team_role_required", "only the account's owners and admins remove this budget")
        s.delete(row)
