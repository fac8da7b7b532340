"""Budget commands: ``danlu budget set``, ``danlu budget list``, ``danlu budget rm``."""

from __future__ import annotations

import typer

from danlu.cli.client import Client
from danlu.cli.output import JsonOpt, console, fail, print_json, print_table

budget_app = typer.Typer(help="Budgets and hard caps: per account, team member or instance.", no_args_is_help=True)
TeamOpt = typer.Option(None, "--team", help="A team's account (default: your personal account).")


def _params(team: str | None) -> dict[str, str] | None:
    return {"team": team} if team else None


def _text(b: dict[str, object]) -> str:
    limits = [f"{k} {b[k]}" for k in ("soft", "hard") if b[k] is not None]
    return f"budget {b['id']} on {b['scope']} ({b['period']}): {', '.join(limits)}; spent {b['spent']} {b['currency']}"


@budget_app.command("set")
def budget_set(
    team: str = TeamOpt,
    member: str = typer.Option(None, "--member", help="Only this member's usage on the team's account."),
    instance: str = typer.Option(None, "--instance", help="Only this instance."),
    period: str = typer.Option("month", "--period", help="month (this calendar month) or total (ever)."),
    soft: str = typer.Option(None, "--soft", help="Warn at 50%, 80% and 100% of this amount."),
    hard: str = typer.Option(None, "--hard", help="Stop usage in the scope exactly at this amount."),
    as_json: bool = JsonOpt,
) -> None:
    """Set (or replace) a budget: the account's, one --member's or one --instance's."""
    if member is not None and instance is not None:
        fail("a budget is for the account, one --member or one --instance", "invalid_budget_scope")
    body = {"member": member, "instance": instance, "period": period, "soft": soft, "hard": hard}
    data = Client().put("/budgets", json=body, params=_params(team))
    print_json(data) if as_json else console.print(_text(data), markup=False, highlight=False, soft_wrap=True)


@budget_app.command("list")
def budget_list(team: str = TeamOpt, as_json: bool = JsonOpt) -> None:
    """Budgets of your account (or a team's) and what each has spent."""
    rows = Client().get("/budgets", params=_params(team))
    if as_json:
        print_json(rows)
        return
    cols = [("id", "id"), ("scope", "scope"), ("period", "period"), ("soft", "soft"), ("hard", "hard")]
    print_table(rows, [*cols, ("spent", "spent"), ("currency", "currency")])


@budget_app.command("rm")
def budget_rm(budget_id: int = typer.Argument(..., metavar="ID"), team: str = TeamOpt) -> None:
    """Remove budget ID (see `danlu budget list`)."""
    Client().delete(f"/budgets/{budget_id}", params=_params(team))
    console.print(f"budget {budget_id} removed")


def register(app: typer.Typer) -> None:
    app.add_typer(budget_app, name="budget")
