"""Renter commands for instances: rent, ps, show, stop, start, rm, logs, events."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import typer

from danlu.cli.client import Client
from danlu.cli.output import (
    JsonOpt,
    build_table,
    console,
    err_console,
    fail,
    human,
    parse_env,
    print_json,
    print_table,
)
from danlu.cli.schedule_cmds import schedule_text
from danlu.cli.telemetry_cmds import IdleStopOpt, IdleThresholdOpt, MaxDurationOpt, feed, limits_body, limits_text

COLUMNS = [
    ("id", "ID"),
    ("name", "name"),
    ("status", "status"),
    ("gpus", "GPUs"),
    ("billed_seconds", "seconds"),
    ("cost_text", "cost"),
    ("command_text", "command"),
]
WHOLE = ("name", "gpus")  # copied into other commands: never broken across lines
OPTIONAL = ("command_text", "billed_seconds", "name")  # left out first to last on a narrow terminal


def _row(v: dict[str, Any]) -> dict[str, Any]:
    sim = " (sim)" if v["simulated"] else ""
    return {
        **v,
        "gpus": f"{v['gpu_count']}× {v['gpu_model']}{sim}",
        "cost_text": f"{v['cost']} {v['currency']}",
        "command_text": " ".join(v["command"])[:40],
    }


def rent(
    command: list[str] = typer.Argument(..., help="The command to run, after --"),
    gpu: str = typer.Option(..., "--gpu", help="GPU model, e.g. A100-80GB (see `danlu offers`)."),
    count: int = typer.Option(1, "--count", "--gpus", help="Number of GPUs, all on one host."),
    name: str = typer.Option("", "--name"),
    interruptible: bool = typer.Option(
        False, "--interruptible", help="Cheaper; jobs may preempt it, always with notice (SIGTERM + deadline file)."
    ),
    image: str = typer.Option("host", "--image", help="Root filesystem to run in (see `danlu images`)."),
    env: list[str] = typer.Option(None, "--env", help="NAME=VALUE for your command (repeatable)."),
    env_file: str = typer.Option(None, "--env-file", help="A file of NAME=VALUE lines for your command."),
    team: str = typer.Option(None, "--team", help="Pay from this team's balance (default: your default team)."),
    package: str = typer.Option(
        None, "--package", help="Buy this package or reservation with it (see `danlu plans`); paid now, asks first."
    ),
    on_expiry: str = typer.Option("stop", "--on-expiry", help="With --package, at its end: stop, or on-demand."),
    yes: bool = typer.Option(False, "--yes", "-y", help="With --package: buy without asking."),
    from_instance: str = typer.Option(
        None,
        "--from",
        help="Start with a copy of this stopped rental's workspace or of this snapshot (yours; unbilled).",
    ),
    idle_stop: str = IdleStopOpt,
    idle_threshold: str = IdleThresholdOpt,
    max_duration: str = MaxDurationOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Rent COUNT GPUs and run COMMAND on exactly them, in a sandbox. Billing is per second; on a
    package or reservation your account holds for the model, it is already paid."""
    client = Client()
    body = {
        "gpu_model": gpu,
        "gpu_count": count,
        "command": command,
        "name": name,
        "interruptible": interruptible,
        "image": image,
        "env": parse_env(env, env_file),
        "team": team,
        **limits_body(idle_stop, idle_threshold, max_duration),
        **(
            {"from_snapshot" if from_instance.startswith("s-") else "from_instance": from_instance}
            if from_instance
            else {}
        ),
    }
    if package is not None:
        from danlu.cli.hold_cmds import quote_and_confirm

        q = quote_and_confirm(
            client, {"term": package, "gpu_model": gpu, "gpu_count": count, "team": team}, yes, as_json
        )
        body.update(package=package, on_expiry=on_expiry, expected_price=q["price"])
    v = client.post("/instances", json=body)
    if as_json:
        print_json(v)
    elif v.get("hold_id"):
        console.print(
            f"{v['id']} {v['status']} on {v['gpu_count']}× {v['gpu_model']} (GPUs {human(v['gpu_indices'])}), "
            f"on {v['hold_id']} (prepaid: `danlu holds`)"
        )
    else:
        console.print(
            f"{v['id']} {v['status']} on {v['gpu_count']}× {v['gpu_model']} (GPUs {human(v['gpu_indices'])}) "
            f"at {v['price_per_hour']} {v['currency']}/GPU-h"
        )
    if not as_json and (v.get("idle_stop_s") or v.get("max_duration_s")):
        console.print(f"limits: {limits_text(v)} (`--idle-stop off` to keep it running idle)")
    exit_if_failed(v, as_json)


