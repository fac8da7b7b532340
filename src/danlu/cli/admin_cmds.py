"""Operator commands (``danlu admin ...``) through the API: users, top-ups, credit limits, prices. Those that
run on the server's machine without it (backup, restore, db, systemd-unit) are danlu.cli.maintenance_cmds."""

from __future__ import annotations

import uuid

import typer

from danlu.cli.account_cmds import StdinOpt, read_password
from danlu.cli.client import Client
from danlu.cli.output import JsonOpt, console, fail, print_json, print_table

admin_app = typer.Typer(help="Operator commands (need the admin token).", no_args_is_help=True)
user_app = typer.Typer(help="Manage users.", no_args_is_help=True)
price_app = typer.Typer(help="Set prices.", no_args_is_help=True)
admin_app.add_typer(user_app, name="user")
admin_app.add_typer(price_app, name="price")


@user_app.command("create")
def user_create(name: str, as_json: bool = JsonOpt) -> None:
    """Create a renter and print their API token (shown once)."""
    data = Client().post("/admin/users", json={"name": name})
    if as_json:
        print_json({"name": data["name"], "token": data["token"]})
    else:
        console.print(f"user {data['name']} created; token (shown once): {data['token']}")


@user_app.command("password")
def user_password(name: str, from_stdin: bool = StdinOpt) -> None:
    """Set NAME's web console password (they may change it with `danlu password set --change`)."""
    Client().put(f"/admin/users/{name}/password", json={"password": read_password(from_stdin, f"password for {name}")})
    console.print(f"console password set for {name}", markup=False)


@user_app.command("list")
def user_list(as_json: bool = JsonOpt) -> None:
    rows = Client().get("/admin/users")
    if as_json:
        print_json(rows)
    else:
        print_table(rows, [("name", "name"), ("is_admin", "admin")])


@admin_app.command("topup")
def topup(
    name: str,
    amount: str,
    idempotency_key: str = typer.Option(None, "--idempotency-key", help="Retry-safe key (default: random)."),
    as_json: bool = JsonOpt,
) -> None:
    """Add AMOUNT (e.g. 100.00) to a user's balance."""
    post_topup(f"/admin/users/{name}/topup", name, amount, idempotency_key, as_json)


def post_topup(path: str, label: str, amount: str, idempotency_key: str | None, as_json: bool) -> None:
    """A top-up with a retry-safe key (a random one unless given), for a user or a team."""
    key = idempotency_key or str(uuid.uuid4())
    data = Client().post(path, json={"amount": amount}, headers={"Idempotency-Key": key})
    if as_json:
        print_json(data)
    else:
        note = "" if data["created"] else " (already recorded with this key; nothing changed)"
        console.print(f"{label}: balance {data['balance']} {data['currency']}{note}")


@admin_app.command("credit-limit")
def credit_limit(name: str, amount: str, as_json: bool = JsonOpt) -> None:
    """Let NAME's balance go down to -AMOUNT before their instances are stopped."""
    data = Client().put(f"/admin/users/{name}/credit-limit", json={"amount": amount})
    if as_json:
        print_json(data)
    else:
        console.print(f"{name}: credit limit {data['credit_limit']} {data['currency']}")


@admin_app.command("quota")
def quota(
    name: str, gpus: str = typer.Argument(..., help="GPUs NAME may hold at once, or 'none'."), as_json: bool = JsonOpt
) -> None:
    """Cap how many GPUs NAME may hold at once (rentals and job runs together)."""
    if gpus.lower() == "none":
        value = None
    elif gpus.isdigit():
        value = int(gpus)
    else:
        fail(f"GPUS must be a whole number or 'none', not {gpus!r}", "invalid_quota")
    data = Client().put(f"/admin/users/{name}/gpu-quota", json={"gpus": value})
    if as_json:
        print_json(data)
    else:
        console.print(f"{data['name']}: GPU quota {data['gpus'] if data['gpus'] is not None else 'none'}")


@admin_app.command("gpus")
def gpus(as_json: bool = JsonOpt) -> None:
    """Every GPU, real or SIMULATED, and which instance holds it."""
    rows = Client().get("/admin/gpus")
    if as_json:
        print_json(rows)
        return
    for r in rows:
        r["kind"] = "SIMULATED" if r["simulated"] else "real"
        r["vram"] = f"{r['vram_mb'] // 1024} GB"
    print_table(
        rows,
        [
            ("host", "host"),
            ("index", "idx"),
            ("model", "model"),
            ("vram", "VRAM"),
            ("kind", "kind"),
            ("uuid", "uuid"),
            ("instance_id", "instance"),
            ("hold_id", "held for"),
        ],
    )


@price_app.command("set")
def price_set(
    model: str,
    price_per_hour: str,
    interruptible: str = typer.Option(None, "--interruptible", help="Also offer preemptible capacity at this price."),
    as_json: bool = JsonOpt,
) -> None:
    """Set the on-demand price per GPU-hour of MODEL (running rentals keep their price)."""
    body = {"price_per_hour": price_per_hour}
    if interruptible is not None:
        body["interruptible_price_per_hour"] = interruptible
    data = Client().put(f"/admin/prices/{model}", json=body)
    if as_json:
        print_json(data)
    else:
        spot = data["interruptible_price_per_hour"]
        extra = f", interruptible {spot}" if spot else ""
        console.print(f"{data['gpu_model']}: {data['price_per_hour']}{extra} {data['currency']} per GPU-hour")


def register(app: typer.Typer) -> None:
    app.add_typer(admin_app, name="admin")
