"""Snapshots of stopped workspaces: ``danlu snapshot create|rm``, ``danlu snapshots`` (issue 26;
``danlu rent --from SNAPSHOT`` starts from one)."""

from __future__ import annotations

import typer

from danlu.cli.client import Client
from danlu.cli.output import JsonOpt, console, print_json, print_table

snapshot_app = typer.Typer(help="Snapshots of stopped workspaces: deduplicated, encrypted.", no_args_is_help=True)


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


@snapshot_app.command("create")
def create(
    instance_id: str,
    name: str = typer.Option("", "--name", help="A name for it (at most 64 characters)."),
    as_json: bool = JsonOpt,
) -> None:
    """Snapshot a stopped instance's workspace; `danlu rent --from SNAPSHOT …` starts from it."""
    s = Client().post(f"/instances/{instance_id}/snapshots", json={"name": name})
    if as_json:
        print_json(s)
        return
    console.print(
        f"{s['id']}: {_mib(s['size_bytes'])} of {instance_id}, {_mib(s['added_bytes'])} new "
        f"(the rest is shared with your earlier snapshots)"
        + (f"; kept for {s['cost_per_day']} {s['currency']} a day" if s.get("currency") else "")
        + f"; `danlu rent --from {s['id']} --gpu …` starts from it",
        markup=False,
        highlight=False,
    )


def snapshots(as_json: bool = JsonOpt) -> None:
    """Your snapshots, oldest first."""
    rows = Client().get("/snapshots")
    if as_json:
        print_json(rows)
        return
    for r in rows:
        r["size"], r["new"] = _mib(r["size_bytes"]), _mib(r["added_bytes"])
        r["per_day"] = f"{r['cost_per_day']} {r['currency']}" if r.get("currency") else "free"
    print_table(
        rows,
        [
            ("id", "snapshot"),
            ("name", "name"),
            ("instance_id", "of"),
            ("size", "size"),
            ("new", "stored new"),
            ("per_day", "per day"),
            ("created_at", "taken"),
        ],
    )


@snapshot_app.command("rm")
def remove(snapshot_id: str) -> None:
    """Remove a snapshot (what only it held is pruned)."""
    Client().delete(f"/snapshots/{snapshot_id}")
    console.print(f"snapshot {snapshot_id} removed")


def register(app: typer.Typer) -> None:
    app.command("snapshots")(snapshots)
    app.add_typer(snapshot_app, name="snapshot")