def ps(
    all_: bool = typer.Option(False, "--all", help="Include destroyed instances."),
    team: str = typer.Option(None, "--team", help="Every instance this team pays for (any member may look)."),
    watch: bool = typer.Option(False, "--watch", "-w", help="Redraw every --interval seconds until Ctrl-C."),
    interval: float = typer.Option(1.0, "--interval", help="With --watch: seconds between redraws (at least 0.5)."),
    as_json: bool = JsonOpt,
) -> None:
    """Your instances with live cost (``--watch``: a live view, status and cost by the second)."""
    client = Client()
    params: dict[str, Any] = {"all": all_} | ({"team": team} if team else {})
    rows = client.get("/instances", params=params)
    if as_json:
        print_json(rows)
        return
    if not watch:
        print_table([_row(v) for v in rows], COLUMNS, whole=WHOLE, optional=OPTIONAL)
        return
    from rich.live import Live

    def table(rows: list[dict[str, Any]]) -> Any:
        title = f"danlu ps — {time.strftime('%H:%M:%S')} (Ctrl-C to stop)"
        shown = [_row(v) for v in rows] or [{"id": "no instances"}]
        return build_table(shown, COLUMNS, title, whole=WHOLE, optional=OPTIONAL)[0]

    # Drawn from this thread only (no auto-refresh thread: it redrew the same table and shared Live's
    # lock with it, so a Ctrl-C landing mid-draw could leave the exit waiting on that thread).
    try:  # Ctrl-C ends the watch at any moment, the first drawing included
        with Live(table(rows), console=console, auto_refresh=False) as live:
            live.refresh()
            while True:
                time.sleep(max(0.5, interval))
                live.update(table(client.get("/instances", params=params)), refresh=True)
    except KeyboardInterrupt:
        pass


def show(
    instance_id: str,
    chart: str = typer.Option(None, "--chart", help="Also write its usage chart (SVG) to this file."),
    since: str = typer.Option("1h", "--since", help="With --chart: how far back, e.g. 15m, 6h, 7d."),
    as_json: bool = JsonOpt,
) -> None:
    """One instance with live cost, its exit code, its idle and duration limits, and why it stopped."""
    client = Client()
    v = client.get(f"/instances/{instance_id}")
    if chart:
        write_chart(client, instance_id, since, chart)
    if as_json:
        print_json(v)
        return
    r = _row(v)
    r["sandbox_text"] = sandbox_text(v.get("sandbox"))
    r["limits_text"] = limits_text(v)
    r["used_text"] = f"{v['last_used_at']} ({v['last_used_by']})" if v.get("last_used_at") else None
    for key, label in [
        *COLUMNS,
        ("status_reason", "reason"),
        ("exit_code", "exit code"),
        ("gpu_indices", "GPU indices"),
        ("image", "image"),
        ("sandbox_text", "sandbox"),
        ("limits_text", "limits"),
        ("used_text", "last used"),
    ]:
        console.print(f"{label:>12}: {human(r.get(key))}", markup=False, highlight=False)
    if v.get("hold_id"):
        console.print(f"{'on hold':>12}: {v['hold_id']} (prepaid; `danlu hold show {v['hold_id']}`)", markup=False)
    for key, label in [("stopped_storage_per_day", "storage/day"), ("workspace_release_at", "to be released at")]:
        if v.get(key) is not None:  # a stopped instance whose workspace is kept
            extra = f" {v['currency']}" if key == "stopped_storage_per_day" else ""
            console.print(f"{label:>12}: {v[key]}{extra}", markup=False, highlight=False)
    if v.get("stop_reason") and not str(v.get("status_reason", "")).startswith(v["stop_reason"]):
        console.print(f"{'stopped':>12}: {v['stop_reason']}", markup=False, highlight=False)
    if v.get("backend_ref"):
        console.print(f"{'runs on':>12}: {v['backend_ref']}", markup=False, highlight=False)
    for hint in v.get("hints") or []:
        console.print(f"{'hint':>12}: {hint}", markup=False, highlight=False)
    if v.get("schedule"):
        console.print(f"{'schedule':>12}: {schedule_text(v['schedule'])}", markup=False, highlight=False)
    if chart:
        console.print(f"{'chart':>12}: {chart}", markup=False, highlight=False)


def write_chart(client: Client, instance_id: str, since: str, path: str) -> None:
    from danlu.telemetry.chart import render_svg

    metrics = client.get(f"/instances/{instance_id}/metrics", params={"since": since})
    with open(path, "w", encoding="utf-8") as f:
        f.write(render_svg(metrics))


