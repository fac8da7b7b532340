"""Telemetry commands (docs/telemetry.md): ``danlu top``, the event feed (``danlu events`` without an
instance id) and the idle auto-stop options shared by ``rent`` and ``run``."""

from __future__ import annotations

import time
from typing import Any

import typer
from rich.live import Live
from rich.table import Table

from danlu.cli.client import Client
from danlu.cli.output import JsonOpt, build_table, console, print_json, print_table

IdleStopOpt = typer.Option(
    None,
    "--idle-stop",
    help="Stop it after this long with every GPU idle, e.g. 30m, or off (the operator may cap it).",
)
IdleThresholdOpt = typer.Option(None, "--idle-threshold", help="Idle means every GPU under this %, e.g. 5 (default).")
MaxDurationOpt = typer.Option(None, "--max-duration", help="Stop a run older than this, e.g. 6h.")


def limits_body(idle_stop: str | None, idle_threshold: str | None, max_duration: str | None) -> dict[str, str]:
    """The request fields of the options given (the server applies its defaults to the rest)."""
    given = {"idle_stop": idle_stop, "idle_threshold": idle_threshold, "max_duration": max_duration}
    return {k: v for k, v in given.items() if v is not None}


def duration_text(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def limits_text(v: dict[str, Any]) -> str:
    """One line of an instance's own limits, for ``show``."""
    parts = []
    if v.get("idle_stop_s"):
        parts.append(f"stop after {duration_text(v['idle_stop_s'])} with every GPU under {v['idle_threshold']}%")
    if v.get("max_duration_s"):
        parts.append(f"at most {duration_text(v['max_duration_s'])} per run")
    return "; ".join(parts) or "none (runs until stopped)"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}%"


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


TOP_COLUMNS = [
    ("id", "id"),
    ("name", "name"),
    ("gpus", "GPUs"),
    ("gpu", "GPU %"),
    ("mem", "GPU mem"),
    ("power", "power"),
    ("cpu", "CPU %"),
    ("disk", "disk"),
    ("net", "net in/out"),
    ("cost", "cost so far"),
    ("hourly", "per hour"),
    ("idle", "idle stop"),
]
TOP_WHOLE = ("name", "gpus")
TOP_OPTIONAL = ("net", "disk", "power", "idle", "mem", "hourly", "cpu", "name")  # left out first to last


def _top_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "id": r["id"],
            "name": r["name"] or "-",
            "gpus": f"{r['gpu_count']}x {r['gpu_model']}",
            "gpu": _pct(r["gpu_util_pct"]),
            "mem": "-" if r["gpu_mem_mb"] is None else f"{r['gpu_mem_mb'] / 1024:.1f} GiB",
            "power": "-" if r["power_w"] is None else f"{r['power_w']:.0f} W",
            "cpu": _pct(r["cpu_pct"]),
            "disk": "-" if r.get("disk_mb") is None else f"{r['disk_mb']} MiB",
            "net": "-" if r.get("net_rx_bytes") is None else f"{_size(r['net_rx_bytes'])}/{_size(r['net_tx_bytes'])}",
            "cost": f"{r['cost']} {r['currency']}",
            "hourly": "-" if r["cost_per_hour"] is None else r["cost_per_hour"],
            "idle": duration_text(r["idle_stop_s"]),
        }
        for r in rows
    ]


def _top_table(rows: list[dict[str, Any]]) -> Table:
    title = f"danlu top — {time.strftime('%H:%M:%S')} (simulated GPUs: utilisation from CPU activity)"
    shown = _top_rows(rows) if rows else [{"id": "nothing running"}]
    return build_table(shown, TOP_COLUMNS, title, whole=TOP_WHOLE, optional=TOP_OPTIONAL)[0]


def top(
    once: bool = typer.Option(False, "--once", help="Print one table and exit (for scripts)."),
    interval: float = typer.Option(2.0, "--interval", help="Seconds between refreshes."),
    as_json: bool = JsonOpt,
) -> None:
    """A live view of your running instances: GPU %, memory, power, CPU, cost so far and per hour."""
    client = Client()
    if as_json or once:
        rows = client.get("/top")
        if as_json:
            print_json(rows)
        else:
            print_table(_top_rows(rows), TOP_COLUMNS, whole=TOP_WHOLE, optional=TOP_OPTIONAL)
        if not as_json and any(r["simulated"] for r in rows):
            console.print("simulated GPUs: their utilisation is the run's CPU activity (docs/telemetry.md)")
        return
    with Live(_top_table(client.get("/top")), console=console, refresh_per_second=4) as live:
        try:
            while True:
                time.sleep(max(0.5, interval))
                live.update(_top_table(client.get("/top")))
        except KeyboardInterrupt:
            pass


def feed(
    after: int = typer.Option(0, "--after", help="Only events newer than this id."),
    limit: int = typer.Option(50, "--limit", help="At most this many, newest first."),
    kind: str = typer.Option(None, "--kind", help="Only this kind, e.g. idle_stop."),
    as_json: bool = JsonOpt,
) -> None:
    """What the platform told you: idle stops, budget thresholds, holds ending, storage warnings."""
    params: dict[str, Any] = {"after": after, "limit": limit}
    if kind:
        params["kind"] = kind
    rows = Client().get("/events", params=params)
    if as_json:
        print_json(rows)
    elif not rows:
        console.print("no events")
    else:
        print_table(rows, [("id", "id"), ("at", "at"), ("kind", "kind"), ("message", "message")])


def register(app: typer.Typer) -> None:
    app.command("top")(top)
