"""Money pages: the renter's budgets, vouchers, packages and reservations, the student discount,
and the operator's student verification requests.

Thin, as every console page: each form goes through the API's own request model and calls the
function the API's route calls (so limits, error codes and money are the API's). Buying shows the
API's purchase quote before anything is paid (as ``danlu rent --package`` does) and pays exactly
the quoted price or nothing; cancelling a hold states its refund before the confirm button and
confirms through the API's cancel quote, which never gives back more than it quoted.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Form
from fastapi.responses import Response

from danlu.accounts.service import NAME_RE as USER_NAME_RE
from danlu.api.routers import budgets as budgets_api
from danlu.api.routers import holds as holds_api
from danlu.api.routers import instances as instances_api
from danlu.api.routers import student as student_api
from danlu.api.routers import vouchers as vouchers_api
from danlu.api.schemas.accounts import ReasonIn
from danlu.api.schemas.holds import HOLD_ID, CancelIn, HoldOut, HoldQuoteIn
from danlu.api.schemas.instances import InstanceOut, OfferOut, RentRequest
from danlu.api.schemas.money_controls import MAX_ROW_ID, BudgetIn, DiscountIn, VerificationIn
from danlu.api.schemas.vouchers import RedeemIn, VoucherOut
from danlu.billing import commitments
from danlu.compute import holds as holds_svc
from danlu.compute import views
from danlu.compute.holds import QUOTE_TTL_MS
from danlu.compute.images import list_images
from danlu.compute.lifecycle import HoldState
from danlu.compute.offers import list_offers
from danlu.console.web import ConsoleRoute, Ctx, OperatorPage, OperatorPost, Page, Post, back, validated, with_flash
from danlu.console.words import N_
from danlu.core.errors import Conflict, DanluError, InvalidInput, NotFound
from danlu.core.money import format_minor, parse_amount

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

# Words the templates translate from data (tools/i18n.py extracts N_ from every console module).
WORDS = [
    N_("month"), N_("total"), N_("account"),  # budget periods and scope
    N_("package"), N_("reserved"), N_("stop"), N_("on-demand"),  # hold kinds and what happens at the end
    N_("none"), N_("approved"), N_("refused"),  # student verification states (pending: words.py)
]  # fmt: skip
HOLD_ID_RE = re.compile(HOLD_ID)


# ---------------------------------------------------------------------------- budgets


@router.get("/budgets")
def budgets(ctx: Page) -> Response:
    rows = budgets_api.list_budgets(ctx.platform, ctx.me, None)
    account = next((b for b in rows if b.scope == "account"), None)
    mine = [i for i in _instances(ctx) if i.status != "destroyed"]
    used = {b.id: _percent_used(b.spent, b.hard or b.soft, b.currency) for b in rows}
    return ctx.render("money_budgets.html", budgets=rows, account=account, instances=mine, used=used)


def _percent_used(spent: str, cap: str | None, currency: str) -> int | None:
    """Spent as a whole percent of the cap, rounded half up, in integer minor units."""
    if not cap:
        return None
    cap_minor = parse_amount(cap, currency)
    if cap_minor <= 0:
        return None
    return (200 * parse_amount(spent, currency) + cap_minor) // (2 * cap_minor)


def _instances(ctx: Ctx) -> list[InstanceOut]:
    return [InstanceOut.of(v) for v in views.list_instances(ctx.platform, ctx.me)]


@router.post("/budgets")
def set_budget(
    ctx: Post,
    period: Annotated[str, Form(max_length=8)] = "month",
    soft: Annotated[str, Form(max_length=24)] = "",
    hard: Annotated[str, Form(max_length=24)] = "",
    instance: Annotated[str, Form(max_length=32)] = "",
) -> Response:
    """Set (or replace) the budget of the personal account or of one of the renter's instances:
    ``danlu budget set [--instance ID] [--period month|total] [--soft X] [--hard Y]``."""
    body = validated(
        BudgetIn,
        instance=instance.strip() or None,
        period=period.strip() or "month",
        soft=soft.strip() or None,
        hard=hard.strip() or None,
    )
    out = budgets_api.set_budget(body, ctx.platform, ctx.me, None)
    limits = [f"{ctx._(k)} {v}" for k, v in ((N_("soft"), out.soft), (N_("hard"), out.hard)) if v is not None]
    return with_flash(
        back("/budgets"), "ok", ctx._("Budget set:") + f" {out.scope}, {', '.join(limits)} {out.currency}"
    )


@router.post("/budgets/clear")
def clear_budget(ctx: Post, budget_id: Annotated[int, Form(ge=1, le=MAX_ROW_ID)]) -> Response:
    """Remove one budget (``danlu budget rm ID``): its scope then has no limit."""
    budgets_api.remove_budget(budget_id, ctx.platform, ctx.me, None)
    return with_flash(back("/budgets"), "ok", ctx._("Budget removed: no limit now."))


# ---------------------------------------------------------------------------- vouchers


@router.get("/vouchers")
def vouchers(ctx: Page) -> Response:
    return ctx.render("money_vouchers.html", vouchers=vouchers_api.list_vouchers(ctx.platform, ctx.me, None))


@router.post("/vouchers/redeem")
def redeem(ctx: Post, code: Annotated[str, Form(max_length=64)]) -> Response:
    body = validated(RedeemIn, code=code.strip())
    answer = vouchers_api.redeem(body, ctx.platform, ctx.me, None)
    v = VoucherOut.model_validate_json(bytes(answer.body))
    what = f"{v.percent}% " + ctx._("up to") + " " if v.percent else ""
    message = ctx._("Voucher redeemed:") + f" {v.campaign}, {what}{ctx.fmt.money(v.amount, v.currency)}"
    return with_flash(back("/vouchers"), "ok", message)


# ---------------------------------------------------------------------------- packages and reservations


@dataclass(frozen=True)
class Refund:
    """What cancelling a hold now gives back, worked out as the API's cancel quote does (the same
    pure rule, danlu.billing.commitments.cancellation), without storing a quote on a GET."""

    paid: str
    used: str
    unused: str
    kept: str
    refund: str
    elapsed_s: int
    kind: str


def _refund(v: holds_svc.HoldView, now_ms: int) -> Refund:
    t = commitments.term(v.term)
    elapsed = (max(now_ms, v.starts_at_ms) - v.starts_at_ms) // 1000
    c = commitments.cancellation(
        t, v.price_per_hour_minor, v.gpu_count, v.discount_bp, v.cancel_fee_bp, v.paid_minor, elapsed
    )
    cur = v.currency
    return Refund(
        paid=format_minor(v.paid_minor, cur),
        used=format_minor(c.used_minor, cur),
        unused=format_minor(c.unused_minor, cur),
        kept=format_minor(c.kept_minor, cur),
        refund=format_minor(c.refund_minor, cur),
        elapsed_s=c.elapsed_s,
        kind=t.kind,
    )


def _plans_values(ctx: Ctx) -> dict[str, Any]:
    now = ctx.platform.clock.now_ms()
    found = holds_svc.list_holds(ctx.platform, ctx.me)  # what holds_api.list_holds lists, with its numbers
    active = HoldState.ACTIVE
    holds = [(HoldOut.of(v), _refund(v, now) if v.state == active and now < v.ends_at_ms else None) for v in found]
    offers = [OfferOut.of(o) for o in list_offers(ctx.platform) if o.price_per_hour_minor is not None]
    return {
        "plans": holds_api.plans(ctx.platform, ctx.me),
        "holds": holds,
        "offers": offers,
        "images": list_images(ctx.platform),
        "shown_at": now,
    }


@router.get("/plans")
def plans(ctx: Page) -> Response:
    return ctx.render("money_plans.html", **_plans_values(ctx))


@dataclass(frozen=True)
class RentOnPackage:
    """The "buy a package and rent on it" form, as the page carries it from quote to confirmation."""

    gpu_model: str
    gpu_count: int
    package: str
    on_expiry: str
    image: str
    command: str


def _rent_request(ctx: Ctx, f: RentOnPackage, expected_price: str | None) -> RentRequest:
    try:
        argv = shlex.split(f.command)
    except ValueError as e:
        raise InvalidInput(
            "invalid_command", ctx._("The command could not be read (unbalanced quotes?).") + f" {e}"
        ) from None
    return validated(
        RentRequest,
        gpu_model=f.gpu_model.strip(),
        gpu_count=f.gpu_count,
        command=argv,
        image=f.image.strip() or "host",
        package=f.package,
        on_expiry=f.on_expiry,
        expected_price=expected_price,
    )


GpuModelField = Annotated[str, Form(max_length=64)]
CountField = Annotated[int, Form(ge=1, le=64)]
TermField = Annotated[str, Form(max_length=16)]
OnExpiryField = Annotated[str, Form(max_length=16)]
ImageField = Annotated[str, Form(max_length=64)]
CommandField = Annotated[str, Form(max_length=65536)]


@router.post("/plans/quote")
def quote_package(
    ctx: Post,
    gpu_model: GpuModelField,
    package: TermField,
    command: CommandField,
    gpu_count: CountField = 1,
    on_expiry: OnExpiryField = "stop",
    image: ImageField = "host",
) -> Response:
    """Step one of buying: the API's purchase quote (``POST /plans/quote``, changes nothing), shown
    with a button that buys at exactly that price. Rendered, not redirected: nothing was done."""
    f = RentOnPackage(gpu_model, gpu_count, package, on_expiry, image, command)
    body = _rent_request(ctx, f, None)  # the whole rental checked now, not after the price is shown
    q = holds_api.quote(
        validated(HoldQuoteIn, term=body.package, gpu_model=body.gpu_model, gpu_count=body.gpu_count),
        ctx.platform,
        ctx.me,
    )
    return ctx.render("money_plans.html", **_plans_values(ctx), quote=q, pending=f)


@router.post("/plans/rent")
def rent_on_package(
    ctx: Post,
    gpu_model: GpuModelField,
    package: TermField,
    command: CommandField,
    expected_price: Annotated[str, Form(max_length=24)],
    gpu_count: CountField = 1,
    on_expiry: OnExpiryField = "stop",
    image: ImageField = "host",
) -> Response:
    """Step two: ``POST /instances`` with ``package`` and the quoted ``expected_price`` (a changed
    price buys nothing: 409 price_changed). The form came from the rendered quote, whose address
    cannot be shown again, so a refusal is shown on /plans."""
    f = RentOnPackage(gpu_model, gpu_count, package, on_expiry, image, command)
    try:
        out = instances_api.rent(_rent_request(ctx, f, expected_price), ctx.platform, ctx.me, ctx.request)
    except DanluError as e:
        return with_flash(back("/plans"), "error", ctx.error_text(e))
    message = ctx._("Bought and rented:") + f" {package}, {out.gpu_count}× {out.gpu_model} → {out.id} ({out.hold_id})"
    return with_flash(back("/plans"), "ok", message)


@router.post("/plans/holds/{hold_id}/cancel")
def cancel_hold(ctx: Post, hold_id: str, shown_at: Annotated[int, Form(ge=0, le=2**62)]) -> Response:
    """Cancel early, after the page stated the refund: takes the API's cancel quote and confirms it
    at once (the refund is worked out at this moment, so at most what the page showed). A page
    older than a quote's life (10 minutes) is refused, as an expired quote is."""
    if not HOLD_ID_RE.fullmatch(hold_id):
        raise NotFound("hold_not_found", f"no hold {hold_id[:40]}; list yours with `danlu holds`")
    if ctx.platform.clock.now_ms() - shown_at > QUOTE_TTL_MS:
        raise Conflict("quote_expired", ctx._("That refund was worked out over 10 minutes ago; look at it again."))
    q = holds_api.cancel_quote(hold_id, ctx.platform, ctx.me)
    answer = holds_api.cancel(hold_id, validated(CancelIn, quote_id=q.quote_id), ctx.platform, ctx.me, None)
    out = HoldOut.model_validate_json(bytes(answer.body))
    message = ctx._("Cancelled:") + f" {out.id}. " + ctx._("Refunded") + f" {ctx.fmt.money(out.refunded, out.currency)}"
    return with_flash(back("/plans"), "ok", message)


