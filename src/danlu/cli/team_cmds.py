"""Team commands (``danlu team ...``): create, list, show, add, set, remove, default."""

from __future__ import annotations

from typing import Any

import typer

from danlu.cli.client import Client
from danlu.cli.output import JsonOpt, console, fail, print_json, print_table

team_app = typer.Typer(help="Teams: a shared balance, members with roles.", no_args_is_help=True)
MEMBER_COLUMNS = [("user", "user"), ("role", "role"), ("quota", "GPU quota")]


def _show(data: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(data)
        return
    rows = [{**m, "quota": "none" if m["gpu_quota"] is None else m["gpu_quota"]} for m in data["members"]]
    print_table(rows, MEMBER_COLUMNS, title=f"team {data['name']} (you: {data['role']})")


@team_app.command("create")
def create(name: str, as_json: bool = JsonOpt) -> None:
    """Create team NAME with its own balance; you become its owner."""
    _show(Client().post("/teams", json={"name": name}), as_json)


@team_app.command("list")
def list_(as_json: bool = JsonOpt) -> None:
    """The teams you are in, with your role."""
    rows = Client().get("/teams")
    if as_json:
        print_json(rows)
    else:
        print_table(
            [{**r, "members": len(r["members"])} for r in rows],
            [("name", "team"), ("role", "your role"), ("members", "members")],
        )


@team_app.command("show")
def show(name: str, as_json: bool = JsonOpt) -> None:
    _show(Client().get(f"/teams/{name}"), as_json)


def _quota(text: str | None) -> tuple[bool, int | None]:
    """(given, value) from ``--gpu-quota N|none``."""
    if text is None:
        return False, None
    if text.lower() == "none":
        return True, None
    if not text.isdigit():
        fail(f"--gpu-quota is a whole number of GPUs or 'none', not {text!r}", "invalid_quota")
    return True, int(text)


@team_app.command("add")
def add(
    name: str,
    user: str,
    role: str = typer.Option(..., "--role", help="owner, admin, member or viewer."),
    gpu_quota: str = typer.Option(None, "--gpu-quota", help="GPUs USER may hold on the team (default: no cap)."),
    as_json: bool = JsonOpt,
) -> None:
    """Add USER to team NAME with a role (owners and admins)."""
    _, quota = _quota(gpu_quota)
    _show(Client().post(f"/teams/{name}/members", json={"user": user, "role": role, "gpu_quota": quota}), as_json)


@team_app.command("set")
def set_(
    name: str,
    user: str,
    role: str = typer.Option(None, "--role", help="owner, admin, member or viewer."),
    gpu_quota: str = typer.Option(None, "--gpu-quota", help="GPUs USER may hold on the team, or 'none'."),
    as_json: bool = JsonOpt,
) -> None:
    """Change USER's role or GPU quota on team NAME."""
    body: dict[str, Any] = {}
    if role is not None:
        body["role"] = role
    given, quota = _quota(gpu_quota)
    if given:
        body["gpu_quota"] = quota
    if not body:
        fail("give --role or --gpu-quota", "invalid_request")
    _show(Client().request("PATCH", f"/teams/{name}/members/{user}", json=body), as_json)


@team_app.command("remove")
def remove(name: str, user: str, as_json: bool = JsonOpt) -> None:
    """Remove USER from team NAME. Their running instances keep running until you stop them."""
    data = Client().delete(f"/teams/{name}/members/{user}")
    if as_json:
        print_json(data)
        return
    console.print(f"{user} removed from {name}")
    for iid in data["running_instances"]:
        console.print(f"  {iid} still runs on {name}'s account: `danlu stop {iid}` to end it")


@team_app.command("default")
def default(
    name: str = typer.Argument(None, help="The team to rent on by default."),
    none: bool = typer.Option(False, "--none", help="Rent on your personal account by default."),
    as_json: bool = JsonOpt,
) -> None:
    """Choose the account your rentals and jobs are paid from when you give no --team."""
    if (name is None) == (not none):
        fail("give a team NAME or --none", "invalid_request")
    data = Client().put("/me/default-team", json={"team": None if none else name})
    if as_json:
        print_json(data)
    else:
        console.print(f"default payer: {data['team'] or 'your personal account'}")


def register(app: typer.Typer) -> None:
    app.add_typer(team_app, name="team")
