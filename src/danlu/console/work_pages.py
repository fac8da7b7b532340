"""The renter's work pages: submit a batch job (``danlu run``), an instance's start/stop schedule
(``danlu schedule``) and usage chart (``danlu show ID --chart F.svg``), the event feed
(``danlu events``) and webhooks (``danlu webhook``).

Thin, like renter.py: each form goes through the API's own request model (same limits, same error
codes) into the function the API's route calls, and each page renders the API's response models.
"""

from __future__ import annotations

import re
import shlex
from html import escape
from typing import Annotated

from fastapi import APIRouter, Form
from fastapi.responses import Response

from danlu.api.routers import instances as instances_api
from danlu.api.routers import jobs as jobs_api
from danlu.api.routers import telemetry as telemetry_api
from danlu.api.routers import webhooks as webhooks_api
from danlu.api.schemas.common import INSTANCE_ID
from danlu.api.schemas.instances import OfferOut, ScheduleIn
from danlu.compute.images import list_images
from danlu.compute.limits import parse_seconds
from danlu.compute.offers import list_offers
from danlu.compute.views import list_instances
from danlu.console.web import SECURITY_HEADERS, ConsoleRoute, Ctx, Page, Post, back, validated, with_flash
from danlu.core.errors import DanluError, InvalidInput, NotFound
from danlu.notify import webhooks as webhooks_svc
from danlu.scheduling import jobs as jobs_svc
from danlu.scheduling.model import PRIORITIES
from danlu.telemetry.chart import H, W, render_svg

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
EVENTS_PAGE = 100
_INSTANCE_ID = re.compile(INSTANCE_ID)
_KIND = re.compile(telemetry_api.KIND)
_SINCE = re.compile(telemetry_api.SINCE)
_DAYS_SPLIT = re.compile(r"[\s,]+")

# A form's text fields are plain strings here, checked by the API's models: a FastAPI-level
# constraint would fail outside the console's error handling (a 500 page instead of the message).
Text = Annotated[str, Form()]


def _instance_id(instance_id: str) -> str:
    if len(instance_id) > 64 or not _INSTANCE_ID.match(instance_id):
        raise NotFound("instance_not_found", "there is no such instance here")
    return instance_id


def _or_none(text: str) -> str | None:
    return text.strip() or None


# ---------------------------------------------------------------------------- submit a job


def _job_form(ctx: Ctx, values: dict[str, object], error: str | None = None, status: int = 200) -> Response:
    offers = [OfferOut.of(o) for o in list_offers(ctx.platform) if o.price_per_hour_minor is not None]
    # what --after and --workspace may name: the renter's jobs that may still succeed, rentals that keep a workspace
    jobs = [j for j in jobs_svc.list_jobs(ctx.platform, ctx.me) if j.status not in ("failed", "cancelled")]
    rentals = [i for i in list_instances(ctx.platform, ctx.me) if i.workspace_released_at_ms is None]
    return ctx.render(
        "work_job_new.html",
        status=status,
        offers=offers,
        jobs=jobs,
        rentals=rentals,
        images=list_images(ctx.platform),
        priorities=list(PRIORITIES),
        v=values,
        error=error,
    )


JOB_DEFAULTS: dict[str, object] = {
    "command": "",
    "gpus": "1",
    "gpus_max": "",
    "gpu_types": [],
    "est_duration": "",
    "interruptible": False,
    "priority": "normal",
    "deadline": "",
    "image": "host",
    "idle_stop": "",
    "max_duration": "",
    "after": "",
    "workspace": "",
}


@router.get("/jobs/new")
def job_form(ctx: Page) -> Response:
    """The form of ``danlu run --gpus 2 --gpu A100-80GB,T4 --est-duration 3600 -- CMD``."""
    return _job_form(ctx, dict(JOB_DEFAULTS))


