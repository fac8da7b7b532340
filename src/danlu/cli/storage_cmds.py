"""Stopped storage: ``danlu admin storage set|show``."""

from __future__ import annotations

from typing import Any

import typer

from danlu.cli.admin_cmds import admin_app
from danlu.cli.client import Client
from danlu.cli.output import JsonOpt, console, print_json

admin_storage_app = typer.Typer(help="What stopped instances' workspaces cost, and when they go.", no_args_is_help=True)


def _say(d: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(d)
    else:
        console.print(
            f"stopped storage: {d['price_gb_month']} {d['currency']} per GB-month; warned after "
            f"{d['warn_after']} stopped, released {d['release_after']} after the warning; snapshots: "
            f"{d['snapshot_price_gb_month']} {d['currency']} per GB-month, quota "
            + (f"{d['snapshot_quota_gb']} GB per account" if d["snapshot_quota_gb"] else "none")
            + (f", kept {d['snapshot_retention']}" if d["snapshot_retention"] != "0" else ", kept until removed")
            + ("; a workspace due for release is snapshotted first" if d["snapshot_before_release"] else ""),
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


@admin_storage_app.command("set")
def storage_set(
    price_gb_month: str = typer.Option(None, "--price-gb-month", help="Per GB-month of kept workspace, e.g. 0.30."),
    warn_after: str = typer.Option(None, "--warn-after", help="Warn the renter after stopped this long: 12h, 7d."),
    release_after: str = typer.Option(None, "--release-after", help="Release this long after the warning: 7d."),
    snapshot_price_gb_month: str = typer.Option(
        None, "--snapshot-price-gb-month", help="Per GB-month of a kept snapshot (as restored), e.g. 0.10."
    ),
    snapshot_quota_gb: int = typer.Option(None, "--snapshot-quota-gb", help="Per account, in GB; 0: no quota."),
    snapshot_retention: str = typer.Option(
        None, "--snapshot-retention", help="Remove snapshots this long after they were taken: 90d; 0 keeps them."
    ),
    snapshot_before_release: bool = typer.Option(
        None,
        "--snapshot-before-release/--no-snapshot-before-release",
        help="Snapshot a stopped workspace due for release first.",
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Change the storage policy (only what is given)."""
    body = {
        "price_gb_month": price_gb_month,
        "warn_after": warn_after,
        "release_after": release_after,
        "snapshot_price_gb_month": snapshot_price_gb_month,
        "snapshot_quota_gb": snapshot_quota_gb,
        "snapshot_retention": snapshot_retention,
        "snapshot_before_release": snapshot_before_release,
    }
    _say(Client().put("/admin/storage", json={k: v for k, v in body.items() if v is not None}), as_json)


@admin_storage_app.command("show")
def storage_show(as_json: bool = JsonOpt) -> None:
    _say(Client().get("/admin/storage"), as_json)


def register(app: typer.Typer) -> None:
    admin_app.add_typer(admin_storage_app, name="storage")
