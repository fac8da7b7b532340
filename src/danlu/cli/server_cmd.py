"""``danlu server``: its options; the wiring (bootstrap, the API and the control loop in one process) is
danlu.server.main, imported only when a server really starts, so every other `danlu` command starts fast."""

from __future__ import annotations

import os
import typing
from pathlib import Path

import typer

from danlu.cli import server_config
from danlu.cli.output import JsonOpt, or_fail, print_json
from danlu.compute.gpus import DEFAULT_SIMULATED_SPEC

ConfigOpt = typer.Option(
    None,
    "--config",
    help='A TOML file of settings: each flag\'s name without dashes (port = 8100, db_file = "/etc/danlu/db"); '
    "DANLU_* environment variables and flags override it (docs/operations.md).",
)


def server(
    ctx: typer.Context,
    config: Path = ConfigOpt,
    db: str = typer.Option(
        "",
        "--db",
        help="SQLAlchemy URL; default: SQLite in the data directory. PostgreSQL: postgresql+psycopg://user@host/dbname",
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8000, "--port"),
    tls_cert: Path = typer.Option(
        None, "--tls-cert", help="Serve HTTPS with this certificate chain (PEM); with --tls-key (docs/operations.md)."
    ),
    tls_key: Path = typer.Option(None, "--tls-key", help="The certificate's private key (PEM), for --tls-cert."),
    log_format: str = typer.Option(
        "text", "--log-format", help="text, or json: one object per line with the request id (docs/operations.md)."
    ),
    access_log: bool = typer.Option(
        True, "--access-log/--no-access-log", help="Log one line per HTTP request (method, route, status, ms)."
    ),
    ssh_port: int = typer.Option(
        None, "--ssh-port", help="Serve the SSH gateway here (ssh -p PORT INSTANCE@HOST; docs/access.md). Off if unset."
    ),
    data_dir: Path = typer.Option(None, "--data-dir", help="Workspaces, logs, admin token, SQLite file."),
    sandbox_dir: Path = typer.Option(
        None,
        "--sandbox-dir",
        help="Where renters' workspaces live (default: the data directory, when others may traverse its parents).",
    ),
    simulate_gpus: str = typer.Option(
        "", "--simulate-gpus", help=f"Declare simulated GPUs instead of NVML, e.g. {DEFAULT_SIMULATED_SPEC}"
    ),
    currency: str = typer.Option("CNY", "--currency", help="Deployment currency (fixed once money exists)."),
    timezone: str = typer.Option(
        "UTC", "--timezone", help="Deployment time zone for invoice months and tariff hours (fixed at first start)."
    ),
    stop_grace: int = typer.Option(10, "--stop-grace", help="Seconds between SIGTERM and SIGKILL on stop."),
    exhausted_grace: int = typer.Option(0, "--exhausted-grace", help="Grace in seconds when a balance runs out."),
    meter_interval: float = typer.Option(10.0, "--meter-interval", help="Seconds between ledger postings."),
    tick: float = typer.Option(1.0, "--tick", help="Seconds between process checks."),
    policy: str = typer.Option("danlu", "--policy", help="Job scheduling policy: fifo, backfill, danlu, danlu-cost."),
    preempt_notice: int = typer.Option(60, "--preempt-notice", help="Guaranteed notice (s) before a preemption."),
    demote_after: str = typer.Option(
        None,
        "--demote-after",
        help="danlu policies: GPU-time of service after which a checkpointing job may make way, with notice, "
        "for a shorter one of equal priority, e.g. 8h (default); off: never.",
    ),
    demote_slice: str = typer.Option(
        None, "--demote-slice", help="danlu policies: the least a job runs after each start before a demotion (1h)."
    ),
    resize_cooldown: str = typer.Option(
        None,
        "--resize-cooldown",
        help="The least an elastic job (`danlu run --gpus 2-8`) runs at one GPU count before it may grow (30m); "
        "GPUs it borrowed go back to a waiting job sooner.",
    ),
    no_sandbox: bool = typer.Option(
        False, "--no-sandbox", help="Run renters' code unsandboxed, as this server's user: one trusted user only."
    ),
    network: str = typer.Option(
        None,
        "--network",
        help="Sandbox network policy of this host: auto (outbound where it works), none, outbound, host.",
    ),
    cgroups: str = typer.Option("auto", "--cgroups", help="Limits through cgroups: auto, v2, v1, off (rlimits)."),
    disk_limit: str = typer.Option(
        "auto",
        "--disk-limit",
        help="How workspaces' disk limits hold: auto (image where this host can), image (an ext4 file system of "
        "the limit's size per workspace: the kernel refuses writes past it; needs root and loop devices), "
        "watch (measured every 15 s, the run stopped when over).",
    ),
    encrypt_workspaces: bool = typer.Option(
        False,
        "--encrypt-workspaces",
        help="Keep new workspaces encrypted at rest (gocryptfs, a key per workspace; needs root and FUSE). "
        "Protects a stolen or discarded disk, not against the operator: docs/security.md.",
    ),
    workspace_keys: Path = typer.Option(
        None,
        "--workspace-keys",
        help="Folder of the workspaces' keys (default DATA/workspace-keys). Keep it off the disk the "
        "workspaces are on, or a stolen disk holds the keys too.",
    ),
    sandbox_uids: str = typer.Option(
        "2000000-2999999", "--sandbox-uids", help="Range of unprivileged uids given to renters, one each."
    ),
    cpus_per_gpu: float = typer.Option(None, "--cpus-per-gpu", help="vCPUs a rental gets per GPU."),
    mem_per_gpu: str = typer.Option(None, "--mem-per-gpu", help="Memory a rental gets per GPU, e.g. 16G."),
    disk_per_gpu: str = typer.Option(None, "--disk-per-gpu", help="Workspace disk per GPU, e.g. 100G."),
    pids_per_gpu: int = typer.Option(None, "--pids-per-gpu", help="Processes a rental may run per GPU."),
    sample_interval: float = typer.Option(5.0, "--sample-interval", help="Seconds between telemetry samples."),
    idle_stop_default: str = typer.Option(
        "20m", "--idle-stop-default", help="Stop rentals idle this long unless they ask otherwise; off: never."
    ),
    idle_stop_max: str = typer.Option(
        None, "--idle-stop-max", help="The longest idle window a renter may ask for (it cannot be turned off)."
    ),
    idle_threshold_default: str = typer.Option("5", "--idle-threshold", help="Idle: every GPU under this %."),
    webhook_allow_private: bool = typer.Option(
        False, "--webhook-allow-private", help="Let renters' webhooks reach private and loopback addresses."
    ),
    backend_name: str = typer.Option(
        "local", "--backend", help="Where runs execute: local (this machine's GPUs) or slurm (a Slurm cluster's)."
    ),
    slurm_conf: Path = typer.Option(None, "--slurm-conf", help="slurm.conf of the cluster (default: Slurm's own)."),
    slurm_partition: str = typer.Option("", "--slurm-partition", help="Partition for on-demand runs."),
    slurm_spot_partition: str = typer.Option(
        "", "--slurm-spot-partition", help="Partition for interruptible runs (default: --slurm-partition)."
    ),
    slurm_gpu_model: list[str] = typer.Option(
        [], "--slurm-gpu-model", help="GRES type = catalog model, e.g. a100=A100-80GB (repeatable)."
    ),
    slurm_fake_gpus: bool = typer.Option(
        False,
        "--slurm-fake-gpus",
        help="The cluster's GPU GRES are not real GPUs (a development cluster): list them simulated.",
    ),
) -> None:
    """Run the danlu control plane (REST API + background control loop)."""
    given = {k: v for k, v in locals().items() if k not in ("ctx", "config")}
    from danlu.server.main import run
    from danlu.server.options import ServerOptions

    for setting in or_fail(lambda: _resolve(ctx, config)).values():
        if setting.given:  # from the environment or the file; the flags' own values are typed already
            given[setting.name] = setting.value
    or_fail(lambda: run(ServerOptions(**given), typer.echo))


