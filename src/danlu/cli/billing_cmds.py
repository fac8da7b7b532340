"""Invoices and cost: `danlu invoices`, `danlu invoice show`, `danlu cost`, `danlu admin invoices finalize`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from danlu.cli.admin_cmds import admin_app
from danlu.cli.client import Client
from danlu.cli.output import JsonOpt, cli_language, console, fail, print_json, print_table

invoice_app = typer.Typer(help="Invoices: one per month, draft until the month closes.", no_args_is_help=True)
admin_invoice_app = typer.Typer(help="Finalise invoices.", no_args_is_help=True)
TeamOpt = typer.Option(None, "--team", help="A team's invoices (default: your default team, else personal).")
FORMATS = ("json", "csv", "html")


def invoices(team: str = TeamOpt, as_json: bool = JsonOpt) -> None:
    """Your invoices, newest month first; the current month's is a draft."""
    rows = Client().get("/invoices", params={"team": team} if team else None)
    if as_json:
        print_json(rows)
        return
    for r in rows:
        r["no"] = r["number"] if r["number"] is not None else "-"
        r["total_text"] = f"{r['total']} {r['currency']}"
    print_table(
        rows,
        [("period", "period"), ("status", "status"), ("no", "number"), ("account", "account"), ("total_text", "total")],
    )


def _text(client: Client, path: str, params: dict[str, str]) -> str:
    """A CSV or HTML export as text (Client.get decodes JSON): the same errors as every command."""
    try:
        resp = client._http.get(path, params=params)
    except client._httpx.HTTPError as exc:
        fail(f"cannot reach the danlu server at {client.url} ({exc}); start it with `make run` or set DANLU_URL")
    if resp.status_code != 200:
        try:
            err = resp.json()["error"]
            fail(err["message"], err["code"])
        except (ValueError, KeyError, TypeError):
            fail(f"HTTP {resp.status_code} from {client.url}: {resp.text[:200]}")
    return str(resp.text)


def show(
    period: str = typer.Argument(..., help="The month, YYYY-MM."),
    team: str = TeamOpt,
    fmt: str = typer.Option("json", "--format", help="json, csv or html (a self-contained statement)."),
    output: Path = typer.Option(None, "-o", "--output", help="Write to this file instead of standard output."),
) -> None:
    """One month's invoice as JSON, CSV or HTML."""
    if fmt not in FORMATS:
        fail(f"--format is one of {', '.join(FORMATS)}, not {fmt!r}", "invalid_format")
    params = {"format": fmt, **({"team": team} if team else {})}
    if fmt == "html":
        params["lang"] = cli_language()  # the statement in the CLI's language (DANLU_LANG / LANG)
    client = Client()
    if fmt == "json":
        body = json.dumps(client.get(f"/invoices/{period}", params=params), indent=2) + "\n"
    else:
        body = _text(client, f"/invoices/{period}", params)
    if output is None:
        typer.echo(body, nl=False)
        return
    try:
        output.write_text(body, encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {output}: {exc.strerror}")
    console.print(f"wrote {output}")


def cost(instance_id: str = typer.Argument(..., help="The instance id."), as_json: bool = JsonOpt) -> None:
    """What an instance has cost, line by line: plan, seconds, rate, discount, vouchers, cash."""
    data: dict[str, Any] = Client().get(f"/instances/{instance_id}/cost")
    if as_json:
        print_json(data)
        return
    for line in data["lines"]:
        if line["plan"] == "storage":  # a stopped workspace: MiB at a price per GB-month
            line["rate"] = f"{line['gpus']} MiB x {line['price_per_hour']}/GB-month"
        else:  # a tariff's part says its multiplier: the price applied is the list price times it
            mult = line.get("multiplier", "1")
            line["rate"] = f"{line['gpus']} x {line['price_per_hour']}/h" + (f" x {mult}" if mult != "1" else "")
        line["what"] = line["description"] + (f" ({line['tariff']})" if line["tariff"] else "")
    print_table(
        data["lines"],
        [
            ("what", ""),
            ("plan", "plan"),
            ("seconds", "seconds"),
            ("rate", "rate"),
            ("gross", "list price"),
            ("discount", "discount"),
            ("vouchers", "vouchers"),
            ("cash", "cash"),
            ("amount", "amount"),
        ],
        title=f"{instance_id}: {data['cost']} {data['currency']}",
    )


def finalize(
    period: str = typer.Argument(None, help="A month that has ended, YYYY-MM; omitted: all that are due."),
) -> None:
    """Finalise invoices: number them and make them immutable (idempotent)."""
    data = Client().post("/admin/invoices/finalize", json={"period": period} if period else {})
    console.print(f"finalised {data['finalized']} invoice(s)")


def register(app: typer.Typer) -> None:
    app.command("invoices")(invoices)
    invoice_app.command("show")(show)
    app.add_typer(invoice_app, name="invoice")
    app.command("cost")(cost)
    admin_invoice_app.command("finalize")(finalize)
    admin_app.add_typer(admin_invoice_app, name="invoices")
