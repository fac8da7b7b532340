"""Webhooks for the event feed: ``danlu webhooks`` and ``danlu webhook add|rm|deliveries``."""

from __future__ import annotations

import typer

from danlu.cli.client import Client
from danlu.cli.output import JsonOpt, console, print_json, print_table

webhook_app = typer.Typer(help="Your webhooks: every event of `danlu events`, POSTed and signed.", no_args_is_help=True)


@webhook_app.command("add")
def add(
    url: str = typer.Argument(..., help="http(s) URL on a public address"),
    kind: list[str] = typer.Option(None, "--kind", help="Only this event kind (repeatable; default: all)."),
    as_json: bool = JsonOpt,
) -> None:
    """Add a webhook; prints its signing secret once (keep it: it verifies X-Danlu-Signature)."""
    v = Client().post("/webhooks", json={"url": url, "kinds": kind or []})
    if as_json:
        print_json(v)
        return
    console.print(f"webhook {v['id']} → {v['url']} ({', '.join(v['kinds']) or 'every event'})", markup=False)
    console.print(f"secret (shown once): {v['secret']}", markup=False)
    console.print(
        'verify: X-Danlu-Signature == "sha256=" + HMAC-SHA256(secret, X-Danlu-Timestamp + "." + body); '
        "de-duplicate on X-Danlu-Event-Id",
        markup=False,
    )


@webhook_app.command("rotate")
def rotate(webhook_id: int, as_json: bool = JsonOpt) -> None:
    """A new signing secret, printed once; the old one keeps signing beside it for a day."""
    v = Client().post(f"/webhooks/{webhook_id}/rotate-secret")
    if as_json:
        print_json(v)
        return
    console.print(f"webhook {v['id']}: new secret (shown once): {v['secret']}", markup=False)
    console.print("the old secret signs beside it for 24 h (a second v1, signature): switch receivers", markup=False)


@webhook_app.command("rm")
def rm(webhook_id: int) -> None:
    """Remove a webhook (its pending deliveries are dropped)."""
    Client().delete(f"/webhooks/{webhook_id}")
    console.print(f"webhook {webhook_id} removed")


@webhook_app.command("deliveries")
def deliveries(webhook_id: int, as_json: bool = JsonOpt) -> None:
    """A webhook's recent deliveries: status, attempts, the receiver's answer, the next try."""
    rows = Client().get(f"/webhooks/{webhook_id}/deliveries")
    cols = [("id", "id"), ("event_id", "event"), ("kind", "kind"), ("status", "status"), ("attempts", "tries"),
            ("last_status_code", "answer"), ("last_error", "error"), ("next_attempt_at", "next try")]  # fmt: skip
    print_json(rows) if as_json else print_table(rows, cols)


def webhooks(as_json: bool = JsonOpt) -> None:
    """Your webhooks with their delivered, pending and failed counts."""
    rows = Client().get("/webhooks")
    if as_json:
        print_json(rows)
        return
    for r in rows:
        r["kinds_text"] = ", ".join(r["kinds"]) or "all"
    cols = [("id", "id"), ("url", "URL"), ("kinds_text", "events"), ("delivered", "delivered"),
            ("pending", "pending"), ("failed", "failed")]  # fmt: skip
    print_table(rows, cols)


def register(app: typer.Typer) -> None:
    app.command("webhooks")(webhooks)
    app.add_typer(webhook_app, name="webhook")
