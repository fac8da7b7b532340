"""The renter's pages: sign-in, offers, rent, instances, jobs, billing, teams, account.

Thin: each handler reads its form through the API's own request model, calls the function the
API's route calls (so limits, errors and money are the API's), and renders the result.
"""

from __future__ import annotations

import shlex
from collections import defaultdict
from datetime import UTC, date, datetime
from decimal import Decimal
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Form, Path, Query
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from danlu.access import links
from danlu.access import service as access
from danlu.accounts import credentials
from danlu.advisor.workload import PRECISIONS, TASKS
from danlu.api import hot
from danlu.api.routers import advice as advice_api
from danlu.api.routers import instances as instances_api
from danlu.api.routers import invoices as invoices_api
from danlu.api.routers import jobs as jobs_api
from danlu.api.routers import ports as ports_api
from danlu.api.routers import snapshots as snapshots_api
from danlu.api.routers import telemetry as telemetry_api
from danlu.api.routers import vouchers as vouchers_api
from danlu.api.routers.snapshots import SnapshotIn
from danlu.api.schemas.accounts import BalanceOut, LedgerLineOut
from danlu.api.schemas.instances import InstanceOut, OfferOut, RentRequest, StartRequest
from danlu.billing import service as billing
from danlu.compute import snapshots, views
from danlu.compute.images import list_images
from danlu.compute.offers import list_offers
from danlu.console.web import (
    COOKIE,
    LANG_COOKIE,
    SECURITY_HEADERS,
    TERMINAL_HEADERS,
    Anyone,
    ConsoleRoute,
    Page,
    Post,
    back,
    safe_next,
    validated,
    with_flash,
)
from danlu.core.errors import DanluError, Forbidden, InvalidInput, NotFound
from danlu.core.money import format_minor, parse_amount
from danlu.i18n.catalogs import LANGUAGES
from danlu.scheduling import jobs as jobs_svc

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
LEDGER_PAGE = 50


# ---------------------------------------------------------------------------- sign-in, language


@router.get("/")
def home(ctx: Anyone) -> Response:
    return RedirectResponse("/instances", status_code=303)


@router.get("/login")
def login_form(ctx: Anyone, next: str = "/instances") -> Response:
    return ctx.render("login.html", next=safe_next(next))


@router.post("/login")
def login(
    ctx: Anyone,
    name: Annotated[str, Form(max_length=64)],
    password: Annotated[str, Form(max_length=256)],
    next: Annotated[str, Form(max_length=2000)] = "/instances",
) -> Response:
    """No CSRF token before sign-in (there is no session yet); the cookie is SameSite=Lax and a
    sign-in replaces nothing the attacker could use."""
    try:
        user_id = credentials.check_password(ctx.platform, name.strip(), password, _address(ctx))
    except DanluError as e:
        page = ctx.render("login.html", status=e.http_status, next=safe_next(next), error=ctx.error_text(e), name=name)
        if isinstance(wait := e.details.get("retry_after_s"), int):
            page.headers["Retry-After"] = str(wait)
        return page
    cookie, info = credentials.open_session(ctx.platform, user_id)
    response = RedirectResponse(safe_next(next), status_code=303, headers=SECURITY_HEADERS)
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=(info.expires_at_ms - ctx.platform.clock.now_ms()) // 1000,
        httponly=True,
        samesite="lax",
        secure=ctx.request.url.scheme == "https",
        path="/",
    )
    return response


def _address(ctx: Anyone) -> str | None:
    return ctx.request.client.host if ctx.request.client is not None else None


@router.post("/logout")
def logout(ctx: Post) -> Response:
    credentials.close_session(ctx.platform, ctx.request.cookies.get(COOKIE))
    response = RedirectResponse("/login", status_code=303, headers=SECURITY_HEADERS)
    response.delete_cookie(COOKIE, path="/")
    return response


@router.get("/lang/{lang}")
def switch_language(ctx: Anyone, lang: str, next: str = "/instances") -> Response:
    """Every page links here for each language; the choice is kept in a cookie for a year."""
    response = RedirectResponse(safe_next(next), status_code=303)
    if lang in LANGUAGES:
        response.set_cookie(LANG_COOKIE, lang, max_age=365 * 86400, samesite="lax", path="/")
    return response


# ---------------------------------------------------------------------------- offers and renting


