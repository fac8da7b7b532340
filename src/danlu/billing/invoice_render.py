"""An invoice as JSON, CSV or a self-contained HTML statement (no external assets: it prints and
archives as is). Pure: the view in, text out."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from datetime import UTC, datetime
from html import escape

from danlu.billing.commitments import TERMS
from danlu.billing.invoice_view import InvoiceView, LineView
from danlu.billing.invoices import FORMATS
from danlu.core.errors import InvalidInput
from danlu.i18n.sentences import translate

_COLUMNS = ("description", "plan", "seconds", "price_per_hour", "gross", "discount", "vouchers", "cash", "amount")
# The HTML statement's words per language (issue 28, finding 12); JSON and CSV keep English keys for programs.
_WORDS: dict[str, dict[str, str]] = {
    "en": {
        "html_lang": "en", "invoice": "Invoice", "no": "No. {number}", "draft": "DRAFT: not final",
        "not_issued": "not issued (draft: it may still change)", "no_usage": "No usage in this period.",
        "total": "Total ({cur})", "billed_to": "Billed to", "account": "{name} ({kind} account)",
        "period": "Period", "month": "{period} (calendar month)", "status": "Status", "issued": "Issued",
        "currency": "Currency", "draft_status": "draft", "final_status": "final",
        "h_description": "Description", "h_plan": "Plan", "h_seconds": "Billed time", "h_price": "Price / GPU-h",
        "h_gross": "List price", "h_discount": "Discount", "h_vouchers": "Vouchers", "h_cash": "Cash",
        "h_amount": "Amount",
        "units": "d h min s", "unit_sep": " ", "term": "{span} (term)", "unused": "{span} (unused)",
        "note": "GPU time is billed per whole second from each allocation's start; billed time is the allocation's,\n"
        "whatever its GPU count: list price = billed time × GPUs × price per GPU-hour. Amount = list price\n"
        "&minus; discount = vouchers + cash. A package's or reservation's line is its whole term, paid at purchase;\n"
        "a refund's, the part of the term not used. Cash was paid from the account's prepaid balance; nothing\n"
        "further is due.\n"
        "Adjustment lines are usage of an earlier, already final period posted after it closed.",
    },
    "zh_CN": {
        "html_lang": "zh-CN", "invoice": "发票", "no": "编号 {number}", "draft": "草稿：尚未定稿",
        "not_issued": "尚未开具（草稿：可能仍会变化）", "no_usage": "本期没有用量。",
        "total": "合计（{cur}）", "billed_to": "付款方", "account": "{name}（{kind}账户）",
        "period": "账期", "month": "{period}（自然月）", "status": "状态", "issued": "开具日期",
        "currency": "货币", "draft_status": "草稿", "final_status": "已定稿",
        "h_description": "说明", "h_plan": "计划", "h_seconds": "计费时长", "h_price": "单价 / GPU·小时",
        "h_gross": "标价", "h_discount": "折扣", "h_vouchers": "代金券", "h_cash": "现金",
        "h_amount": "金额",
        "units": "天 小时 分 秒", "unit_sep": "", "term": "{span}（期限）", "unused": "{span}（未使用）",
        "note": "GPU 时长从每次分配开始按整秒计费；计费时长是这次分配的时长，与 GPU 数量无关：\n"
        "标价 = 计费时长 × GPU 数 × 每 GPU·小时单价。金额 = 标价 &minus; 折扣 = 代金券 + 现金。\n"
        "套餐或预留的行是购买时支付的整个期限；退款行是未使用的部分。\n"
        "现金已从账户的预付余额中支付，无需另行付款。调整行是某个已定稿的较早账期在结算后才入账的用量。",
    },
}  # fmt: skip
_KINDS = {"zh_CN": {"personal": "个人", "team": "团队"}}
_HEADS = ("h_description", "h_plan", "h_seconds", "h_price", "h_gross", "h_discount", "h_vouchers", "h_cash",
          "h_amount")  # fmt: skip
_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;color:#111;margin:2.5em auto;max-width:64em}
h1{font-size:1.6em;margin:0 0 .2em}table{border-collapse:collapse;width:100%;margin-top:1.5em}
th,td{padding:.35em .6em;border-bottom:1px solid #ccc;text-align:left}td.n,th.n{text-align:right}
tfoot td{font-weight:600;border-top:2px solid #111}.meta td{border:none;padding:.1em .6em .1em 0}
.draft{color:#b00;font-weight:700}.note{color:#555;font-size:.9em;margin-top:2em}
@media print{body{margin:0}}
"""


