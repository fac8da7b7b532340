"""Voucher commands: ``danlu vouchers``, ``danlu voucher redeem``, and the operator's
``danlu admin voucher ...`` and ``danlu admin team ...``."""

from __future__ import annotations

from typing import Any

import typer

from danlu.cli.admin_cmds import admin_app, post_topup
from danlu.cli.client import Client
from danlu.cli.output import JsonOpt, console, fail, print_json, print_table

voucher_app = typer.Typer(help="Redeem vouchers.", no_args_is_help=True)
admin_voucher_app = typer.Typer(help="Voucher campaigns and grants.", no_args_is_help=True)
campaign_app = typer.Typer(help="Voucher campaigns.", no_args_is_help=True)
admin_team_app = typer.Typer(help="Teams' money.", no_args_is_help=True)
admin_voucher_app.add_typer(campaign_app, name="campaign")
VOUCHER_COLUMNS = [
    ("campaign", "campaign"),
    ("remaining_text", "remaining"),
    ("scope", "pays for"),
    ("expires_at", "expires"),
    ("status", "status"),
]


def _rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            **r,
            "remaining_text": f"{r['remaining']} / {r['amount']} {r['currency']}",
            "scope": " ".join(x for x in (r["gpu_model"], r["plan"]) if x) or "any usage",
        }
        for r in rows
    ]


def vouchers(team: str = typer.Option(None, "--team", help="A team's vouchers."), as_json: bool = JsonOpt) -> None:
    """Your vouchers: what each has left and when it expires (they pay before your balance)."""
    rows = Client().get("/vouchers", params={"team": team} if team else None)
    print_json(rows) if as_json else print_table(_rows(rows), VOUCHER_COLUMNS)


@voucher_app.command("redeem")
def redeem(
    code: str, team: str = typer.Option(None, "--team", help="Onto this team's account."), as_json: bool = JsonOpt
) -> None:
    """Redeem a voucher CODE."""
    v = Client().post("/vouchers/redeem", json={"code": code, "team": team})
    if as_json:
        print_json(v)
    else:
        console.print(
            f"voucher {v['campaign']}: {v['remaining']} {v['currency']}, expires {v['expires_at'] or 'never'}"
        )


@campaign_app.command("create")
def campaign_create(
    name: str,
    amount: str = typer.Option(..., "--amount", help="Each voucher's value, e.g. 100.00 (a percentage's cap)."),
    valid_for: str = typer.Option(..., "--valid-for", help="How long a voucher lasts once granted: 30m, 72h, 7d."),
    on: str = typer.Option(..., "--on", help="signup, code or manual."),
    percent: str = typer.Option(None, "--percent", help="Pay this percentage of each charge (up to --amount)."),
    until: str = typer.Option(None, "--until", help="Last moment to get one (ISO-8601 with timezone)."),
    code: str = typer.Option(None, "--code", help="For --on code: what renters type."),
    gpu_model: str = typer.Option(None, "--gpu-model", help="Pays only for this GPU model."),
    plan: str = typer.Option(None, "--plan", help="Pays only for this plan: on-demand or interruptible."),
    max_redemptions: int = typer.Option(None, "--max-redemptions", help="Vouchers in all."),
    per_account: int = typer.Option(1, "--per-account", help="Vouchers per account."),
    priority: int = typer.Option(100, "--priority", help="Lower is spent first."),
    eligibility: str = typer.Option("all", "--eligibility", help="all, or new (accounts created since it opened)."),
    as_json: bool = JsonOpt,
) -> None:
    """Create a voucher campaign."""
    body = {
        "name": name,
        "amount": amount,
        "valid_for": valid_for,
        "on": on,
        "percent": percent,
        "until": until,
        "code": code,
        "gpu_model": gpu_model,
        "plan": plan,
        "max_redemptions": max_redemptions,
        "per_account": per_account,
        "priority": priority,
        "eligibility": eligibility,
    }
    data = Client().post("/admin/voucher-campaigns", json=body)
    if as_json:
        print_json(data)
    else:
        console.print(
            f"campaign {data['name']}: {data['amount']} {data['currency']} on {data['on']}, "
            f"valid for {data['valid_for']}"
        )


@campaign_app.command("list")
def campaign_list(as_json: bool = JsonOpt) -> None:
    rows = Client().get("/admin/voucher-campaigns")
    if as_json:
        print_json(rows)
        return
    cols = [
        ("name", "name"),
        ("amount", "amount"),
        ("on", "on"),
        ("valid_for", "valid for"),
        ("redemptions", "granted"),
    ]
    print_table(rows, [*cols, ("max_redemptions", "max"), ("priority", "priority")])


@admin_voucher_app.command("grant")
def grant(
    campaign: str,
    user: str = typer.Option(None, "--user", help="To this user's personal account."),
    team: str = typer.Option(None, "--team", help="To this team."),
    as_json: bool = JsonOpt,
) -> None:
    """Give one voucher of CAMPAIGN to a user or a team."""
    if (user is None) == (team is None):
        fail("give exactly one of --user and --team", "invalid_voucher_target")
    v = Client().post(f"/admin/voucher-campaigns/{campaign}/grant", json={"user": user, "team": team})
    print_json(v) if as_json else console.print(f"granted {v['campaign']}: {v['remaining']} {v['currency']}")


@admin_team_app.command("topup")
def team_topup(
    name: str,
    amount: str,
    idempotency_key: str = typer.Option(None, "--idempotency-key", help="Retry-safe key (default: random)."),
    as_json: bool = JsonOpt,
) -> None:
    """Add AMOUNT (e.g. 50.00) to team NAME's balance."""
    post_topup(f"/admin/teams/{name}/topup", f"team {name}", amount, idempotency_key, as_json)


@admin_team_app.command("list")
def team_list(as_json: bool = JsonOpt) -> None:
    rows = Client().get("/admin/teams")
    if as_json:
        print_json(rows)
    else:
        print_table(
            rows, [("name", "team"), ("members", "members"), ("balance", "balance"), ("credit_limit", "credit")]
        )


@admin_team_app.command("credit-limit")
def team_credit_limit(name: str, amount: str, as_json: bool = JsonOpt) -> None:
    """Let team NAME's balance go down to -AMOUNT."""
    data = Client().put(f"/admin/teams/{name}/credit-limit", json={"amount": amount})
    print_json(data) if as_json else console.print(
        f"team {name}: credit limit {data['credit_limit']} {data['currency']}"
    )


def register(app: typer.Typer) -> None:
    app.command("vouchers")(vouchers)
    app.add_typer(voucher_app, name="voucher")
    admin_app.add_typer(admin_voucher_app, name="voucher")
    admin_app.add_typer(admin_team_app, name="team")
