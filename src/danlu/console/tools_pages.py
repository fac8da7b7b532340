"""Tools: compare public clouds' prices (``danlu compare``) and the scheduling simulator's built-in
demo (``danlu simulate``).

``/compare`` calls the advisor route's function (``GET /api/v1/advice/compare``) with the route's
own limits. ``/simulate`` replays the demo (16 GPUs, 40 jobs) in this process with the CLI's own
``run_simulation``, one request at a time, and shows the table the CLI prints.
"""

from __future__ import annotations

import re
import threading
import time
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel, Field

from danlu.advisor import service as advisor
from danlu.api.routers import advice as advice_api
from danlu.api.schemas.common import MAX_GPUS
from danlu.catalog.gpu_models import gpu_models
from danlu.catalog.prices import price_catalog
from danlu.console.web import ConsoleRoute, Ctx, Page, validated
from danlu.core.errors import DanluError, InvalidInput
from danlu.scheduling.policies import POLICIES, SIM_POLICIES
from danlu.scheduling.replay import COLUMNS, DEMO_SCENARIO, demo_dir, reference_rows, run_simulation
from danlu.scheduling.scenario import Scenario, load_scenario

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

COMPARE_ROWS = 30  # as many as `danlu compare` prints
# What a person picks from: each model, then each family (A100 → both A100s).
_FAMILIES = sorted({m[: i.start()] for m in gpu_models() for i in re.finditer("-", m)})
GPU_CHOICES = list(dict.fromkeys([*gpu_models(), *_FAMILIES]))

SIM_POLICY_NAMES = [*POLICIES, *SIM_POLICIES]
SIM_DEFAULT = ["fifo", "backfill", "danlu", "danlu-cost"]  # `danlu simulate`'s --policies
SIM_COLUMNS = [(key, label) for key, label in COLUMNS if key != "source"]
# One replay at a time: each holds a core for about a second; more at once would only queue for it.
_ONE_REPLAY = threading.Lock()


class CompareQuery(BaseModel):
    """``GET /api/v1/advice/compare``'s query parameters, with its limits and error codes."""

    gpu: advice_api.GpuOrFamily
    hours: Annotated[float, Field(ge=1e-3, le=1e6, allow_inf_nan=False)] = 1.0
    count: Annotated[int, Field(ge=1, le=MAX_GPUS)] = 1


def _query(ctx: Ctx, name: str, default: str = "", limit: int = 64) -> str:
    """A query parameter as typed (cut at ``limit``): these pages check values themselves, so a bad
    one is shown on the form instead of refused before the page is drawn."""
    return ctx.request.query_params.get(name, default)[:limit]


@router.get("/compare")
def compare(ctx: Page) -> Response:
    """``danlu compare --gpu A100 --hours 10``: public catalog rows in use, cheapest total first."""
    gpu = _query(ctx, "gpu").strip()
    hours, count = _query(ctx, "hours", "1").strip(), _query(ctx, "count", "1").strip()
    spot, multi_machine = _query(ctx, "spot") == "true", _query(ctx, "multi_machine") == "true"
    rows: list[advice_api.CompareRow] | None = None
    left_out = 0
    status = 200
    if gpu:
        try:
            q = validated(CompareQuery, gpu=gpu, hours=hours, count=count)
            rows = advice_api.get_compare(
                q.gpu, hours=q.hours, count=q.count, spot=spot, multi_machine=multi_machine, include_outliers=False
            )
            left_out = len(advisor.outlier_rows(q.gpu))
        except DanluError as e:
            ctx.flash.append(("error", ctx.error_text(e)))
            status = e.http_status
    cat = price_catalog()
    return ctx.render(
        "tools_compare.html",
        status=status,
        gpu=gpu,
        hours=hours,
        count=count,
        spot=spot,
        multi_machine=multi_machine,
        rows=rows,
        shown=(rows or [])[:COMPARE_ROWS],
        left_out=left_out,
        choices=GPU_CHOICES,
        catalog=cat,
        catalog_age=cat.age_days(datetime.now(UTC).date()),
    )


@router.get("/simulate")
def simulate(ctx: Page) -> Response:
    """``danlu simulate`` (the built-in demo) for the chosen policies, when ``run=1``."""
    params = ctx.request.query_params
    run = params.get("run") == "1"
    chosen = [p for p in dict.fromkeys(params.getlist("policies")[:16]) if p]
    interruptible = params.get("interruptible") == "true"
    no_tariffs = params.get("no_tariffs") == "true"
    scenario = load_scenario(demo_dir() / DEMO_SCENARIO)
    trace = scenario.trace_paths[0]
    rows: list[dict[str, Any]] | None = None
    reference: list[dict[str, Any]] = []
    elapsed_s = 0.0
    status = 200
    if run:
        try:
            rows, elapsed_s = run_demo(scenario, chosen, interruptible=interruptible, tariffs=not no_tariffs)
            reference = reference_rows(scenario, trace)
        except DanluError as e:
            ctx.flash.append(("error", ctx.error_text(e)))
            status = e.http_status
    return ctx.render(
        "tools_simulate.html",
        status=status,
        scenario=scenario,
        trace=trace.stem,
        policies=SIM_POLICY_NAMES,
        chosen=chosen if run else SIM_DEFAULT,
        interruptible=interruptible,
        no_tariffs=no_tariffs,
        rows=rows,
        reference=reference,
        columns=SIM_COLUMNS,
        elapsed_s=elapsed_s,
    )


def run_demo(
    scenario: Scenario, policies: list[str], *, interruptible: bool, tariffs: bool
) -> tuple[list[dict[str, Any]], float]:
    """The demo replayed for ``policies`` as ``danlu simulate --policies ...`` does (its defaults:
    60 s notice, 30 s restart overhead, seed 0): the CLI's rows, and the wall time it took (s)."""
    if not policies:
        raise InvalidInput("no_policy", "choose at least one policy")
    unknown = [p for p in policies if p not in SIM_POLICY_NAMES]
    if unknown:
        raise InvalidInput(
            "unknown_policy", f"unknown policy {unknown[0]!r}; choose from {', '.join(SIM_POLICY_NAMES)}"
        )
    with _ONE_REPLAY:
        started = time.monotonic()
        rows = run_simulation(
            scenario, scenario.trace_paths[0], policies, tariffs=tariffs, interruptible=interruptible, notice_s=60
        )
        elapsed = time.monotonic() - started
    return rows, elapsed