def render(view: InvoiceView, fmt: str, lang: str = "en", gettext: Callable[[str], str] | None = None) -> str:
    """``view`` as ``fmt`` (json | csv | html); the HTML statement in ``lang`` (en | zh_CN), its lines'
    descriptions read through ``gettext`` (that language's catalog; danlu.i18n.sentences)."""
    if fmt == "json":
        return json.dumps(view.as_dict(), indent=2) + "\n"
    if fmt == "csv":
        return _csv(view)
    if fmt == "html":
        return _html(view, _WORDS.get(lang, _WORDS["en"]), _KINDS.get(lang, {}), gettext or (lambda text: text))
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


def _span(seconds: int, w: dict[str, str]) -> str:
    """Whole seconds in the statement's words: ``1 h 2 min 5 s``, ``7 d``; ``1小时2分5秒``, ``7天``."""
    left, parts = abs(seconds), []
    for size, unit in zip((86_400, 3_600, 60, 1), w["units"].split(), strict=True):
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count}{w['unit_sep']}{unit}")
    return ("−" if seconds < 0 else "") + (" " if w["unit_sep"] else "").join(parts or [f"0{w['unit_sep']}{unit}"])


def _billed_time(line: LineView, w: dict[str, str]) -> str:
    """A usage line's billed time; a package's or reservation's line says it is the term (or its unused part)."""
    span = _span(line.seconds, w)
    if line.plan in TERMS:
        return w["term" if line.seconds >= 0 else "unused"].format(span=span)
    return span


def _html(view: InvoiceView, w: dict[str, str], kinds: dict[str, str], gettext: Callable[[str], str]) -> str:
    data = view.as_dict()
    cur = escape(view.currency)
    number = (
        w["no"].format(number=view.number) if view.number is not None else f'<span class="draft">{w["draft"]}</span>'
    )
    issued = (
        datetime.fromtimestamp(view.finalized_at_ms / 1000, tz=UTC).strftime("%Y-%m-%d")
        if view.finalized_at_ms is not None
        else w["not_issued"]
    )
    rows = []
    for src, line in zip(view.lines, data["lines"], strict=True):  # type: ignore[call-overload]
        shown = {**line, "seconds": _billed_time(src, w), "description": translate(src.description, gettext)}
        cells = "".join(
            f'<td class="n">{escape(str(shown[c]))}</td>' if i >= 2 else f"<td>{escape(str(shown[c]))}</td>"
            for i, c in enumerate(_COLUMNS)
        )
        rows.append(f"<tr>{cells}</tr>")
    if not rows:
        rows.append(f'<tr><td colspan="{len(_COLUMNS)}">{w["no_usage"]}</td></tr>')
    heads = "".join(f'<th class="n">{w[h]}</th>' if i >= 2 else f"<th>{w[h]}</th>" for i, h in enumerate(_HEADS))
    foot = (  # no total of the time column: its lines add allocations of any GPU count and packages' terms
        f'<tr><td colspan="2">{w["total"].format(cur=cur)}</td><td></td><td></td>'
        + "".join(f'<td class="n">{escape(str(data[k]))}</td>' for k in ("gross", "discount", "vouchers", "cash"))
        + f'<td class="n">{escape(str(data["total"]))}</td></tr>'
    )
    status = w.get(f"{view.status}_status", view.status)
    kind = kinds.get(view.account_kind, view.account_kind)
    title = f"{w['invoice']} {view.period} - {escape(view.account_name)}"
    return f"""<!DOCTYPE html>
<html lang="{w["html_lang"]}"><head><meta charset="utf-8"><title>{title}</title><style>{_CSS}</style></head>
<body>
<h1>{w["invoice"]} {number}</h1>
<table class="meta">
<tr><td>{w["billed_to"]}</td><td>{w["account"].format(name=escape(view.account_name), kind=escape(kind))}</td></tr>
<tr><td>{w["period"]}</td><td>{w["month"].format(period=escape(view.period))}</td></tr>
<tr><td>{w["status"]}</td><td>{escape(status)}</td></tr>
<tr><td>{w["issued"]}</td><td>{issued}</td></tr>
<tr><td>{w["currency"]}</td><td>{cur}</td></tr>
</table>
<table>
<thead><tr>{heads}</tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody>
<tfoot>{foot}</tfoot>
</table>
<p class="note">{w["note"]}</p>
</body></html>
"""
