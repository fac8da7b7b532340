"""Batch job commands: ``danlu run`` and ``danlu jobs`` / ``danlu job show|logs|cancel|events``."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import typer

from danlu.cli.client import Client
from danlu.cli.instance_cmds import LogJsonOpt, LogOffsetOpt, print_log
from danlu.cli.output import JsonOpt, console, fail, human, parse_env, print_json, print_table
from danlu.cli.telemetry_cmds import IdleStopOpt, IdleThresholdOpt, MaxDurationOpt, limits_body

job_app = typer.Typer(help="Inspect and cancel batch jobs.", no_args_is_help=True)
COLUMNS = [
    ("id", "ID"),
    ("status", "status"),
    ("gpus_text", "GPUs"),
    ("priority", "priority"),
    ("attempts", "runs"),
    ("preemptions", "preempted"),
    ("cost_text", "cost"),
    ("status_reason", "why"),
]
WHOLE = ("gpus_text",)
OPTIONAL = ("preemptions", "attempts", "priority")  # left out first to last on a narrow terminal
TERMINAL = ("succeeded", "failed", "cancelled")


def _why(v: dict[str, Any]) -> str:
    """The job's reason; while it waits for its ``--after`` job or for its ``--workspace``, that."""
    if v.get("waiting_for"):
        return f"waits for {v['waiting_for']} to succeed"
    if v.get("workspace_busy"):
        return f"waits for {v['workspace_of']}'s workspace: that rental runs, or another job is in it"
    return str(v["status_reason"])


def gpu_kinds(client: Client) -> dict[str, bool]:
    """Each GPU model of this server and whether it is simulated (as `danlu offers` marks them)."""
    return {o["gpu_model"]: bool(o["simulated"]) for o in client.get("/offers")}


def _row(v: dict[str, Any], kinds: dict[str, bool]) -> dict[str, Any]:
    model = v["gpu_model"] or "/".join(v["gpu_types"]) or "any"
    if "simulated" in v:
        sim = bool(v["simulated"])
    else:  # where it runs, or (queued) every model it may run on, is simulated: marked as `danlu ps` does
        candidates = [v["gpu_model"]] if v["gpu_model"] else (v["gpu_types"] or list(kinds))
        sim = bool(candidates) and all(kinds.get(m, False) for m in candidates)
    count = str(v["gpus"])
    if v.get("gpus_max"):  # elastic: its range, and what its current or last run has
        count = (
            f"{v['gpus_now']} of {v['gpus']}-{v['gpus_max']}" if v.get("gpus_now") else f"{v['gpus']}-{v['gpus_max']}"
        )
    return {
        **v,
        "gpus_text": f"{count}× {model}{' (sim)' if sim else ''}",
        "cost_text": f"{v['cost']} {v['currency']}",
        "status_reason": _why(v),
    }


def _gpu_range(text: str) -> tuple[int, int | None]:
    """``--gpus N`` or ``--gpus MIN-MAX`` (an elastic job); the server checks the numbers."""
    low, sep, high = text.strip().partition("-")
    if not low.isdigit() or (sep and not high.isdigit()):
        fail(f"--gpus takes a whole number (4) or a range (2-8), not {text!r}", "invalid_gpu_count")
    return int(low), int(high) if sep else None


