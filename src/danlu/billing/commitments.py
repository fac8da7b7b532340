"""Packages and reserved commitments, pure: their terms, what one costs, what cancelling gives back.

A **package** (a day, a week or a month) and a **reserved commitment** (1, 3, 6 or 12 months) keep
N GPUs of one model for one billing account for the whole term, used or not, running or stopped
(docs/billing.md "Packages and reservations"). Both are prepaid at the on-demand price less the
operator's discount for the term, rated by the one rater (danlu.billing.rating: whole seconds,
rounded once), so a package costs exactly what the same seconds cost on demand, less the discount.

Cancelling early gives back the part not yet used (the same cumulative rating at the seconds
elapsed), less

* for a package, the operator's cancellation fee: a percentage of that unused part;
* for a reserved commitment, the discount received so far (the claw-back): the time held is
  re-priced at the on-demand rate, so the refund is what was paid less the on-demand value of
  the time held, never below 0.

Months are 30 days (as the storage price's GB-month), so 12 months are 360 days. Integers only.
"""

from __future__ import annotations

from dataclasses import dataclass

from danlu.billing.rating import BASIS_POINTS, Rate, cumulative_cost
from danlu.core.errors import InvalidInput
from danlu.core.parse import bp_text, percent_bp

DAY_S = 86_400
ON_EXPIRY = ("stop", "on-demand")


@dataclass(frozen=True, slots=True)
class Term:
    name: str
    kind: str  # package | reserved
    seconds: int

    @property
    def label(self) -> str:
        days = self.seconds // DAY_S
        if self.kind == "package":
            return {1: "1 day", 7: "1 week", 30: "1 month"}[days]
        return f"{days // 30} month{'s' if days > 30 else ''} ({days} days)"


TERMS: dict[str, Term] = {
    t.name: t
    for t in (
        Term("package-day", "package", DAY_S),
        Term("package-week", "package", 7 * DAY_S),
        Term("package-month", "package", 30 * DAY_S),
        Term("reserved-1m", "reserved", 30 * DAY_S),
        Term("reserved-3m", "reserved", 90 * DAY_S),
        Term("reserved-6m", "reserved", 180 * DAY_S),
        Term("reserved-12m", "reserved", 360 * DAY_S),
    )
}


def term(name: str) -> Term:
    found = TERMS.get(name)
    if found is None:
        raise InvalidInput("invalid_term", f"a term is one of {', '.join(TERMS)}, not {name!r}")
    return found


def check_on_expiry(value: str) -> str:
    if value not in ON_EXPIRY:
        raise InvalidInput(
            "invalid_on_expiry", "at expiry an instance on the hold either stops (stop) or runs on (on-demand)"
        )
    return value


def list_price(price_per_hour_minor: int, gpus: int, seconds: int) -> int:
    """What ``seconds`` of ``gpus`` GPUs cost on demand (no tariffs: a hold's price is fixed)."""
    return cumulative_cost(Rate(price_per_hour_minor, gpus, 0), seconds)


def hold_price(price_per_hour_minor: int, gpus: int, seconds: int, discount_bp: int) -> int:
    """The same seconds less the term's discount, rounded once."""
    return cumulative_cost(Rate(price_per_hour_minor, gpus, 0, discount_bp=discount_bp), seconds)


@dataclass(frozen=True, slots=True)
class Cancellation:
    """What cancelling after ``elapsed_s`` gives back: ``refund = unused - kept``."""

    elapsed_s: int
    used_minor: int  # the discounted value of the time held
    unused_minor: int  # paid - used
    kept_minor: int  # the package's fee, or the reservation's claw-back (at most ``unused``)
    refund_minor: int


def cancellation(
    t: Term,
    price_per_hour_minor: int,
    gpus: int,
    discount_bp: int,
    cancel_fee_bp: int,
    paid_minor: int,
    elapsed_s: int,
) -> Cancellation:
    elapsed = min(max(elapsed_s, 0), t.seconds)
    used = hold_price(price_per_hour_minor, gpus, elapsed, discount_bp)
    unused = max(0, paid_minor - used)
    if t.kind == "package":
        # The fee is a share of what is given back, rounded half up (unused >= 0).
        kept = (unused * cancel_fee_bp * 2 + BASIS_POINTS) // (2 * BASIS_POINTS)
    else:
        # Claw back the discount received: the time held costs what it would have on demand.
        kept = list_price(price_per_hour_minor, gpus, elapsed) - used
    kept = min(kept, unused)
    return Cancellation(elapsed, used, unused, kept, unused - kept)


def rule_text(t: Term, cancel_fee_bp: int) -> str:
    """The early-cancellation rule, as shown before buying and before cancelling."""
    if t.kind == "package":
        return f"cancel early: the unused part is refunded pro rata, less a {format_bp(cancel_fee_bp)} fee"
    return (
        "terminate early: the discount received so far is clawed back (the time held is charged at "
        "the on-demand price) and the rest is refunded"
    )


def format_bp(bp: int) -> str:
    return bp_text(bp) + "%"


def parse_percent(text: str, what: str) -> int:
    """'20', '20%', '12.5' → basis points (0 to 100 % exclusive of 100 for a discount is the caller's rule)."""
    message = f"{what} is a percentage from 0 to 100 with at most 2 decimals, e.g. 20 or 12.5"
    return percent_bp(text, code="invalid_percent", message=message, allow_zero=True)
