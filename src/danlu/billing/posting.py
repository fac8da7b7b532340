"""The order money is taken in (docs/billing.md), pure: who pays each charge of a meter posting.

A posting charges each allocation an amount that is already net of its plan's price and any
discount (the rater applies ``discount_bp``). Vouchers pay next, then cash:

* vouchers are offered in the order given (the caller sorts them by priority, soonest expiry,
  oldest grant); each pays for the charges in its scope — a GPU model, a plan, or all;
* a fixed voucher pays as much as it has left; a percentage voucher pays its percentage of each
  charge (rounded half up per charge) up to what it has left;
* whatever no voucher paid is cash.

Integers only; the result always adds up: for every charge, voucher parts + cash = amount.
"""

from __future__ import annotations

from dataclasses import dataclass

BASIS_POINTS = 10_000


@dataclass(frozen=True, slots=True)
class Charge:
    key: int  # the allocation
    gpu_model: str
    plan: str
    amount_minor: int


@dataclass(frozen=True, slots=True)
class VoucherSlot:
    key: int  # the voucher grant
    remaining_minor: int
    scope_model: str | None = None
    scope_plan: str | None = None
    percent_bp: int | None = None  # None = a fixed amount

    def covers(self, charge: Charge) -> bool:
        return (self.scope_model is None or self.scope_model == charge.gpu_model) and (
            self.scope_plan is None or self.scope_plan == charge.plan
        )


@dataclass(frozen=True, slots=True)
class Split:
    voucher_by_charge: dict[int, int]  # allocation -> what vouchers paid of its charge
    taken_by_voucher: dict[int, int]  # grant -> what it paid in all
    cash_minor: int

    @property
    def voucher_minor(self) -> int:
        return sum(self.taken_by_voucher.values())


def _share(amount: int, percent_bp: int) -> int:
    return (amount * percent_bp * 2 + BASIS_POINTS) // (2 * BASIS_POINTS)  # half up, amount >= 0


def split(charges: list[Charge], vouchers: list[VoucherSlot]) -> Split:
    """Who pays each of ``charges``; see the module docstring for the order."""
    left = {v.key: v.remaining_minor for v in vouchers}
    by_charge: dict[int, int] = {}
    taken: dict[int, int] = {}
    cash = 0
    for charge in charges:
        due = charge.amount_minor
        paid = 0
        for v in vouchers:
            if due - paid <= 0:
                break
            if left[v.key] <= 0 or not v.covers(charge):
                continue
            want = due - paid if v.percent_bp is None else min(due - paid, _share(due, v.percent_bp))
            take = min(want, left[v.key])
            if take > 0:
                left[v.key] -= take
                taken[v.key] = taken.get(v.key, 0) + take
                paid += take
        by_charge[charge.key] = paid
        cash += due - paid
    return Split(by_charge, taken, cash)