@router.post("/jobs/new")
def submit_job(
    ctx: Post,
    command: Text = "",
    gpus: Text = "1",
    gpus_max: Text = "",
    gpu_types: Annotated[list[str] | None, Form()] = None,
    est_duration: Text = "",
    interruptible: Text = "",
    priority: Text = "normal",
    deadline: Text = "",
    image: Text = "host",
    idle_stop: Text = "",
    max_duration: Text = "",
    after: Text = "",
    workspace: Text = "",
) -> Response:
    values: dict[str, object] = {
        "after": after,
        "workspace": workspace,
        "command": command,
        "gpus": gpus,
        "gpus_max": gpus_max,
        "gpu_types": list(gpu_types or []),
        "est_duration": est_duration,
        "interruptible": bool(interruptible),
        "priority": priority,
        "deadline": deadline,
        "image": image,
        "idle_stop": idle_stop,
        "max_duration": max_duration,
    }
    try:
        body = validated(
            jobs_api.JobIn,
            command=_argv(ctx, command),
            gpus=_whole(gpus, "invalid_gpu_count", ctx._("GPUs is a whole number, e.g. 2.")),
            gpus_max=_whole(gpus_max, "invalid_gpu_count", ctx._("GPUs is a whole number, e.g. 2."))
            if gpus_max.strip()
            else None,
            gpu_types=list(gpu_types or []),
            est_duration_s=_duration(ctx, est_duration),
            interruptible=bool(interruptible),
            priority=priority.strip() or "normal",
            deadline=_or_none(deadline),
            image=image.strip() or "host",
            idle_stop=_or_none(idle_stop),
            max_duration=_or_none(max_duration),
            after=_or_none(after),
            workspace=_or_none(workspace),
        )
        out = jobs_api.submit(body, ctx.platform, ctx.me, ctx.request)
    except DanluError as e:
        # Shown on the form with what was typed (a redirect would lose a long command).
        return _job_form(ctx, values, error=ctx.error_text(e), status=e.http_status)
    return with_flash(back(f"/jobs/{out.id}"), "ok", ctx._("Submitted: the job is queued for the scheduler."))