@router.get("/offers")
def offers(
    ctx: Page,
    gpu: Annotated[str, Query(max_length=64)] = "",
    min_vram: Annotated[str, Query(max_length=8)] = "",
    max_price: Annotated[str, Query(max_length=20)] = "",
    free_only: bool = False,
) -> Response:
    vram = None
    if min_vram.strip():
        if not min_vram.strip().isdigit():
            raise InvalidInput("invalid_min_vram", ctx._("Minimum VRAM is a whole number of GB, 0 or more."))
        vram = int(min_vram)
    found = list_offers(ctx.platform, gpu.strip() or None, vram, max_price.strip() or None)
    rows = [OfferOut.of(o) for o in found if o.free > 0 or not free_only]
    models = sorted({o.gpu_model for o in list_offers(ctx.platform)})
    return ctx.render(
        "offers.html", offers=rows, models=models, gpu=gpu, min_vram=min_vram, max_price=max_price, free_only=free_only
    )


@router.get("/rent")
def rent_form(
    ctx: Page, gpu: Annotated[str, Query(max_length=64)] = "", count: Annotated[int, Query(ge=1, le=64)] = 1
) -> Response:
    offers_now = [OfferOut.of(o) for o in list_offers(ctx.platform) if o.price_per_hour_minor is not None]
    estimates = {o.gpu_model: _estimates(ctx, o) for o in offers_now}
    gpu = gpu if gpu in estimates else (offers_now[0].gpu_model if offers_now else "")
    snaps = snapshots.list_snapshots(ctx.platform, ctx.me)
    return ctx.render(
        "rent.html",
        offers=offers_now,
        images=list_images(ctx.platform),
        gpu=gpu,
        count=count,
        estimates=estimates,
        snapshots=snaps,
    )


def _estimates(ctx: Page, o: OfferOut) -> dict[str, str]:
    """The cost per hour of 1..N GPUs of this offer at today's price ("N") and interruptible
    ("sN"), exact decimals formatted for the page (the rent dialog shows the one picked)."""
    out = {}
    for n in range(1, max(o.max_per_host, 1) + 1):
        out[str(n)] = ctx.fmt.money(str(Decimal(o.price_now or o.price_per_hour or "0") * n), o.currency)
        if o.interruptible_price_per_hour is not None:
            out[f"s{n}"] = ctx.fmt.money(str(Decimal(o.interruptible_price_per_hour) * n), o.currency)
    return out


@router.post("/rent")
def rent(
    ctx: Post,
    gpu_model: Annotated[str, Form(max_length=64)],
    command: Annotated[str, Form(max_length=65536)],
    gpu_count: Annotated[int, Form(ge=1, le=64)] = 1,
    image: Annotated[str, Form(max_length=64)] = "host",
    name: Annotated[str, Form(max_length=64)] = "",
    plan: Annotated[str, Form(pattern="^(on-demand|interruptible)$")] = "on-demand",
    idle_stop: Annotated[str, Form(max_length=16)] = "",
    from_snapshot: Annotated[str, Form(max_length=32)] = "",
) -> Response:
    try:
        argv = shlex.split(command)
    except ValueError as e:
        raise InvalidInput(
            "invalid_command", ctx._("The command could not be read (unbalanced quotes?).") + f" {e}"
        ) from None
    body = validated(
        RentRequest,
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        command=argv,
        name=name,
        image=image or "host",
        interruptible=plan == "interruptible",
        idle_stop=idle_stop.strip() or None,
        from_snapshot=from_snapshot or None,
    )
    out = instances_api.rent(body, ctx.platform, ctx.me, ctx.request)
    return with_flash(back(f"/instances/{out.id}"), "ok", ctx._("Rented. GPU billing runs while it is running."))


# ---------------------------------------------------------------------------- instances


@router.get("/instances")
async def instances(ctx: Page) -> Response:
    """Answered on the event loop from memory where it can be (issue 29: the page polled by everyone
    who keeps it open): the rows are rendered once per change of the listing (views.render_listing:
    a write, or the next whole second of the clock) and language, built by one request at a time
    (api/hot.once); the snapshots come from their cache. A miss reads in the thread pool."""
    p, me, lang = ctx.platform, ctx.me, ctx.lang
    rows = await hot.once(
        hot.Memo(
            ("console-rows", p.db.engine.pool, me.id, lang),
            partial(views.rendered_listing, p, me.id, False, f"html:{lang}"),
        ),
        lambda: views.render_listing(
            p,
            me,
            False,
            lambda vs: ctx.fragment("instance_rows.html", instances=[InstanceOut.of(v) for v in vs]),
            f"html:{lang}",
        ),
    )
    shots = snapshots.listed_snapshots(p, me.id)
    if shots is None:
        shots = await run_in_threadpool(snapshots.list_snapshots, p, me)
    return ctx.render("instances.html", rows=rows, snapshots=shots)