def _resolve(ctx: typer.Context, config: Path | None) -> dict[str, server_config.Setting]:
    from danlu.server.options import ServerOptions

    table = server_config.load(config) if config else {}
    return server_config.resolve(ctx, table, os.environ, typing.get_type_hints(ServerOptions))


def server_settings(config: Path | None, argv: list[str]) -> dict[str, server_config.Setting]:
    """The settings `danlu server --config CONFIG ARGV…` would run with here (this environment's
    DANLU_* included): for `danlu config show` and the commands that work on a stopped server's
    database and data folder (`danlu admin backup|restore`)."""
    from danlu.cli.main import app

    command = typer.main.get_command(app).commands["server"]  # type: ignore[attr-defined]
    return _resolve(command.make_context("server", argv, resilient_parsing=True), config)


def database_and_data_dir(config: Path | None, db: str | None, data_dir: Path | None) -> tuple[str, Path]:
    """The database URL and data folder of the server configured so (as `danlu server` finds them)."""
    from danlu.server.options import default_data_dir

    argv = [*(["--db", db] if db else []), *(["--data-dir", str(data_dir)] if data_dir else [])]
    found = server_settings(config, argv)
    folder = Path(found["data_dir"].value or default_data_dir()).resolve()
    return str(found["db"].value or f"sqlite:///{folder / 'danlu.db'}"), folder


def config_show(config: Path = ConfigOpt, as_json: bool = JsonOpt) -> None:
    """The server's settings as `danlu server --config FILE` here would take them (this environment's
    DANLU_* included), each with where it came from; the database password masked."""
    found = or_fail(lambda: server_settings(config, []))
    if as_json:
        print_json({k: {"value": server_config.shown(v), "source": v.source} for k, v in found.items()})
        return
    for setting in found.values():
        typer.echo(server_config.toml_line(setting))


def register(app: typer.Typer) -> None:
    app.command("server")(server)
    config_app = typer.Typer(
        help="The server's configuration (file, DANLU_* environment, flags).", no_args_is_help=True
    )
    config_app.command("show")(config_show)
    app.add_typer(config_app, name="config")
