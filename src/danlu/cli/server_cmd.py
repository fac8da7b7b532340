"""``danlu server``: bootstrap, then run the API and the control loop in one process."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import typer

from danlu.compute.gpus import DEFAULT_SIMULATED_SPEC


def default_data_dir() -> Path:
    env = os.environ.get("DANLU_DATA_DIR")
    return Path(env) if env else Path.home() / ".local" / "share" / "danlu"


def server(
    db: str = typer.Option(
        "",
        "--db",
        help="SQLAlchemy URL; default: SQLite in the data directory. PostgreSQL: postgresql+psycopg://user@host/dbname",
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8000, "--port"),
    data_dir: Path = typer.Option(None, "--data-dir", help="Workspaces, logs, admin token, SQLite file."),
    simulate_gpus: str = typer.Option(
        "", "--simulate-gpus", help=f"Declare simulated GPUs instead of NVML, e.g. {DEFAULT_SIMULATED_SPEC}"
    ),
    currency: str = typer.Option("CNY", "--currency", help="Deployment currency (fixed once money exists)."),
    stop_grace: int = typer.Option(10, "--stop-grace", help="Seconds between SIGTERM and SIGKILL on stop."),
    exhausted_grace: int = typer.Option(0, "--exhausted-grace", help="Grace in seconds when a balance runs out."),
    meter_interval: float = typer.Option(10.0, "--meter-interval", help="Seconds between ledger postings."),
    tick: float = typer.Option(1.0, "--tick", help="Seconds between process checks."),
    policy: str = typer.Option("danlu", "--policy", help="Job scheduling policy: fifo, backfill, danlu, danlu-cost."),
    preempt_notice: int = typer.Option(60, "--preempt-notice", help="Guaranteed notice (s) before a preemption."),
) -> None:
    """Run the danlu control plane (REST API + background control loop)."""
    # Heavy imports (SQLAlchemy, Alembic, uvicorn) only when the server really starts, so that
    # every other `danlu` command starts fast.
    import uvicorn

    from danlu.api.app import create_app
    from danlu.compute.executor import LocalExecutor
    from danlu.compute.gpus import discover_nvml, parse_simulated_spec
    from danlu.context import Platform, Settings
    from danlu.core.clock import SystemClock
    from danlu.core.errors import DanluError
    from danlu.db.engine import open_database
    from danlu.scheduling.policies import get_policy
    from danlu.server.bootstrap import bootstrap
    from danlu.server.loop import ControlLoop

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    data_dir = (data_dir or default_data_dir()).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    url = db or f"sqlite:///{data_dir / 'danlu.db'}"
    try:
        if simulate_gpus:
            gpus = parse_simulated_spec(simulate_gpus, "local")
            gpu_note = f"simulated GPUs ({simulate_gpus}) as requested by --simulate-gpus"
        else:
            found = discover_nvml()
            if found:
                gpus, gpu_note = found, "real GPUs discovered with NVML"
            else:
                gpus = parse_simulated_spec(DEFAULT_SIMULATED_SPEC, "local")
                gpu_note = (
                    f"NVML found no NVIDIA GPU on this machine: SIMULATED GPUs {DEFAULT_SIMULATED_SPEC} "
                    "(every listing marks them simulated)"
                )
        get_policy(policy)  # fail fast on a typo
        clock = SystemClock()
        database = open_database(url)
        boot = bootstrap(database, data_dir, currency, gpus, clock.now_ms())
    except DanluError as exc:
        typer.echo(f"error [{exc.code}]: {exc.message}", err=True)
        raise typer.Exit(2) from None
    settings = Settings(
        data_dir=data_dir,
        stop_grace_s=stop_grace,
        exhausted_grace_s=exhausted_grace,
        meter_interval_s=meter_interval,
        tick_interval_s=tick,
        scheduler_policy=policy,
        preempt_notice_s=preempt_notice,
    )
    platform = Platform(db=database, clock=clock, executor=LocalExecutor(), settings=settings)
    loop = ControlLoop(platform)
    app = create_app(platform, loop)
    typer.echo(f"danlu {boot.currency} platform on http://{host}:{port}  (API docs: http://{host}:{port}/docs)")
    typer.echo(f"database: {database.dialect}  data directory: {data_dir}")
    typer.echo(f"GPUs: {len(gpus)} — {gpu_note}")
    for g in gpus:
        typer.echo(f"  [{g.index}] {g.model} {g.vram_mb // 1024} GB{'  (simulated)' if g.simulated else ''}")
    token_file = data_dir / "admin-token"
    if boot.admin_token:
        typer.echo(f"admin token (shown once, also in {token_file}, mode 0600): {boot.admin_token}")
    else:
        typer.echo(f"admin token: in {token_file}")
    typer.echo(f"try:  export DANLU_URL=http://{host}:{port} DANLU_TOKEN=$(cat {token_file}); danlu offers")
    loop.start()
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        loop.stop()


def register(app: typer.Typer) -> None:
    app.command("server")(server)