@router.post("/instances/{instance_id}/snapshots")
def take_snapshot(ctx: Post, instance_id: str, name: Annotated[str, Form(max_length=64)] = "") -> Response:
    """`danlu snapshot create ID`: a stopped instance's workspace, deduplicated and encrypted."""
    snap = snapshots_api.create(_checked_id(instance_id), ctx.platform, ctx.me, validated(SnapshotIn, name=name))
    said = ctx._("Snapshot %(id)s taken: %(new)s stored new.") % {"id": snap.id, "new": ctx.fmt.mib(snap.added_bytes)}
    return with_flash(back(f"/instances/{instance_id}"), "ok", said)


@router.post("/snapshots/{snapshot_id}/remove")
def remove_snapshot(ctx: Post, snapshot_id: str) -> Response:
    if len(snapshot_id) > 32 or not snapshot_id.replace("-", "").isalnum():
        raise NotFound("snapshot_not_found", "there is no such snapshot here")
    snapshots.remove(ctx.platform, ctx.me, snapshot_id)
    return with_flash(back("/instances"), "ok", ctx._("Snapshot removed."))


@router.get("/instances/{instance_id}")
def instance(ctx: Page, instance_id: str) -> Response:
    return _instance_page(ctx, instance_id)


def _instance_page(ctx: Page, instance_id: str, new_link: tuple[links.LinkView, str] | None = None) -> Response:
    out = instances_api.show(_checked_id(instance_id), ctx.platform, ctx.me)
    events = instances_api.events(out.id, ctx.platform, ctx.me)
    cost = invoices_api.instance_cost(ctx.platform, ctx.me, out.id)  # `danlu cost ID`: line by line
    ports = access.ports_of(ctx.platform, ctx.me, out.id)  # the renter's web apps (docs/access.md)
    try:
        shared = links.list_links(ctx.platform, ctx.me, out.id)
    except Forbidden:  # a team member who may see it but not manage it: no links
        shared = []
    return ctx.render("instance.html", i=out, events=events, cost=cost, ports=ports, links=shared, new_link=new_link)


@router.post("/instances/{instance_id}/ports/{port}/links")
def make_link(ctx: Post, instance_id: str, port: Annotated[int, Path(ge=1, le=65535)]) -> Response:
    """`danlu port ID PORT --link`: rendered, not redirected, as a new token is: the URL is shown once."""
    view, token = links.create(ctx.platform, ctx.me, _checked_id(instance_id), port)
    return _instance_page(ctx, instance_id, (view, ports_api.link_url(str(ctx.request.base_url), view, token)))


@router.post("/instances/{instance_id}/links/{link_id}/revoke")
def revoke_link(ctx: Post, instance_id: str, link_id: Annotated[int, Path(ge=1, le=2**31 - 1)]) -> Response:
    links.revoke(ctx.platform, ctx.me, _checked_id(instance_id), link_id)
    return with_flash(back(f"/instances/{instance_id}"), "ok", ctx._("Link revoked: it opens nothing from now on."))


@router.get("/instances/{instance_id}/terminal")
def terminal(ctx: Page, instance_id: str) -> Response:
    """A shell inside the instance in the browser (static/terminal.js over the session WebSocket)."""
    out = instances_api.show(_checked_id(instance_id), ctx.platform, ctx.me)
    return ctx.render("terminal.html", i=out, headers=TERMINAL_HEADERS)


@router.get("/top")
def top(ctx: Page) -> Response:
    """`danlu top`: each running instance's newest GPU, CPU, memory and power sample and its cost."""
    return ctx.render("top.html", rows=telemetry_api.top(ctx.platform, ctx.me))


def _checked_id(instance_id: str) -> str:
    if len(instance_id) > 32 or not instance_id.replace("-", "").isalnum():
        raise NotFound("not_found", "there is no such instance or job here")
    return instance_id


@router.post("/instances/{instance_id}/stop")
def stop(ctx: Post, instance_id: str) -> Response:
    instances_api.stop(_checked_id(instance_id), ctx.platform, ctx.me)
    return with_flash(back(f"/instances/{instance_id}"), "ok", ctx._("Stopping: GPU billing has ended."))


