"""Renter commands about the account and the market: login, balance, ledger, offers."""

from __future__ import annotations

import sys
from typing import Any

import typer

from danlu.cli.client import Client, save_config
from danlu.cli.output import JsonOpt, console, print_json, print_table


def login(
    url: str = typer.Option(..., "--url", prompt=True, help="Server URL, e.g. http://127.0.0.1:8000"),
    token: str = typer.Option(..., "--token", prompt=True, hide_input=True, help="Your API token"),
    as_json: bool = typer.Option(
        False, "--json", help="Print the saved URL, user and config file as JSON (never the token)."
    ),
) -> None:
    """Check a token against a server and remember both in the config file."""
    me = Client(url, token).get("/me")
    path = save_config(url, token)
    if as_json:
        print_json({"url": url, "user": me["name"], "is_admin": me.get("is_admin", False), "config": str(path)})
    else:
        console.print(f"logged in to {url} as {me['name']} (saved in {path})", markup=False)


TeamOpt = typer.Option(None, "--team", help="A team's instead of your personal account.")


def balance(team: str = TeamOpt, as_json: bool = JsonOpt) -> None:
    """Your prepaid balance (or a team's)."""
    data = Client().get("/balance", params={"team": team} if team else None)
    if as_json:
        print_json(data)
    else:
        console.print(f"balance {data['balance']} {data['currency']}  (credit limit {data['credit_limit']})")


def ledger(
    limit: int = typer.Option(20, "--limit"),
    before: int = typer.Option(None, "--before", help="Only entries older than this transaction (the next page)."),
    team: str = TeamOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Your ledger entries (or a team's), newest first; `--before TX` pages back."""
    params: dict[str, Any] = {"limit": limit, **({"team": team} if team else {})}
    if before is not None:
        params["before"] = before
    rows = Client().get("/ledger", params=params)
    if as_json:
        print_json(rows)
    else:
        print_table(rows, [("transaction_id", "tx"), ("kind", "kind"), ("amount", "amount"), ("memo", "memo")])


def offers(
    gpu: str = typer.Option(None, "--gpu", help="Only this GPU model."),
    min_vram: int = typer.Option(None, "--min-vram", help="Minimum VRAM in GB."),
    max_price: str = typer.Option(None, "--max-price", help="Maximum price per GPU-hour."),
    as_json: bool = JsonOpt,
) -> None:
    """GPUs you can rent now, cheapest first."""
    params = {k: v for k, v in {"gpu": gpu, "min_vram": min_vram, "max_price": max_price}.items() if v is not None}
    rows = Client().get("/offers", params=params)
    if as_json:
        print_json(rows)
        return
    for r in rows:
        r["gpus"] = f"{r['free']}/{r['total']} free"
        r["price"] = f"{r['price_per_hour']} {r['currency']}/GPU-h" if r["price_per_hour"] else "not priced yet"
        r["spot"] = r["interruptible_price_per_hour"] or "-"
        r["now"] = f"{r['price_now']} ({r['tariff_now']})" if r.get("tariff_now") else (r.get("price_now") or "-")
        r["cheaper"] = f"{r['next_cheaper_price']} from {r['next_cheaper_at']}" if r.get("next_cheaper_at") else "-"
        r["kind"] = "SIMULATED" if r["simulated"] else "real"
        r["per_gpu"] = (
            f"{r['vcpus_per_gpu']} vCPU, {r['memory_per_gpu_mb'] / 1024:.1f} GB RAM" if r["vcpus_per_gpu"] else "-"
        )
    if rows and rows[0]["sandbox"] != "bubblewrap":
        note = {
            "off": "renters' code runs UNSANDBOXED here (--no-sandbox: one trusted user)",
            "unavailable": "NO SANDBOX on this server: only the operator can rent",
        }.get(rows[0]["sandbox"], rows[0]["sandbox"])
        console.print(f"[bold red]{note}[/]")
    print_table(
        rows,
        [
            ("gpu_model", "GPU"),
            ("vram_gb", "VRAM GB"),
            ("gpus", "GPUs"),
            ("max_per_host", "max/host"),
            ("price", "price"),
            ("now", "price now"),
            ("cheaper", "next cheaper window"),
            ("spot", "interruptible"),
            ("per_gpu", "per GPU"),
            ("kind", "kind"),
        ],
        whole=("gpus", "price", "kind"),
        optional=("per_gpu", "max_per_host", "spot", "cheaper", "now", "vram_gb"),  # left out first to last
    )


def read_password(from_stdin: bool, prompt: str) -> str:
    """A password from standard input's first line (scripts) or a hidden prompt asked twice."""
    if from_stdin:
        return sys.stdin.readline().rstrip("\n")
    return str(typer.prompt(prompt, hide_input=True, confirmation_prompt=True))


StdinOpt = typer.Option(False, "--stdin", help="Read the password from standard input's first line.")
password_app = typer.Typer(help="Your web console password.", no_args_is_help=True)
token_app = typer.Typer(help="Named API tokens (beside your first one): create, list, revoke.", no_args_is_help=True)


@password_app.command("set")
def password_set(
    from_stdin: bool = StdinOpt,
    current: bool = typer.Option(False, "--change", help="You have one already: asks for it first."),
) -> None:
    """Set your console password (sign in at the server's / with your user name and it)."""
    body: dict[str, str] = {}
    if current:
        body["current"] = str(typer.prompt("current password", hide_input=True))
    body["new"] = read_password(from_stdin, "new password (10+ characters)")
    Client().put("/me/password", json=body)
    console.print("password set; every browser signed in as you was signed out", markup=False)


@token_app.command("create")
def token_create(name: str, as_json: bool = JsonOpt) -> None:
    """A new named token (shown once); revoke it with `danlu token revoke ID`."""
    data = Client().post("/tokens", json={"name": name})
    if as_json:
        print_json(data)
    else:
        console.print(f"token {data['id']} ({data['name']}), shown once: {data['token']}", markup=False)


@token_app.command("list")
def token_list(as_json: bool = JsonOpt) -> None:
    rows = Client().get("/tokens")
    if as_json:
        print_json(rows)
    else:
        print_table(
            rows,
            [("id", "id"), ("name", "name"), ("hint", "ends in"), ("created_at", "created"), ("revoked_at", "revoked")],
        )


@token_app.command("revoke")
def token_revoke(token_id: int, as_json: bool = JsonOpt) -> None:
    """Revoke a named token: it stops working at once."""
    data = Client().delete(f"/tokens/{token_id}")
    if as_json:
        print_json(data)
    else:
        console.print(f"token {data['id']} ({data['name']}) revoked", markup=False)


def register(app: typer.Typer) -> None:
    app.add_typer(password_app, name="password")
    app.add_typer(token_app, name="token")
    app.command("login")(login)
    app.command("balance")(balance)
    app.command("ledger")(ledger)
    app.command("offers")(offers)
