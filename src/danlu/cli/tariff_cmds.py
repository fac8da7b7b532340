"""Off-peak tariffs: ``danlu tariffs`` and ``danlu admin tariff add|list|retire``."""

from __future__ import annotations

from typing import Any

import typer

from danlu.cli.admin_cmds import admin_app
from danlu.cli.client import Client
from danlu.cli.output import JsonOpt, console, print_json, print_table

admin_tariff_app = typer.Typer(help="Off-peak tariffs: time-of-day price multipliers.", no_args_is_help=True)
COLUMNS = [("id", "id"), ("name", "name"), ("days_text", "days"), ("window", "window"), ("multiplier", "multiplier")]


def _rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            **r,
            "days_text": ",".join(r["days"]),
            "window": f"{r['from']}-{r['to']}",
            "plans_text": ",".join(r["plans"]) or "all",
        }
        for r in rows
    ]


def _split(text: str | None) -> list[str]:
    return [x.strip() for x in (text or "").split(",") if x.strip()]


def tariffs(as_json: bool = JsonOpt) -> None:
    """The off-peak windows in force (the server's time zone); `danlu offers` shows the price now."""
    rows = Client().get("/tariffs")
    print_json(rows) if as_json else print_table(_rows(rows), [*COLUMNS, ("plans_text", "plans")])


@admin_tariff_app.command("add")
def add(
    name: str,
    days: str = typer.Option(..., "--days", help="Days a window starts on: mon-fri, sat,sun, weekdays, daily …"),
    start: str = typer.Option(..., "--from", help="Local start time, HH:MM."),
    end: str = typer.Option(..., "--to", help="Local end time, HH:MM (at or before --from: past midnight)."),
    multiplier: str = typer.Option(..., "--multiplier", help="Price factor in the window: 0.5 is -50%."),
    plans: str = typer.Option(None, "--plans", help="Only these plans: on-demand, interruptible (default: all)."),
    as_json: bool = JsonOpt,
) -> None:
    """Add an off-peak rule NAME; allocations starting from now are rated by it."""
    body = {
        "name": name,
        "days": [d.lower() for d in _split(days)],  # the server reads mon-fri, weekdays … (whole names only)
        "from": start,
        "to": end,
        "multiplier": multiplier,
        "plans": _split(plans),
    }
    r = Client().post("/admin/tariffs", json=body)
    if as_json:
        print_json(r)
    else:
        console.print(
            f"tariff {r['id']} {r['name']}: {','.join(r['days'])} {r['from']}-{r['to']} x{r['multiplier']}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


@admin_tariff_app.command("list")
def list_rules(
    include_retired: bool = typer.Option(False, "--all", help="Retired rules too."), as_json: bool = JsonOpt
) -> None:
    rows = Client().get("/admin/tariffs", params={"all": "true"} if include_retired else None)
    if as_json:
        print_json(rows)
    else:
        print_table(_rows(rows), [*COLUMNS, ("plans_text", "plans"), ("retired_at", "retired")])


@admin_tariff_app.command("retire")
def retire(rule_id: int = typer.Argument(..., metavar="ID"), as_json: bool = JsonOpt) -> None:
    """Retire rule ID: no new allocation gets it; running ones keep it."""
    r = Client().delete(f"/admin/tariffs/{rule_id}")
    print_json(r) if as_json else console.print(f"tariff {r['id']} {r['name']} retired at {r['retired_at']}")


def register(app: typer.Typer) -> None:
    app.command("tariffs")(tariffs)
    admin_app.add_typer(admin_tariff_app, name="tariff")