def sandbox_text(sb: dict[str, Any] | None) -> str:
    """One line of what a run's sandbox was given."""
    if not sb:
        return "-"
    if sb.get("sandbox") != "bubblewrap":
        return f"none ({sb.get('sandbox')}: runs as the platform's user)"
    cpus = sb.get("cpus_milli", 0) / 1000
    return (
        f"bubblewrap, uid {sb.get('uid')}, network {sb.get('network')}, {cpus:g} vCPU, "
        f"{sb.get('memory_mb')} MiB RAM, {sb.get('pids')} processes, {sb.get('disk_mb')} MiB disk "
        f"(enforced by {sb.get('limits_enforced_by')}; "
        f"the disk limit by {sb.get('disk_enforced_by', 'a check every 15 s')})"
    )


def images(as_json: bool = JsonOpt) -> None:
    """Root filesystems you can rent in (`danlu rent --image NAME`)."""
    rows = Client().get("/images")
    if as_json:
        print_json(rows)
        return
    for r in rows:
        r["size"] = "shared with the host" if r["size_bytes"] is None else f"{r['size_bytes'] / 2**20:.1f} MiB"
        held = r.get("contents")
        r["holds"] = (
            f"Debian {held['suite']}, {held['debian_packages']} packages"
            + (f"; pip: {', '.join(held['pip'])}" if held["pip"] else "")
            if held
            else ""
        )
    print_table(rows, [("name", "image"), ("size", "size"), ("holds", "holds"), ("description", "description")])


def stop(instance_id: str, as_json: bool = JsonOpt) -> None:
    """Stop: GPU billing ends now; SIGTERM, then SIGKILL after the grace period. Workspace kept
    (at the operator's storage price, shown once it stopped; released only after a warning)."""
    v = Client().post(f"/instances/{instance_id}/stop")
    if as_json:
        print_json(v)
        return
    console.print(f"{v['id']} {v['status']}; final cost {v['cost']} {v['currency']}")
    if v.get("stopped_storage_per_day") is not None:  # said after the stop succeeded, never before
        console.print(
            f"it keeps its workspace for {v['stopped_storage_per_day']} {v['currency']}/day (storage); "
            f"`danlu rm {instance_id}` deletes it instead"
        )
    if v.get("workspace_release_at"):
        console.print(
            f"its workspace is released at {v['workspace_release_at']} unless you start it (you are warned first)"
        )


