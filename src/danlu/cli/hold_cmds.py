"""Packages and reserved commitments: ``danlu plans``, ``danlu holds``, ``danlu hold buy|show|cancel``
and the operator's ``danlu admin plan set|rm`` and ``danlu admin plans``. Buying and cancelling show
the price or the refund first and ask before they act (``--yes`` to skip the question)."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import typer

from danlu.cli.admin_cmds import admin_app
from danlu.cli.client import Client
from danlu.cli.output import JsonOpt, console, fail, print_json, print_table

hold_app = typer.Typer(help="Buy, show and cancel packages and reserved commitments.", no_args_is_help=True)
admin_plan_app = typer.Typer(help="Package and reservation terms on sale.", no_args_is_help=True)
YesOpt = typer.Option(False, "--yes", "-y", help="Do it without asking (after printing what it costs).")
HOLD_COLUMNS = [
    ("id", "id"),
    ("term", "term"),
    ("gpus", "GPUs"),
    ("state", "state"),
    ("ends", "ends (UTC)"),
    ("paid_text", "paid"),
    ("on_expiry", "at the end"),
    ("instance_ids", "running on it"),
]


def _hold_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            **r,
            "gpus": f"{r['gpu_count']}x {r['gpu_model']}",
            "paid_text": f"{r['paid']} {r['currency']}"
            + (f" (refunded {r['refunded']})" if Decimal(r["refunded"]) else ""),
            "instance_ids": ", ".join(r["in_use_by"]),
            "ends": (r["ends_at"] or "")[:16].replace("T", " "),
        }
        for r in rows
    ]


def plans(as_json: bool = JsonOpt) -> None:
    """Packages and reserved commitments on sale: the discount, the cancellation rule and what one
    GPU of each model costs for the whole term."""
    rows = Client().get("/plans")
    if as_json:
        print_json(rows)
        return
    if not rows:
        console.print("no packages or reservations are on sale here (the operator sets them: `danlu admin plan set`)")
        return
    for r in rows:
        r["prices_text"] = ", ".join(f"{m} {v}" for m, v in r["prices"].items()) + f" {r['currency']}"
        r["off"] = f"-{r['discount']}"
    print_table(
        rows,
        [
            ("term", "term"),
            ("label", "length"),
            ("off", "discount"),
            ("prices_text", "1 GPU costs"),
            ("rule", "early end"),
        ],
    )


def holds(team: str = typer.Option(None, "--team", help="A team's holds."), as_json: bool = JsonOpt) -> None:
    """Your packages and reservations (or a team's): what they keep, until when, and what runs on them."""
    rows = Client().get("/holds", params={"team": team} if team else None)
    print_json(rows) if as_json else print_table(_hold_rows(rows), HOLD_COLUMNS)


def print_quote(q: dict[str, Any]) -> None:
    cur = q["currency"]
    console.print(
        f"{q['term']} ({q['label']}) of {q['gpu_count']}x {q['gpu_model']}: {q['price']} {cur}, paid now "
        f"({q['list_price']} on demand, -{q['discount']}); kept for you from {q['starts_at']} to {q['ends_at']}, "
        f"running or stopped"
    )
    console.print(f"{q['rule']}; vouchers pay for usage, not for packages")


def quote_and_confirm(client: Client, body: dict[str, Any], yes: bool, as_json: bool) -> dict[str, Any]:
    """Print what buying costs and ask (unless ``yes``); ``--json`` without ``--yes`` prints the quote only."""
    q = client.post("/plans/quote", json={k: body[k] for k in ("term", "gpu_model", "gpu_count", "team")})
    if as_json and not yes:
        print_json(q)
        fail("that was the quote; add --yes to buy it", "confirmation_required")
    if not as_json:
        print_quote(q)
    if not yes and not typer.confirm("buy it?", default=False):
        fail("nothing bought", "cancelled_by_user")
    return dict(q)


@hold_app.command("buy")
def buy(
    term: str = typer.Argument(..., help="package-day|week|month, reserved-1m|3m|6m|12m (see `danlu plans`)."),
    gpu: str = typer.Option(..., "--gpu", help="GPU model (see `danlu offers`)."),
    count: int = typer.Option(1, "--count", "--gpus", help="GPUs, all on one host."),
    on_expiry: str = typer.Option("stop", "--on-expiry", help="At the end an instance on it: stop, or on-demand."),
    team: str = typer.Option(None, "--team", help="Buy on this team's account."),
    yes: bool = YesOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Buy a package or reserved commitment: paid now, its GPUs kept for you until it ends; your
    rentals of that model run on them at no further cost."""
    client = Client()
    body = {"term": term, "gpu_model": gpu, "gpu_count": count, "on_expiry": on_expiry, "team": team}
    q = quote_and_confirm(client, body, yes, as_json)
    body["expected_price"] = q["price"]  # what was shown is what is paid, or nothing (409 price_changed)
    h = client.post("/holds", json=body, headers={"Idempotency-Key": str(uuid.uuid4())})
    if as_json:
        print_json(h)
    else:
        console.print(f"{h['id']}: {h['gpu_count']}x {h['gpu_model']} kept until {h['ends_at']}; paid {h['paid']}")
        console.print(f"rent on it: danlu rent --gpu {h['gpu_model']} --count {h['gpu_count']} -- COMMAND")


@hold_app.command("show")
def show(hold_id: str, as_json: bool = JsonOpt) -> None:
    """One package or reservation."""
    h = Client().get(f"/holds/{hold_id}")
    if as_json:
        print_json(h)
        return
    for key in ("id", "term", "account", "state", "host", "starts_at", "ends_at", "ended_at", "on_expiry", "rule"):
        if h.get(key) is not None:
            console.print(f"{key}: {h[key]}", highlight=False)
    console.print(f"GPUs: {h['gpu_count']}x {h['gpu_model']}; running on it: {', '.join(h['in_use_by']) or 'nothing'}")
    console.print(f"paid {h['paid']} {h['currency']} (-{h['discount']}), refunded {h['refunded']}")


@hold_app.command("cancel")
def cancel(hold_id: str, yes: bool = YesOpt, as_json: bool = JsonOpt) -> None:
    """Cancel early: shows what comes back (and what happens to instances on it) and asks first."""
    client = Client()
    q = client.post(f"/holds/{hold_id}/cancel-quote")
    if as_json and not yes:
        print_json(q)
        fail("that was the quote; add --yes to cancel", "confirmation_required")
    if not as_json:
        cur = q["currency"]
        kept = "fee" if q["kind"] == "package" else "discount clawed back"
        console.print(
            f"paid {q['paid']} {cur}; used {q['used']} in {q['elapsed_seconds']} s; unused {q['unused']}; "
            f"{kept} {q['kept']}; refund now {q['refund']} {cur} (less if you wait)"
        )
        for line in q["consequences"]:
            console.print(f"  {line}")
    if not yes and not typer.confirm("cancel it?", default=False):
        fail("nothing cancelled", "cancelled_by_user")
    h = client.post(
        f"/holds/{hold_id}/cancel", json={"quote_id": q["quote_id"]}, headers={"Idempotency-Key": str(uuid.uuid4())}
    )
    print_json(h) if as_json else console.print(f"{h['id']} cancelled; refunded {h['refunded']} {h['currency']}")


@admin_plan_app.command("set")
def admin_set(
    term: str,
    discount: str = typer.Option(..., "--discount", help="Off the on-demand price, in percent, e.g. 20."),
    cancel_fee: str = typer.Option("0", "--cancel-fee", help="A package's early-cancellation fee, in percent."),
    as_json: bool = JsonOpt,
) -> None:
    """Sell TERM (package-day … reserved-12m) at DISCOUNT; holds already bought keep their terms."""
    body = {"discount": discount.rstrip("%"), "cancel_fee": cancel_fee.rstrip("%")}
    r = Client().put(f"/admin/plans/{term}", json=body)
    print_json(r) if as_json else console.print(f"{r['term']}: -{r['discount']}; {r['rule']}")


@admin_plan_app.command("rm")
def admin_rm(term: str) -> None:
    """Stop selling TERM (holds already bought run their course)."""
    Client().delete(f"/admin/plans/{term}")
    console.print(f"{term} is no longer on sale")


def admin_plans(as_json: bool = JsonOpt) -> None:
    """The terms on sale."""
    rows = Client().get("/admin/plans")
    cols = [("term", "term"), ("label", "length"), ("discount", "discount"), ("cancel_fee", "fee"), ("rule", "rule")]
    print_json(rows) if as_json else print_table(rows, cols)


def register(app: typer.Typer) -> None:
    app.command("plans")(plans)
    app.command("holds")(holds)
    app.add_typer(hold_app, name="hold")
    admin_app.add_typer(admin_plan_app, name="plan")
    admin_app.command("plans")(admin_plans)