@router.post("/instances/{instance_id}/start")
def start(
    ctx: Post,
    instance_id: str,
    gpu_model: Annotated[str, Form(max_length=64)] = "",
    gpu_count: Annotated[int | None, Form(ge=1, le=1024)] = None,
    expected_price: Annotated[str, Form(max_length=32)] = "",
) -> Response:
    body = None
    if gpu_model or gpu_count is not None:  # confirmed on the resize page, at the price shown there
        body = validated(
            StartRequest, gpu_model=gpu_model or None, gpu_count=gpu_count, expected_price=expected_price or None
        )
    out = instances_api.start(_checked_id(instance_id), ctx.platform, ctx.me, ctx.request, body)
    said = ctx._("Started on the same workspace.")
    if body is not None:
        said = ctx._("Started on %(count)s× %(model)s with the same workspace.") % {
            "count": out.gpu_count,
            "model": out.gpu_model,
        }
    return with_flash(back(f"/instances/{instance_id}"), "ok", said)


@router.get("/instances/{instance_id}/resize")
def resize(
    ctx: Page,
    instance_id: str,
    gpu_model: Annotated[str, Query(max_length=64)] = "",
    gpu_count: Annotated[int | None, Query(ge=1, le=1024)] = None,
) -> Response:
    """Pick another GPU model or count for a stopped instance; with both, the new shape's hourly price
    (the list price, all its GPUs) and the button that starts it at that price (`danlu start --gpu`)."""
    out = instances_api.show(_checked_id(instance_id), ctx.platform, ctx.me)
    offers_now = [OfferOut.of(o) for o in list_offers(ctx.platform) if o.price_per_hour_minor is not None]
    chosen = next((o for o in offers_now if o.gpu_model == gpu_model), None)
    price = None
    if chosen is not None and gpu_count is not None:
        per_gpu = chosen.interruptible_price_per_hour if out.interruptible else chosen.price_per_hour
        price = None if per_gpu is None else str(Decimal(per_gpu) * gpu_count)
    return ctx.render(
        "instance_resize.html", i=out, offers=offers_now, chosen=chosen, count=gpu_count or out.gpu_count, price=price
    )


@router.post("/instances/{instance_id}/remove")
def remove(ctx: Post, instance_id: str) -> Response:
    instances_api.destroy(_checked_id(instance_id), ctx.platform, ctx.me)
    return with_flash(back("/instances"), "ok", ctx._("Removed: the instance and its workspace are gone."))


# ---------------------------------------------------------------------------- jobs


@router.get("/jobs")
def jobs(ctx: Page) -> Response:
    rows = jobs_api.list_jobs(ctx.platform, ctx.me)
    positions, queued = jobs_svc.queue_positions(ctx.platform)
    return ctx.render("jobs.html", jobs=list(reversed(rows)), positions=positions, queued=queued)


@router.get("/jobs/{job_id}")
def job(ctx: Page, job_id: str) -> Response:
    out = jobs_api.show(_checked_id(job_id), ctx.platform, ctx.me)
    positions, queued = jobs_svc.queue_positions(ctx.platform)
    events = jobs_api.events(out.id, ctx.platform, ctx.me)
    return ctx.render("job.html", j=out, events=events, position=positions.get(out.id), queued=queued)


@router.post("/jobs/{job_id}/cancel")
def cancel_job(ctx: Post, job_id: str) -> Response:
    jobs_api.cancel(_checked_id(job_id), ctx.platform, ctx.me)
    return with_flash(back(f"/jobs/{job_id}"), "ok", ctx._("Cancelled."))


# ---------------------------------------------------------------------------- money


@router.get("/billing")
def billing_page(ctx: Page, before: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None) -> Response:
    balance = BalanceOut(**billing.balance(ctx.platform, ctx.me).as_dict())
    ledger = [LedgerLineOut(**r) for r in billing.statement(ctx.platform, ctx.me, LEDGER_PAGE, None, before)]  # type: ignore[arg-type]
    next_before = ledger[-1].transaction_id if len(ledger) == LEDGER_PAGE else None
    vouchers = vouchers_api.list_vouchers(ctx.platform, ctx.me)
    invoices = invoices_api.list_invoices(ctx.platform, ctx.me)
    recent = [LedgerLineOut(**r) for r in billing.statement(ctx.platform, ctx.me, 1000)]  # type: ignore[arg-type]
    chart = _usage_chart(ctx, recent, balance.currency)
    return ctx.render(
        "billing.html",
        balance=balance,
        ledger=ledger,
        next_before=next_before,
        vouchers=vouchers,
        invoices=invoices,
        chart=chart,
        first_page=before is None,
    )