def _argv(ctx: Ctx, command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError as e:
        raise InvalidInput(
            "invalid_command", ctx._("The command could not be read (unbalanced quotes?).") + f" {e}"
        ) from None


def _whole(text: str, code: str, message: str) -> int:
    text = text.strip()
    if not text.isdigit() or len(text) > 12:
        raise InvalidInput(code, message)
    return int(text)


def _duration(ctx: Ctx, text: str) -> int | None:
    """The estimated run time: seconds (as ``--est-duration 3600``) or 90s, 30m, 6h, 2d."""
    text = text.strip()
    if not text:
        return None
    if text.isdigit():
        return _whole(text, "invalid_duration", ctx._("The estimated duration is seconds (3600) or e.g. 6h."))
    return parse_seconds(text, "invalid_duration", ctx._("The estimated duration"))


# ---------------------------------------------------------------------------- schedules


@router.get("/instances/{instance_id}/schedule")
def schedule(ctx: Page, instance_id: str) -> Response:
    out = instances_api.show(_instance_id(instance_id), ctx.platform, ctx.me)  # another's: 404
    return ctx.render("work_schedule.html", i=out, s=out.schedule, timezone=ctx.platform.settings.timezone)


@router.post("/instances/{instance_id}/schedule")
def set_schedule(ctx: Post, instance_id: str, stop: Text = "", start: Text = "", days: Text = "") -> Response:
    """``danlu schedule ID --stop 23:00 --start 08:00 --days mon-fri``: replaces any schedule."""
    iid = _instance_id(instance_id)
    picked = [d for d in _DAYS_SPLIT.split(days.strip().lower()) if d] or ["daily"]
    body = validated(ScheduleIn, stop=_or_none(stop), start=_or_none(start), days=picked)
    out = instances_api.set_schedule(iid, body, ctx.platform, ctx.me)
    return with_flash(back(f"/instances/{iid}/schedule"), "ok", ctx._("Schedule saved:") + f" {out.description}")


@router.post("/instances/{instance_id}/schedule/clear")
def clear_schedule(ctx: Post, instance_id: str) -> Response:
    iid = _instance_id(instance_id)
    instances_api.clear_schedule(iid, ctx.platform, ctx.me)
    return with_flash(back(f"/instances/{iid}/schedule"), "ok", ctx._("Schedule removed."))


# ---------------------------------------------------------------------------- usage chart


@router.get("/instances/{instance_id}/chart.svg")
def chart(ctx: Page, instance_id: str, since: str = "1h") -> Response:
    """The chart ``danlu show ID --chart F.svg`` writes, of the same metrics as the API's; before
    the first sample, a chart that says so (the instance page shows it as an image)."""
    if not _SINCE.match(since):
        raise InvalidInput("invalid_since", "since is a duration back from now such as 15m, 6h or 7d, or epoch ms")
    m = telemetry_api.instance_metrics(_instance_id(instance_id), ctx.platform, ctx.me, since=since)
    if any(pt.util_pct is not None for series in [*m.gpus, m.run] for pt in series.points):
        svg = render_svg(m.model_dump(mode="json"), tz=ctx.fmt.tz, tr=ctx._)
    else:
        svg = _empty_chart(m.instance_id, ctx._("No samples yet: an instance is sampled while it runs."))
    return Response(svg, media_type="image/svg+xml", headers=SECURITY_HEADERS)


def _empty_chart(title: str, message: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
        'font-family="sans-serif" font-size="14">\n'
        f'<rect width="{W}" height="{H}" fill="white" stroke="#999"/>\n'
        f'<text x="20" y="28" font-size="15">{escape(title)}</text>\n'
        f'<text x="{W // 2}" y="{H // 2}" text-anchor="middle" fill="#666">{escape(message)}</text>\n'
        "</svg>\n"
    )


# ---------------------------------------------------------------------------- events


@router.get("/events")
def events(ctx: Page, kind: str = "") -> Response:
    """``danlu events``: newest first. The API pages only forward (``after``, for polling), so this
    is the newest page; there is no older cursor to follow."""
    kind = kind.strip()
    if kind and not _KIND.match(kind):
        raise InvalidInput("invalid_kind", "kind is a word of lowercase letters and _, e.g. idle_stop")
    rows = telemetry_api.events(ctx.platform, ctx.me, after=0, limit=EVENTS_PAGE, kind=kind or None)
    return ctx.render("work_events.html", events=rows, kind=kind, kinds=webhooks_svc.KINDS, page=EVENTS_PAGE)


# ---------------------------------------------------------------------------- webhooks


def _webhooks_page(ctx: Ctx, created: webhooks_api.WebhookOut | None = None) -> Response:
    hooks = webhooks_api.list_webhooks(ctx.platform, ctx.me)
    return ctx.render("work_webhooks.html", hooks=hooks, kinds=webhooks_svc.KINDS, created=created)


@router.get("/webhooks")
def webhooks(ctx: Page) -> Response:
    return _webhooks_page(ctx)


@router.post("/webhooks/add")
def add_webhook(ctx: Post, url: Text = "", kinds: Annotated[list[str] | None, Form()] = None) -> Response:
    """``danlu webhook add URL [--kind K]``; the signing secret is shown on this answer only."""
    body = validated(webhooks_api.WebhookIn, url=url.strip(), kinds=list(kinds or []))
    created = webhooks_api.add(body, ctx.platform, ctx.me)
    # Rendered, not redirected: the secret is never put in a cookie or a URL.
    return _webhooks_page(ctx, created)


@router.post("/webhooks/{webhook_id}/remove")
def remove_webhook(ctx: Post, webhook_id: str) -> Response:
    if not webhook_id.isdigit() or not 0 < int(webhook_id) < 2**31:
        raise NotFound("webhook_not_found", f"no webhook {webhook_id[:20]!r}")
    webhooks_api.remove(int(webhook_id), ctx.platform, ctx.me)
    return with_flash(back("/webhooks"), "ok", ctx._("Webhook removed: nothing more is sent to it."))
