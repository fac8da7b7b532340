"""Start/stop schedules of an instance: ``danlu schedule ID --stop 23:00 --start 08:00 --days mon-fri``."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import typer

from danlu.cli.client import Client
from danlu.cli.output import JsonOpt, console, print_json


def schedule(
    instance_id: str = typer.Argument(..., help="The instance (danlu ps)."),
    stop: str = typer.Option(None, "--stop", help="Stop at this time, HH:MM (the deployment's time zone)."),
    start: str = typer.Option(None, "--start", help="Start at this time, HH:MM."),
    days: str = typer.Option("daily", "--days", help="mon-fri, sat,sun, daily, weekdays or weekends."),
    clear: bool = typer.Option(False, "--clear", help="Remove the schedule."),
    as_json: bool = JsonOpt,
) -> None:
    """Stop and/or start an instance at a time of day, e.g. stop 23:00 and start 08:00 on weekdays.
    Without options: show its schedule. A start that fails (no free GPU) is an event (danlu events)."""
    client = Client()
    if clear:
        client.delete(f"/instances/{instance_id}/schedule")
        if as_json:
            print_json({"instance_id": instance_id, "schedule": None})
        else:
            console.print(f"{instance_id}: schedule removed", markup=False)
        return
    if stop is None and start is None:
        v = client.get(f"/instances/{instance_id}").get("schedule")
    else:
        body = {"stop": stop, "start": start, "days": days.replace(" ", "").split(",")}
        v = client.put(f"/instances/{instance_id}/schedule", json=body)
    if as_json:
        print_json(v)
    elif v is None:
        hint = f"danlu schedule {instance_id} --stop 23:00 --start 08:00"
        console.print(f"{instance_id} has no schedule (set one: {hint})", markup=False)
    else:
        console.print(f"{instance_id}: {schedule_text(v)}", markup=False)


def schedule_text(v: dict[str, object]) -> str:
    """``stop 23:00, start 08:00 weekdays (Asia/Shanghai); next: stop Fri 2026-12-04 23:00``."""
    nxt = ""
    if v.get("next_action") and v.get("next_at"):
        at = datetime.fromisoformat(str(v["next_at"])).astimezone(ZoneInfo(str(v["timezone"])))
        nxt = f"; next: {v['next_action']} {at:%a %Y-%m-%d %H:%M}"
    return f"{v['description']}{nxt}"


def register(app: typer.Typer) -> None:
    app.command("schedule")(schedule)