def start(
    instance_id: str,
    gpu: str = typer.Option(None, "--gpu", help="Resize: start on this GPU model instead (see `danlu offers`)."),
    count: int = typer.Option(None, "--count", "--gpus", help="Resize: start on this many GPUs instead."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Resize without asking (after printing the new price)."),
    as_json: bool = JsonOpt,
) -> None:
    """Start a stopped instance again with the same workspace (fails if no GPU is free); with
    --gpu/--count on another GPU model or count, at that shape's price (shown first)."""
    client = Client()
    body: dict[str, Any] | None = None
    if gpu is not None or count is not None:
        body = {
            "gpu_model": gpu,
            "gpu_count": count,
            "expected_price": _confirm_resize(client, instance_id, gpu, count, yes, as_json),
        }
    v = client.post(f"/instances/{instance_id}/start", json=body)
    print_json(v) if as_json else console.print(f"{v['id']} {v['status']} on GPUs {human(v['gpu_indices'])}")
    exit_if_failed(v, as_json)


def _confirm_resize(
    client: Client, instance_id: str, gpu: str | None, count: int | None, yes: bool, as_json: bool
) -> str:
    """Print what the new shape costs an hour (the offers' list price, all its GPUs) and ask; returns
    the price shown, which the server holds the start to (409 price_changed if it moved)."""
    inst = client.get(f"/instances/{instance_id}")
    model, n = gpu or inst["gpu_model"], count or inst["gpu_count"]
    offers = {o["gpu_model"].lower(): o for o in client.get("/offers")}
    offer = offers.get(model.lower())
    key = "interruptible_price_per_hour" if inst.get("interruptible") else "price_per_hour"
    if offer is None or offer.get(key) is None:
        fail(
            f"{model} is not offered here{' as interruptible' if inst.get('interruptible') else ''}; "
            "see `danlu offers`",
            "model_not_offered",
        )
    per_gpu = Decimal(offer[key])
    hourly = per_gpu * n
    text = (
        f"{instance_id}: {inst['gpu_count']}× {inst['gpu_model']} → {n}× {offer['gpu_model']} at "
        f"{hourly} {offer['currency']}/h ({per_gpu} per GPU, before discounts); the workspace goes with it"
    )
    if as_json and not yes:
        print_json(
            {
                "instance": instance_id,
                "gpu_model": offer["gpu_model"],
                "gpu_count": n,
                "price_per_hour": str(hourly),
                "currency": offer["currency"],
            }
        )
        fail("that was the price; add --yes to start it", "confirmation_required")
    if not as_json:
        console.print(text, markup=False, highlight=False)
    if not yes and not typer.confirm("start it?", default=False):
        fail("nothing started", "cancelled_by_user")
    return str(hourly)


def exit_if_failed(v: dict[str, Any], as_json: bool) -> None:
    """Exit 1 when the instance was created or started but its command never did (``failed``, not
    billed; issue 28, finding 8: ``rent`` said "failed" and exited 0). A script must know."""
    if v.get("status") == "failed":
        if not as_json:
            err_console.print(
                f"{v['id']} failed: {v.get('status_reason') or 'its command did not start'}", markup=False
            )
        raise typer.Exit(1)


def rm(instance_id: str, as_json: bool = JsonOpt) -> None:
    """Destroy an instance and delete its workspace; prints its final status and cost."""
    client = Client()
    client.delete(f"/instances/{instance_id}")
    final = next((v for v in client.get("/instances", params={"all": True}) if v["id"] == instance_id), None)
    if as_json:
        print_json(final if final is not None else {"id": instance_id, "status": "destroyed"})
    elif final is not None:
        console.print(f"{instance_id} {final['status']}; final cost {final['cost']} {final['currency']}", markup=False)
    else:
        console.print(f"{instance_id} destroyed", markup=False)


LOG_CHUNK = 1 << 20  # the most one GET .../logs answers
LogOffsetOpt = typer.Option(0, "--offset", min=0, help="Start at this byte (a previous --json's next_offset).")
LogJsonOpt = typer.Option(
    False, "--json", help='Print {"text": ..., "next_offset": ...} (with -f: one such line per new chunk).'
)


def print_log(
    client: Client, path: str, follow: bool, still_running: Callable[[], bool], offset: int, as_json: bool
) -> None:
    """Print ``{path}/logs`` from ``offset`` to its end; with ``follow``, keep polling while
    ``still_running()``. As JSON: the whole text read and the offset to read on from, as the API
    answers (with ``follow``: one JSON line per new chunk)."""
    text: list[str] = []
    done = not follow
    while True:
        chunk = client.get(f"{path}/logs", params={"offset": offset})
        full = chunk["next_offset"] - offset >= LOG_CHUNK  # the API's most: more is waiting
        offset = chunk["next_offset"]
        if chunk["text"]:
            if as_json and follow:
                sys.stdout.write(json.dumps({"text": chunk["text"], "next_offset": offset}) + "\n")
            elif as_json:
                text.append(chunk["text"])
            else:
                sys.stdout.write(chunk["text"])
            sys.stdout.flush()
            if full or not done:
                continue
        if done:
            break
        if not still_running():
            done = True  # one more read: what it wrote just before it ended
            continue
        time.sleep(0.5)
    if as_json and not follow:
        print_json({"text": "".join(text), "next_offset": offset})


def logs(
    instance_id: str,
    follow: bool = typer.Option(False, "-f", "--follow"),
    offset: int = LogOffsetOpt,
    as_json: bool = LogJsonOpt,
) -> None:
    """Print the instance's captured stdout/stderr (``-f`` follows until it stops running)."""
    client = Client()
    path = f"/instances/{instance_id}"
    print_log(
        client, path, follow, lambda: client.get(path)["status"] in ("pending", "running", "stopping"), offset, as_json
    )


def events(
    instance_id: str = typer.Argument(None, help="An instance: its state changes (none: your event feed)."),
    after: int = typer.Option(0, "--after", help="Feed: only events newer than this id."),
    limit: int = typer.Option(50, "--limit", help="Feed: at most this many, newest first."),
    kind: str = typer.Option(None, "--kind", help="Feed: only this kind, e.g. idle_stop."),
    as_json: bool = JsonOpt,
) -> None:
    """Your event feed (idle stops, budget thresholds, holds ending, storage warnings), or with an
    instance id every state change of that instance and why it happened."""
    if instance_id is None:
        feed(after=after, limit=limit, kind=kind, as_json=as_json)
        return
    rows = Client().get(f"/instances/{instance_id}/events")
    if as_json:
        print_json(rows)
    else:
        print_table(rows, [("at", "at"), ("from_status", "from"), ("to_status", "to"), ("reason", "reason")])


def register(app: typer.Typer) -> None:
    app.command("rent", context_settings={"allow_interspersed_args": False})(rent)
    for fn in (ps, show, stop, start, rm, logs, events, images):
        app.command(fn.__name__)(fn)
