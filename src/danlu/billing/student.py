"""The student discount: a renter asks for academic verification, the operator approves or refuses
with a reason, and an approved renter's personal account gets the operator's discount on GPU
time (``settings.student_discount_bp``), fixed on each allocation when it starts (so a later change
of the discount or the status never re-rates past work). It applies before vouchers
(docs/billing.md, "The order money is taken in"). Team accounts get no student discount.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import select
from sqlalchemy.orm import Session

from danlu.accounts.service import get_user_by_name
from danlu.context import Platform
from danlu.core.errors import Conflict, InvalidInput, NotFound
from danlu.core.parse import percent_bp
from danlu.core.states import Machine
from danlu.db.models import BillingAccount, Setting, User, Verification

SETTING = "student_discount_bp"


@dataclass(frozen=True)
class VerificationView:
    user: str
    status: str  # none | pending | approved | refused
    institution: str
    reason: str
    requested_at_ms: int | None
    decided_at_ms: int | None
    discount_bp: int  # what an approved renter gets now


class Verdict(StrEnum):
    PENDING = "pending"  # asked, waiting for the operator
    APPROVED = "approved"
    REFUSED = "refused"


VERIFICATION = Machine(
    "verification",
    Verdict.PENDING,
    {
        Verdict.PENDING: frozenset({Verdict.APPROVED, Verdict.REFUSED}),
        Verdict.APPROVED: frozenset(),
        Verdict.REFUSED: frozenset(),
    },
)


def discount_bp(session: Session) -> int:
    row = session.get(Setting, SETTING)
    return int(row.value) if row is not None else 0


def _latest(session: Session, user_id: int) -> Verification | None:
    return session.scalars(
        select(Verification).where(Verification.user_id == user_id).order_by(Verification.id.desc())
    ).first()


def is_student(session: Session, user_id: int) -> bool:
    row = _latest(session, user_id)
    return row is not None and row.status == Verdict.APPROVED


def allocation_discount_bp(session: Session, billing_account_id: int) -> int:
    """The discount a new allocation paid by ``billing_account_id`` gets: the student discount
    for an approved renter's personal account, else none."""
    ba = session.get(BillingAccount, billing_account_id)
    if ba is None or ba.kind != "personal" or ba.user_id is None:
        return 0
    return discount_bp(session) if is_student(session, ba.user_id) else 0


def _view(session: Session, user: User) -> VerificationView:
    row = _latest(session, user.id)
    bp = discount_bp(session)
    if row is None:
        return VerificationView(user.name, "none", "", "", None, None, bp)
    return VerificationView(
        user.name, row.status, row.institution, row.reason, row.requested_at_ms, row.decided_at_ms, bp
    )


def request(p: Platform, user: User, institution: str, evidence: str = "") -> VerificationView:
    institution = institution.strip()
    if not 2 <= len(institution) <= 128 or "\x00" in institution or len(evidence) > 2000 or "\x00" in evidence:
        raise InvalidInput(
            "invalid_verification", "name your institution (2-128 characters); evidence is at most 2000 characters"
        )
    with p.db.write() as s:
        s.execute(select(User.id).where(User.id == user.id).with_for_update()).scalar_one()  # one request at a time
        latest = _latest(s, user.id)
        if latest is not None and latest.status in (Verdict.PENDING, Verdict.APPROVED):
            raise Conflict(
                "verification_exists",
                f"your verification is already {latest.status}; see `danlu student status`",
            )
        s.add(
            Verification(
                user_id=user.id,
                status=VERIFICATION.initial,
                institution=institution,
                evidence=evidence,
                reason="",
                requested_at_ms=p.clock.now_ms(),
            )
        )
        s.flush()
        return _view(s, user)


def status(p: Platform, user: User) -> VerificationView:
    with p.db.read() as s:
        return _view(s, user)


def pending(p: Platform) -> list[tuple[VerificationView, str]]:
    """Requests awaiting the operator, oldest first, with their evidence."""
    with p.db.read() as s:
        rows = s.execute(
            select(Verification, User)
            .join(User, User.id == Verification.user_id)
            .where(Verification.status == Verdict.PENDING)
            .order_by(Verification.id)
        ).all()
        return [(_view(s, u), v.evidence) for v, u in rows]


def decide(p: Platform, name: str, approve: bool, reason: str) -> VerificationView:
    if len(reason) > 500 or "\x00" in reason or (not approve and not reason.strip()):
        raise InvalidInput("invalid_reason", "a refusal needs a reason (at most 500 characters) the renter is shown")
    with p.db.write() as s:
        user = get_user_by_name(s, name)
        row = _latest(s, user.id)
        if row is None or row.status != Verdict.PENDING:
            raise NotFound("verification_not_found", f"{name} has no pending verification request")
        row.status = VERIFICATION.move(row.status, Verdict.APPROVED if approve else Verdict.REFUSED, "decide")
        row.reason = reason.strip()
        row.decided_at_ms = p.clock.now_ms()
        s.flush()
        return _view(s, user)


def set_discount(p: Platform, percent: str) -> int:
    """The student discount in percent (e.g. "20" or "12.5"), stored in basis points."""
    message = "the student discount is a percentage from 0 to 100, at most 2 decimals"
    bp = percent_bp(percent, code="invalid_discount", message=message, allow_zero=True)
    with p.db.write() as s:
        row = s.get(Setting, SETTING)
        if row is None:
            s.add(Setting(key=SETTING, value=str(bp)))
        else:
            row.value = str(bp)
    return bp