def _usage_chart(ctx: Page, lines: list[LedgerLineOut], currency: str) -> list[tuple[str, str, int]]:
    """The last 14 days' usage charges (GPU time and stopped workspaces), a bar a day in the
    deployment's zone: (day, amount, bar height in % of the tallest), summed in minor units."""
    per_day: dict[str, int] = defaultdict(int)
    for line in lines:
        if line.kind == "usage" and line.amount.startswith("-"):
            day = datetime.fromtimestamp(line.at_ms / 1000, tz=UTC).astimezone(ctx.fmt.tz).date().isoformat()
            per_day[day] += parse_amount(line.amount[1:], currency)
    today = datetime.fromtimestamp(ctx.platform.clock.now_ms() / 1000, tz=UTC).astimezone(ctx.fmt.tz).date()
    days = [date.fromordinal(today.toordinal() - k).isoformat() for k in range(13, -1, -1)]
    tallest = max([per_day[d] for d in days] + [1])
    return [(d, format_minor(per_day[d], currency), 100 * per_day[d] // tallest) for d in days]


# ---------------------------------------------------------------------------- account: tokens, password


@router.get("/account")
def account(ctx: Page) -> Response:
    return ctx.render("account.html", tokens=credentials.list_api_tokens(ctx.platform, ctx.me), new_token=None)


@router.post("/account/tokens")
def create_token(ctx: Post, name: Annotated[str, Form(max_length=64)]) -> Response:
    info, token = credentials.create_api_token(ctx.platform, ctx.me, name)
    # Rendered, not redirected: the token is shown once and never put in a cookie or a URL.
    return ctx.render("account.html", tokens=credentials.list_api_tokens(ctx.platform, ctx.me), new_token=(info, token))


@router.post("/account/tokens/{token_id}/revoke")
def revoke_token(ctx: Post, token_id: int) -> Response:
    info = credentials.revoke_api_token(ctx.platform, ctx.me, token_id)
    return with_flash(back("/account"), "ok", ctx._("Token revoked:") + f" {info.name}")


@router.post("/account/password")
def change_password(
    ctx: Post,
    current: Annotated[str, Form(max_length=256)],
    new: Annotated[str, Form(max_length=256)],
) -> Response:
    credentials.check_password(ctx.platform, ctx.me.name, current)
    credentials.set_password(ctx.platform, ctx.me.name, new)  # signs every browser out, this one too
    response = with_flash(back("/login"), "ok", ctx._("Password changed. Sign in with the new one."))
    response.delete_cookie(COOKIE, path="/")
    return response


@router.get("/invoices/{period}")
def invoice(ctx: Page, period: Annotated[str, Path(pattern=r"^\d{4}-\d{2}$")]) -> Response:
    """The invoice as the API's printable HTML (its own page: print or save it)."""
    return invoices_api.show_invoice(ctx.platform, ctx.me, period, None, "html")  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------- advisor


@router.get("/advisor")
def advisor(
    ctx: Page,
    params: Annotated[str, Query(max_length=20)] = "",
    task: Annotated[str, Query(max_length=20)] = "finetune",
    precision: Annotated[str, Query(max_length=10)] = "bf16",
    tokens: Annotated[str, Query(max_length=20)] = "1e9",
    instance: Annotated[str, Query(max_length=32)] = "",
) -> Response:
    """Which GPU fits my model: the advisor's ranking (``danlu advise``) for a parameter count. Each option on
    this platform links to the rent page with its model and count; from a stopped rental's resize page
    (``instance``: the renter's own, else 404) also to starting that rental on it (issue 26, item 3)."""
    resize_of = instances_api.show(_checked_id(instance), ctx.platform, ctx.me) if instance else None
    result = None
    if params.strip():
        try:
            count, work = float(params), float(tokens) if tokens.strip() else None
        except ValueError:
            raise InvalidInput(
                "invalid_params", ctx._("Give the parameters and tokens as numbers, e.g. 7e9 and 1e9.")
            ) from None
        body = validated(advice_api.AdviceRequest, params=count, task=task, precision=precision, tokens=work)
        app = ctx.request.app
        result = advice_api.post_advice(body, app.state.platform_offers(), app.state.platform_plans())
    return ctx.render(
        "advisor.html",
        result=result,
        params=params,
        task=task,
        precision=precision,
        tokens=tokens,
        tasks=TASKS,
        precisions=PRECISIONS,
        resize_of=resize_of,
    )