def run(
    command: list[str] = typer.Argument(..., help="The command to run, after --"),
    gpus: str = typer.Option(
        "1",
        "--gpus",
        "--count",
        metavar="N|MIN-MAX",
        help="GPUs for the job, all on one host (gang); a range (2-8) makes it elastic: the scheduler picks the "
        "count each run, grows it into idle GPUs and shrinks it so others start (with notice; DANLU_GPUS says).",
    ),
    gpu: str = typer.Option(None, "--gpu", help="Allowed GPU models, comma-separated (default: any priced)."),
    max_price: str = typer.Option(None, "--max-price", help="Highest price per GPU-hour you accept."),
    deadline: str = typer.Option(None, "--deadline", help="ISO-8601 with timezone, e.g. 2026-12-03T08:00:00+08:00"),
    est_duration: int = typer.Option(None, "--est-duration", help="Estimated seconds on the first --gpu model."),
    interruptible: bool = typer.Option(False, "--interruptible", help="Cheaper; may be preempted with notice."),
    priority: str = typer.Option("normal", "--priority", help="high, normal or low."),
    image: str = typer.Option("host", "--image", help="Root filesystem to run in (see `danlu images`)."),
    env: list[str] = typer.Option(None, "--env", help="NAME=VALUE for your command (repeatable)."),
    env_file: str = typer.Option(None, "--env-file", help="A file of NAME=VALUE lines for your command."),
    team: str = typer.Option(None, "--team", help="Pay from this team's balance (default: your default team)."),
    after: str = typer.Option(
        None, "--after", metavar="JOB", help="Run once this job has succeeded (cancelled unrun if it fails)."
    ),
    workspace: str = typer.Option(
        None,
        "--workspace",
        metavar="ID",
        help="Run in this rental's workspace, in place (waits while the rental runs; it cannot start meanwhile).",
    ),
    idle_stop: str = IdleStopOpt,
    idle_threshold: str = IdleThresholdOpt,
    max_duration: str = MaxDurationOpt,
    wait: bool = typer.Option(
        False, "--wait", help="Wait until it runs (or ends), with a live line: its queue position and why it waits."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Queue a training job; the scheduler runs it on the cheapest GPUs that meet its needs."""
    low, high = _gpu_range(gpus)
    body = {
        "command": command,
        "gpus": low,
        "gpus_max": high,
        "gpu_types": [g for g in (gpu or "").split(",") if g],
        "max_price": max_price,
        "deadline": deadline,
        "est_duration_s": est_duration,
        "interruptible": interruptible,
        "priority": priority,
        "image": image,
        "env": parse_env(env, env_file),
        "team": team,
        "after": after,
        "workspace": workspace,
        **limits_body(idle_stop, idle_threshold, max_duration),
    }
    client = Client()
    v = client.post("/jobs", json=body)
    if wait and v["status"] == "queued":
        v = _wait_until_placed(client, v, quiet=as_json)
    if as_json:
        print_json(v)
    else:
        console.print(f"{v['id']} {v['status']}: {_why(v)}")


def _wait_until_placed(client: Client, v: dict[str, Any], *, quiet: bool) -> dict[str, Any]:
    """Poll the job each second until it leaves the queue, showing a status line (on a terminal)."""
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        status = None if quiet else stack.enter_context(console.status(""))
        while v["status"] == "queued":
            if status is not None:
                where = f"{v['queue_position']} of {v['queued_jobs']}" if v.get("queue_position") else "?"
                status.update(
                    f"{v['id']} queued {int(time.monotonic() - started)} s · position {where} · {v['status_reason']}"
                )
            time.sleep(1.0)
            v = client.get(f"/jobs/{v['id']}")
    return v


def jobs(as_json: bool = JsonOpt) -> None:
    """Your jobs with their state, runs, preemptions and cost."""
    client = Client()
    rows = client.get("/jobs")
    if as_json:
        print_json(rows)
        return
    kinds = gpu_kinds(client) if rows else {}
    print_table([_row(v, kinds) for v in rows], COLUMNS, whole=WHOLE, optional=OPTIONAL)


@job_app.command("show")
def show(job_id: str, as_json: bool = JsonOpt) -> None:
    client = Client()
    v = client.get(f"/jobs/{job_id}")
    if as_json:
        print_json(v)
        return
    r = _row(v, gpu_kinds(client))
    for key, label in [*COLUMNS, ("exit_code", "exit code"), ("submitted_at", "submitted"), ("ended_at", "ended")]:
        console.print(f"{label:>10}: {human(r.get(key))}", markup=False, highlight=False)


@job_app.command("cancel")
def cancel(
    job_id: str,
    wait: float = typer.Option(
        30, "--wait", min=0, help="Seconds to wait for a running job's run to stop (0: return at once)."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Cancel a job: a queued one ends at once; a running one is stopped (SIGTERM, then SIGKILL after
    the grace period). Prints the job as it is after the cancel."""
    client = Client()
    v = client.post(f"/jobs/{job_id}/cancel")
    deadline = time.monotonic() + wait
    while v["status"] not in TERMINAL and time.monotonic() < deadline:
        time.sleep(0.25)
        v = client.get(f"/jobs/{job_id}")
    if as_json:
        print_json(v)
    elif v["status"] in TERMINAL:
        console.print(f"{v['id']} {v['status']}: {v['status_reason']}", markup=False)
    else:
        console.print(
            f"{v['id']} cancelling: its run is being stopped (SIGTERM, then SIGKILL after the grace period); "
            f"`danlu job show {v['id']}` shows when it has ended",
            markup=False,
        )


@job_app.command("events")
def events(job_id: str, as_json: bool = JsonOpt) -> None:
    rows = Client().get(f"/jobs/{job_id}/events")
    if as_json:
        print_json(rows)
    else:
        print_table(rows, [("at", "at"), ("from_status", "from"), ("to_status", "to"), ("reason", "reason")])


@job_app.command("logs")
def logs(
    job_id: str,
    follow: bool = typer.Option(False, "-f", "--follow"),
    offset: int = LogOffsetOpt,
    as_json: bool = LogJsonOpt,
) -> None:
    """Output of every run of the job (runs append to one log); ``-f`` follows until it ends."""
    client = Client()
    path = f"/jobs/{job_id}"
    print_log(client, path, follow, lambda: client.get(path)["status"] not in TERMINAL, offset, as_json)


def register(app: typer.Typer) -> None:
    app.command("run", context_settings={"allow_interspersed_args": False})(run)
    app.command("jobs")(jobs)
    app.add_typer(job_app, name="job")
