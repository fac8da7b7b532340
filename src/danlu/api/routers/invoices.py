"""Invoices (``/invoices``), one instance's cost (``/instances/{id}/cost``) and the operator's
finalisation (``/admin/invoices/finalize``). Parse, authorise, call one service, format."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, JSONResponse, Response

from danlu.api.deps import AdminUser, CurrentUser, PlatformDep
from danlu.api.paging import ListRoute, paged
from danlu.api.schemas.common import InstanceIdPath, errors
from danlu.api.schemas.idempotency import IdempotencyKeyHeader
from danlu.api.schemas.invoices import (
    CostOut,
    FinalizeIn,
    FinalizeOut,
    InvoiceFormatQuery,
    InvoiceLangQuery,
    InvoiceOut,
    InvoiceTeamQuery,
    PeriodPath,
)
from danlu.billing import idempotency
from danlu.billing import invoices as svc
from danlu.billing.invoice_render import render
from danlu.compute.cost import explain_cost
from danlu.i18n.catalogs import translations

router = APIRouter(route_class=ListRoute, tags=["invoices"], responses=errors(401))

_EXPORTS: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The invoice: JSON, or with `format` csv (text/csv) or html (a self-contained statement)",
        "content": {"text/csv": {"schema": {"type": "string"}}, "text/html": {"schema": {"type": "string"}}},
    }
}


@router.get(
    "/invoices", response_model=list[InvoiceOut], **paged("period", "account", descending=True), responses=errors(404)
)
def list_invoices(p: PlatformDep, user: CurrentUser, team: InvoiceTeamQuery = None) -> list[InvoiceOut]:
    """Final invoices and drafts (always the current month's), newest month first."""
    return [InvoiceOut.model_validate(v.as_dict()) for v in svc.invoices_of(p, user, team)]


@router.get("/invoices/{period}", response_model=InvoiceOut, responses={**errors(404), **_EXPORTS})
def show_invoice(
    p: PlatformDep,
    user: CurrentUser,
    period: PeriodPath,
    team: InvoiceTeamQuery = None,
    format: InvoiceFormatQuery = "json",
    lang: InvoiceLangQuery = "en",
) -> Any:
    view = svc.invoice_of(p, user, period, team)
    if format == "csv":
        name = f"invoice-{view.account_name}-{view.period}.csv"
        return Response(
            render(view, "csv"),
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )
    if format == "html":
        return HTMLResponse(render(view, "html", lang, translations(lang).gettext))
    return InvoiceOut.model_validate(view.as_dict())


@router.get("/instances/{instance_id}/cost", response_model=CostOut, responses=errors(404))
def instance_cost(p: PlatformDep, user: CurrentUser, instance_id: InstanceIdPath) -> CostOut:
    """What the instance has cost, line by line; the amounts add up to ``cost``."""
    return CostOut.model_validate(explain_cost(p, user, instance_id).as_dict())


@router.post("/admin/invoices/finalize", response_model=FinalizeOut, tags=["admin"], responses=errors(400, 403, 409))
def finalize(
    p: PlatformDep, admin: AdminUser, body: FinalizeIn, idempotency_key: IdempotencyKeyHeader = None
) -> JSONResponse:
    """Finalise ``period`` now (it must have ended; the grace window is waived), or every month
    past its grace window. Idempotent; with ``Idempotency-Key`` a retry answers the first response."""

    def run() -> tuple[int, Any]:
        return 200, FinalizeOut(finalized=svc.admin_finalize(p, body.period)).model_dump(mode="json")

    scope = idempotency.scope_of(admin.id, "POST /admin/invoices/finalize")
    status, out = idempotency.run_once(p, scope, idempotency_key, body.model_dump(mode="json"), run)
    return JSONResponse(out, status_code=status)
