"""An invoice as JSON, CSV or a self-contained HTML statement (no external assets: it prints and
archives as is). Pure: the view in, text out."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from html import escape

from danlu.billing.invoices import FORMATS, InvoiceView
from danlu.core.errors import InvalidInput

_COLUMNS = ("description", "plan", "seconds", "price_per_hour", "gross", "discount", "vouchers", "cash", "amount")
_HEADERS = (
    "Description",
    "Plan",
    "GPU time (s)",
    "Price / GPU-h",
    "List price",
    "Discount",
    "Vouchers",
    "Cash",
    "Amount",
)
_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;color:#111;margin:2.5em auto;max-width:64em}
h1{font-size:1.6em;margin:0 0 .2em}table{border-collapse:collapse;width:100%;margin-top:1.5em}
th,td{padding:.35em .6em;border-bottom:1px solid #ccc;text-align:left}td.n,th.n{text-align:right}
tfoot td{font-weight:600;border-top:2px solid #111}.meta td{border:none;padding:.1em .6em .1em 0}
.draft{color:#b00;font-weight:700}.note{color:#555;font-size:.9em;margin-top:2em}
@media print{body{margin:0}}
"""


def render(view: InvoiceView, fmt: str) -> str:
    """``view`` as ``fmt`` (json | csv | html)."""
    if fmt == "json":
        return json.dumps(view.as_dict(), indent=2) + "\n"
    if fmt == "csv":
        return _csv(view)
    if fmt == "html":
        return _html(view)
    raise InvalidInput("invalid_format", f"an invoice is exported as one of {', '.join(FORMATS)}, not {fmt!r}")


def _csv(view: InvoiceView) -> str:
    data = view.as_dict()
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["period", "number", "status", "account", "currency", "adjustment", *_COLUMNS])
    head = [view.period, view.number or "", view.status, view.account_name, view.currency]
    for line in data["lines"]:  # type: ignore[attr-defined]
        w.writerow([*head, line["adjustment"], *(line[c] for c in _COLUMNS)])
    totals = {**data, "description": "TOTAL", "plan": "", "seconds": sum(x.seconds for x in view.lines)}
    totals["price_per_hour"], totals["amount"] = "", data["total"]
    w.writerow([*head, "", *(totals[c] for c in _COLUMNS)])
    return out.getvalue()


def _html(view: InvoiceView) -> str:
    data = view.as_dict()
    cur = escape(view.currency)
    number = f"No. {view.number}" if view.number is not None else '<span class="draft">DRAFT: not final</span>'
    issued = (
        datetime.fromtimestamp(view.finalized_at_ms / 1000, tz=UTC).strftime("%Y-%m-%d")
        if view.finalized_at_ms is not None
        else "not issued (draft: it may still change)"
    )
    rows = []
    for line in data["lines"]:  # type: ignore[attr-defined]
        cells = "".join(
            f'<td class="n">{escape(str(line[c]))}</td>' if i >= 2 else f"<td>{escape(str(line[c]))}</td>"
            for i, c in enumerate(_COLUMNS)
        )
        rows.append(f"<tr>{cells}</tr>")
    if not rows:
        rows.append(f'<tr><td colspan="{len(_COLUMNS)}">No usage in this period.</td></tr>')
    heads = "".join(f'<th class="n">{h}</th>' if i >= 2 else f"<th>{h}</th>" for i, h in enumerate(_HEADERS))
    seconds = sum(x.seconds for x in view.lines)
    foot = (
        f'<tr><td colspan="2">Total ({cur})</td><td class="n">{seconds}</td><td></td>'
        + "".join(f'<td class="n">{escape(str(data[k]))}</td>' for k in ("gross", "discount", "vouchers", "cash"))
        + f'<td class="n">{escape(str(data["total"]))}</td></tr>'
    )
    title = f"Invoice {view.period} - {escape(view.account_name)}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title><style>{_CSS}</style></head>
<body>
<h1>Invoice {number}</h1>
<table class="meta">
<tr><td>Billed to</td><td>{escape(view.account_name)} ({escape(view.account_kind)} account)</td></tr>
<tr><td>Period</td><td>{escape(view.period)} (calendar month)</td></tr>
<tr><td>Status</td><td>{escape(view.status)}</td></tr>
<tr><td>Issued</td><td>{issued}</td></tr>
<tr><td>Currency</td><td>{cur}</td></tr>
</table>
<table>
<thead><tr>{heads}</tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody>
<tfoot>{foot}</tfoot>
</table>
<p class="note">GPU time is billed per whole second from each allocation's start. Amount = list price
&minus; discount = vouchers + cash. Cash was paid from the account's prepaid balance; nothing further is due.
Adjustment lines are usage of an earlier, already final period posted after it closed.</p>
</body></html>
"""
