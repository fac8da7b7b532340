"""The operator's package and reservation terms (discount, cancellation fee), versioned.

Nothing is offered until the operator sets a term (``danlu admin plan set package-week --discount
20 --cancel-fee 10``): there are no built-in discounts. Setting a term again supersedes its row
(a hold keeps the row it was bought under); removing it supersedes it with nothing, so it is no
longer sold while holds already bought run their course.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from danlu.billing.commitments import TERMS, Term, format_bp, parse_percent, rule_text, term
from danlu.context import Platform
from danlu.core.errors import Conflict, InvalidInput, NotFound
from danlu.db.models import PlanTerm


@dataclass(frozen=True)
class TermView:
    term: str
    kind: str
    label: str
    seconds: int
    discount_bp: int
    cancel_fee_bp: int
    rule: str

    @property
    def discount(self) -> str:
        return format_bp(self.discount_bp)

    @property
    def cancel_fee(self) -> str:
        return format_bp(self.cancel_fee_bp)


def view(row: PlanTerm) -> TermView:
    t = term(row.term)
    rule = rule_text(t, row.cancel_fee_bp)
    return TermView(t.name, t.kind, t.label, t.seconds, row.discount_bp, row.cancel_fee_bp, rule)


def current_terms(session: Session) -> dict[str, PlanTerm]:
    """The terms on sale now, by name, in the order of :data:`TERMS`."""
    rows = {r.term: r for r in session.scalars(select(PlanTerm).where(PlanTerm.superseded_at_ms.is_(None)))}
    return {name: rows[name] for name in TERMS if name in rows}


def offered(session: Session, name: str) -> tuple[Term, PlanTerm]:
    t = term(name)
    row = current_terms(session).get(t.name)
    if row is None:
        raise Conflict(
            "plan_not_offered",
            f"{t.name} is not offered here; `danlu plans` lists what is (the operator sets one with "
            f"`danlu admin plan set {t.name} --discount PCT`)",
        )
    return t, row


def list_terms(p: Platform) -> list[TermView]:
    with p.db.read() as s:
        return [view(r) for r in current_terms(s).values()]


def set_term(p: Platform, name: str, discount: str, cancel_fee: str = "0") -> TermView:
    t = term(name)
    discount_bp = parse_percent(discount, "--discount")
    fee_bp = parse_percent(cancel_fee, "--cancel-fee")
    if discount_bp >= 10_000:
        raise InvalidInput("invalid_percent", "a discount is below 100%")
    if t.kind == "reserved" and fee_bp:
        raise InvalidInput(
            "invalid_percent", "a reserved commitment's early termination claws back the discount; it takes no fee"
        )
    with p.db.write() as s:
        now = p.clock.now_ms()
        _supersede(s, t.name, now)
        row = PlanTerm(term=t.name, discount_bp=discount_bp, cancel_fee_bp=fee_bp, created_at_ms=now)
        s.add(row)
        s.flush()
        return view(row)


def remove_term(p: Platform, name: str) -> None:
    t = term(name)
    with p.db.write() as s:
        if not _supersede(s, t.name, p.clock.now_ms()):
            raise NotFound("plan_not_offered", f"{t.name} is not offered; nothing to remove")


def _supersede(s: Session, name: str, now_ms: int) -> int:
    result = s.execute(
        update(PlanTerm)
        .where(PlanTerm.term == name, PlanTerm.superseded_at_ms.is_(None))
        .values(superseded_at_ms=now_ms)
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]
