"""The student discount: ``danlu student verify|status`` and ``danlu admin student ...``."""

from __future__ import annotations

from typing import Any

import typer

from danlu.cli.admin_cmds import admin_app
from danlu.cli.client import Client
from danlu.cli.output import JsonOpt, console, print_json, print_table

student_app = typer.Typer(help="The student discount: ask for academic verification.", no_args_is_help=True)
admin_student_app = typer.Typer(help="Student verification requests and the discount.", no_args_is_help=True)


def _status_text(v: dict[str, Any]) -> str:
    if v["status"] == "none":
        return "no student verification; ask with `danlu student verify INSTITUTION`"
    line = f"{v['user']}: student verification {v['status']} ({v['institution']})"
    if v["status"] == "refused" and v["reason"]:
        line += f": {v['reason']}"
    if v["status"] == "approved":
        line += f"; discount {v['discount']}% on GPU time"
    return line


def _say(v: dict[str, Any], as_json: bool, *, operator: bool = False) -> None:
    print_json(v) if as_json else console.print(_text(v, operator), markup=False, highlight=False, soft_wrap=True)


def _text(v: dict[str, Any], operator: bool = False) -> str:
    line = _status_text(v)
    if operator and v["status"] == "approved" and v["discount"] == "0":  # approved, and it gives nothing yet
        line += "; set the discount students get with `danlu admin student discount PERCENT`"
    return line


@student_app.command("verify")
def verify(
    institution: str,
    evidence: str = typer.Option("", "--evidence", help="What shows you study there: a university e-mail, a card."),
    as_json: bool = JsonOpt,
) -> None:
    """Ask for the student discount at INSTITUTION; the operator approves or refuses it."""
    _say(Client().post("/student/verification", json={"institution": institution, "evidence": evidence}), as_json)


@student_app.command("status")
def status(as_json: bool = JsonOpt) -> None:
    """Your student verification: none, pending, approved or refused (with the reason)."""
    _say(Client().get("/student/verification"), as_json)


@admin_student_app.command("requests")
def requests(as_json: bool = JsonOpt) -> None:
    """Pending verification requests, oldest first, with their evidence."""
    rows = Client().get("/admin/student/requests")
    if as_json:
        print_json(rows)
        return
    cols = [("user", "user"), ("institution", "institution"), ("evidence", "evidence")]
    print_table(rows, [*cols, ("requested_at", "requested")])


@admin_student_app.command("approve")
def approve(user: str, as_json: bool = JsonOpt) -> None:
    """Approve USER's pending request: their rentals from now on get the discount."""
    _say(Client().post(f"/admin/student/{user}/approve"), as_json, operator=True)


@admin_student_app.command("refuse")
def refuse(
    user: str,
    reason: str = typer.Option(..., "--reason", help="What USER is told (they may ask again)."),
    as_json: bool = JsonOpt,
) -> None:
    """Refuse USER's pending request with a reason."""
    _say(Client().post(f"/admin/student/{user}/refuse", json={"reason": reason}), as_json)


@admin_student_app.command("discount")
def discount(percent: str, as_json: bool = JsonOpt) -> None:
    """Set the student discount on GPU time to PERCENT (e.g. 20 or 12.5); running work keeps its own."""
    data = Client().put("/admin/student/discount", json={"percent": percent})
    print_json(data) if as_json else console.print(f"student discount {data['percent']}%")


def register(app: typer.Typer) -> None:
    app.add_typer(student_app, name="student")
    admin_app.add_typer(admin_student_app, name="student")
