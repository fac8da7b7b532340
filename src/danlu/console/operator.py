"""The operator's pages: users (create, password, top-up, credit limit, GPU quota), every running
instance (stop with a reason), GPUs and who holds each, prices and tariff windows.

A renter asking for any of these gets the same 404 as for a page that does not exist.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Form
from fastapi.responses import Response

from danlu.accounts import credentials
from danlu.accounts import service as accounts
from danlu.api.routers import admin as admin_api
from danlu.api.routers import operator as operator_api
from danlu.api.routers import tariffs as tariffs_api
from danlu.api.schemas.accounts import ReasonIn, UserCreate
from danlu.api.schemas.instances import OfferOut
from danlu.api.schemas.money_controls import TariffIn
from danlu.api.schemas.operator import AmountIn, PriceIn, QuotaIn, TopupIn
from danlu.billing import service as billing
from danlu.compute import operator as ops
from danlu.compute.offers import list_offers
from danlu.console.web import ConsoleRoute, OperatorPage, OperatorPost, back, validated, with_flash
from danlu.core.errors import InvalidInput

router = APIRouter(prefix="/operator", route_class=ConsoleRoute, include_in_schema=False)


@router.get("/users")
def users(ctx: OperatorPage) -> Response:
    return ctx.render("op_users.html", users=_user_rows(ctx), created=None, topup_key=uuid.uuid4().hex)


def _user_rows(ctx: OperatorPage) -> list[tuple[accounts.UserInfo, billing.BalanceView | None, bool]]:
    """Each user with their personal balance and whether they can sign in to the console."""
    balances = billing.personal_balances(ctx.platform)
    with_password = credentials.with_password(ctx.platform)
    return [(u, balances.get(u.name), u.name in with_password) for u in accounts.list_users(ctx.platform)]


@router.post("/users")
def create_user(
    ctx: OperatorPost, name: Annotated[str, Form(max_length=64)], password: Annotated[str, Form()] = ""
) -> Response:
    if password:
        credentials.check_password_rules(password)  # before the user exists: a bad password creates nothing
    out = admin_api.create(validated(UserCreate, name=name.strip()), ctx.platform, ctx.me)
    if password:
        credentials.set_password(ctx.platform, out.name, password)
    # The token is shown once, on this page, never in a redirect or a cookie.
    return ctx.render("op_users.html", users=_user_rows(ctx), created=out, topup_key=uuid.uuid4().hex)


@router.post("/users/{name}/password")
def set_password(ctx: OperatorPost, name: str, password: Annotated[str, Form()]) -> Response:
    credentials.set_password(ctx.platform, name, password)
    return with_flash(back("/operator/users"), "ok", ctx._("Password set for") + f" {name}")


@router.post("/users/{name}/topup")
def topup(
    ctx: OperatorPost,
    name: str,
    amount: Annotated[str, Form(max_length=24)],
    key: Annotated[str, Form(max_length=64)] = "",
) -> Response:
    body = validated(TopupIn, amount=amount.strip())
    # The form carries a key made when it was shown, so a double submit tops up once.
    view, created = billing.admin_topup(ctx.platform, name, body.amount, key or str(uuid.uuid4()))
    msg = ctx._("Topped up") if created else ctx._("Already done (this form was sent before)")
    return with_flash(back("/operator/users"), "ok", f"{msg}: {name} → {view.as_dict()['balance']}")


@router.post("/users/{name}/credit-limit")
def credit_limit(ctx: OperatorPost, name: str, amount: Annotated[str, Form(max_length=24)]) -> Response:
    admin_api.credit_limit(name, validated(AmountIn, amount=amount.strip()), ctx.platform, ctx.me)
    return with_flash(back("/operator/users"), "ok", ctx._("Credit limit set for") + f" {name}")


@router.post("/users/{name}/quota")
def quota(ctx: OperatorPost, name: str, gpus: Annotated[str, Form(max_length=6)] = "") -> Response:
    value = int(gpus) if gpus.strip().isdigit() else None
    if gpus.strip() and value is None:
        raise InvalidInput("invalid_quota", ctx._("A GPU quota is a whole number of GPUs, or empty for no limit."))
    admin_api.gpu_quota(name, validated(QuotaIn, gpus=value), ctx.platform, ctx.me)
    return with_flash(back("/operator/users"), "ok", ctx._("GPU quota set for") + f" {name}")


@router.get("/instances")
def instances(ctx: OperatorPage) -> Response:
    return ctx.render("op_instances.html", sandboxes=operator_api.list_sandboxes(ctx.platform, ctx.me))


@router.post("/instances/{instance_id}/stop")
def stop(ctx: OperatorPost, instance_id: str, reason: Annotated[str, Form(max_length=1000)]) -> Response:
    body = validated(ReasonIn, reason=reason)
    ops.stop_instance(ctx.platform, instance_id[:32], body.reason)
    return with_flash(back("/operator/instances"), "ok", ctx._("Stopped") + f" {instance_id}")


@router.get("/gpus")
def gpus(ctx: OperatorPage) -> Response:
    holders = {v.instance_id: v.user for v in ops.list_sandboxes(ctx.platform)}
    rows = admin_api.list_gpus(ctx.platform, ctx.me)
    return ctx.render("op_gpus.html", gpus=rows, holders=holders, hosts=operator_api.list_hosts(ctx.platform, ctx.me))


@router.get("/prices")
def prices(ctx: OperatorPage) -> Response:
    offers = list_offers(ctx.platform)
    tariffs = tariffs_api.list_rules(ctx.platform, ctx.me)
    return ctx.render("op_prices.html", offers=[OfferOut.of(o) for o in offers], tariffs=tariffs)


@router.post("/prices")
def set_price(
    ctx: OperatorPost,
    gpu_model: Annotated[str, Form(max_length=64)],
    price: Annotated[str, Form(max_length=24)],
    spot: Annotated[str, Form(max_length=24)] = "",
) -> Response:
    body = validated(PriceIn, price_per_hour=price.strip(), interruptible_price_per_hour=spot.strip() or None)
    out = admin_api.set_price(gpu_model.strip(), body, ctx.platform, ctx.me)
    return with_flash(back("/operator/prices"), "ok", f"{out.gpu_model}: {out.price_per_hour} {out.currency}")


@router.post("/tariffs")
def add_tariff(
    ctx: OperatorPost,
    name: Annotated[str, Form(max_length=64)],
    days: Annotated[str, Form(max_length=64)],
    start: Annotated[str, Form(max_length=5)],
    end: Annotated[str, Form(max_length=5)],
    multiplier: Annotated[str, Form(max_length=8)],
) -> Response:
    body = validated(
        TariffIn,
        name=name,
        days=[d.strip() for d in days.split(",") if d.strip()],
        **{"from": start},
        to=end,
        multiplier=multiplier.strip(),
    )
    tariffs_api.add(body, ctx.platform, ctx.me)
    return with_flash(back("/operator/prices"), "ok", ctx._("Tariff window added:") + f" {name}")