# ---------------------------------------------------------------------------- student discount


@router.get("/student")
def student(ctx: Page) -> Response:
    return ctx.render("money_student.html", v=student_api.status(ctx.platform, ctx.me))


@router.post("/student")
def request_student(
    ctx: Post,
    institution: Annotated[str, Form(max_length=256)],
    evidence: Annotated[str, Form(max_length=4000)] = "",
) -> Response:
    body = validated(VerificationIn, institution=institution.strip(), evidence=evidence.strip())
    student_api.request(body, ctx.platform, ctx.me)
    return with_flash(back("/student"), "ok", ctx._("Asked. The operator will approve or refuse it."))


@router.get("/operator/students")
def students(ctx: OperatorPage) -> Response:
    # The discount approved students get now: the API's own status answer carries it.
    discount = student_api.status(ctx.platform, ctx.me).discount
    return ctx.render("money_op_students.html", requests=student_api.pending(ctx.platform, ctx.me), discount=discount)


def _user_name(name: str) -> str:
    if not USER_NAME_RE.fullmatch(name):
        raise NotFound("verification_not_found", f"{name[:64]} has no pending verification request")
    return name


@router.post("/operator/students/{name}/approve")
def approve_student(ctx: OperatorPost, name: str) -> Response:
    out = student_api.approve(_user_name(name), ctx.platform, ctx.me)
    said = ctx._("Approved:") + f" {out.user} ({out.institution})"
    if out.discount == "0":  # approved, and it gives nothing until the operator sets a discount
        said += " " + ctx._("The student discount is 0%: set it below, or approved students get nothing.")
    return with_flash(back("/operator/students"), "ok", said)


@router.post("/operator/students/{name}/refuse")
def refuse_student(ctx: OperatorPost, name: str, reason: Annotated[str, Form(max_length=1000)]) -> Response:
    body = validated(ReasonIn, reason=reason.strip())
    out = student_api.refuse(_user_name(name), body, ctx.platform, ctx.me)
    return with_flash(back("/operator/students"), "ok", ctx._("Refused:") + f" {out.user}")


@router.post("/operator/students/discount")
def student_discount(ctx: OperatorPost, percent: Annotated[str, Form(max_length=8)]) -> Response:
    out = student_api.set_discount(
        validated(DiscountIn, percent=percent.strip().removesuffix("%")), ctx.platform, ctx.me
    )
    return with_flash(back("/operator/students"), "ok", ctx._("Student discount set:") + f" {out.percent}%")
