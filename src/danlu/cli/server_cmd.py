"""``danlu server``: bootstrap, then run the API and the control loop in one process."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from danlu.compute.gpus import DEFAULT_SIMULATED_SPEC

if TYPE_CHECKING:
    from danlu.scheduling.policies import Policy

# How uvicorn serves the API (benchmarks/api_throughput.py serves its bare endpoint with the same):
# one process (the control loop must run in exactly one), uvloop and httptools (both dependencies),
# no per-request access log, a listen backlog for bursts of connections.
UVICORN_OPTIONS: dict[str, object] = {
    "log_level": "warning",
    "access_log": False,
    "loop": "uvloop",
    "http": "httptools",
    "backlog": 2048,
}


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
    no_sandbox: bool = typer.Option(
        False, "--no-sandbox", help="Run renters' code unsandboxed, as this server's user: one trusted user only."
    ),
    network: str = typer.Option(
        None,
        "--network",
        help="Sandbox network policy of this host: auto (outbound where it works), none, outbound, host.",
    ),
    cgroups: str = typer.Option("auto", "--cgroups", help="Limits through cgroups: auto, v2, v1, off (rlimits)."),
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
    # Heavy imports (SQLAlchemy, Alembic, uvicorn) only when the server really starts, so that
    # every other `danlu` command starts fast.
    import uvicorn

    from danlu.accounts.credentials import ensure_admin_password
    from danlu.backend import Backend
    from danlu.compute.backends.slurm import SlurmBackend, SlurmCli, SlurmConfig, parse_gpu_models
    from danlu.compute.backends.slurm import discover as discover_slurm
    from danlu.compute.gpus import discover_nvml, parse_simulated_spec
    from danlu.compute.sandbox.probe import make_local_backend, sandbox_dir_for
    from danlu.context import Platform, Settings
    from danlu.core.clock import SystemClock
    from danlu.core.errors import DanluError
    from danlu.db.engine import open_database
    from danlu.scheduling.policies import get_policy
    from danlu.server.app import create_app
    from danlu.server.bootstrap import ADMIN_NAME, bootstrap
    from danlu.server.lease import DataDirLock
    from danlu.server.loop import ControlLoop

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.umask(0o077)  # the platform's own files are private unless a folder is opened up on purpose
    data_dir = (data_dir or default_data_dir()).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    url = db or f"sqlite:///{data_dir / 'danlu.db'}"
    try:
        if backend_name not in ("local", "slurm"):
            raise DanluError("invalid_backend", f"--backend is local or slurm, not {backend_name!r}")
        slurm = None
        if backend_name == "slurm":
            slurm_config = SlurmConfig(
                conf=slurm_conf.resolve() if slurm_conf else None,
                partition=slurm_partition,
                spot_partition=slurm_spot_partition or slurm_partition,
            )
            gres_models = parse_gpu_models(slurm_gpu_model)
            gpus, slurm_config.gres_types = discover_slurm(
                SlurmCli(slurm_config), gres_models, simulated=slurm_fake_gpus
            )
            gpu_note = f"Slurm GRES of {len({g.host for g in gpus})} node(s)" + (
                " — SIMULATED (--slurm-fake-gpus: the cluster's GPU devices are not real)" if slurm_fake_gpus else ""
            )
            slurm = slurm_config
        elif simulate_gpus:
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
        demotion = server_demotion(get_policy(policy), demote_after, demote_slice)  # also: a typo in --policy
        idle = server_idle_limits(sample_interval, idle_stop_default, idle_stop_max, idle_threshold_default)
        dir_lock = DataDirLock(data_dir)  # before anything touches the folder: one server per data folder
        dir_lock.acquire()
        uid_first, uid_count = parse_uid_range(sandbox_uids)
        try:
            local, sandbox = make_local_backend(
                data_dir, no_sandbox=no_sandbox, cgroups=cgroups, network=network or "auto"
            )
        except (OSError, ValueError) as exc:
            raise DanluError("sandbox_setup", str(exc)) from None
        # Slurm: the same sandbox, made inside each Slurm job on its node
        backend: Backend = local if slurm is None else SlurmBackend(data_dir, slurm, sandboxed=sandbox.sandboxed)
        host_settings = host_flags(cpus_per_gpu, mem_per_gpu, disk_per_gpu, pids_per_gpu)
        if network is not None:
            host_settings["network_policy"] = sandbox.network  # as asked (auto: outbound where it works)
        clock = SystemClock()
        database = open_database(url)
        sandbox_dir = sandbox_dir.resolve() if sandbox_dir else sandbox_dir_for(data_dir, sandbox)
        boot = bootstrap(
            database,
            data_dir,
            currency,
            gpus,
            clock.now_ms(),
            host_settings=host_settings,
            sandbox=sandbox,
            sandbox_dir=sandbox_dir,
            timezone=timezone,
        )
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
        **demotion,
        sandbox_uid_first=uid_first,
        sandbox_uid_count=uid_count,
        sandbox_dir=sandbox_dir,
        timezone=timezone,  # the same zone bootstrap locked into the database
        **idle,
        webhook_allow_private=webhook_allow_private,
        ssh_host=host,
        ssh_port=ssh_port,
    )
    platform = Platform(db=database, clock=clock, backend=backend, settings=settings, sandbox=sandbox)
    loop = ControlLoop(platform, dir_lock=dir_lock)
    app = create_app(platform, loop)
    typer.echo(f"danlu {boot.currency} platform on http://{host}:{port}  (API docs: http://{host}:{port}/docs)")
    typer.echo(f"database: {database.dialect}  data directory: {data_dir}")
    typer.echo(f"GPUs: {len(gpus)} — {gpu_note}")
    for g in gpus:
        where = f"{g.host} " if g.host else ""
        typer.echo(f"  {where}[{g.index}] {g.model} {g.vram_mb // 1024} GB{'  (simulated)' if g.simulated else ''}")
    if slurm is not None:
        typer.echo(f"backend: slurm (SLURM_CONF={slurm.conf or 'default'}, partition {slurm.partition or 'default'})")
    typer.echo(sandbox.banner())
    if sandbox_dir != data_dir:
        typer.echo(f"  renters' workspaces: {sandbox_dir} (the data directory's parents are not traversable)")
    token_file = data_dir / "admin-token"
    if boot.admin_token:
        typer.echo(f"admin token (shown once, also in {token_file}, mode 0600): {boot.admin_token}")
    else:
        typer.echo(f"admin token: in {token_file}")
    typer.echo(f"try:  export DANLU_URL=http://{host}:{port} DANLU_TOKEN=$(cat {token_file}); danlu offers")
    password = ensure_admin_password(platform, data_dir, ADMIN_NAME)
    shown = (
        f"{password}  (shown once, also in {data_dir / 'admin-password'})"
        if password
        else "in " + str(data_dir / "admin-password")
    )
    typer.echo(f"console: http://{host}:{port}/  sign in as {ADMIN_NAME!r}, password {shown}")
    if ssh_port is not None:
        typer.echo(f"ssh:  ssh -p {ssh_port} INSTANCE_ID@{host}  (keys: danlu key add ~/.ssh/id_ed25519.pub)")
    loop.start()
    try:
        uvicorn.run(app, host=host, port=port, **UVICORN_OPTIONS)  # type: ignore[arg-type]
    finally:
        loop.stop()


def parse_uid_range(text: str) -> tuple[int, int]:
    from danlu.core.errors import InvalidInput

    first, _, last = text.partition("-")
    try:
        lo, hi = int(first), int(last)
    except ValueError:
        raise InvalidInput("invalid_uid_range", "--sandbox-uids is FIRST-LAST, e.g. 2000000-2999999") from None
    if not 1000 <= lo <= hi < 2**31 - 1:
        raise InvalidInput("invalid_uid_range", "--sandbox-uids must lie within 1000..2147483646, FIRST <= LAST")
    return lo, hi - lo + 1


def host_flags(cpus: float | None, mem: str | None, disk: str | None, pids: int | None) -> dict[str, int | str]:
    from danlu.core.units import parse_mib

    out: dict[str, int | str] = {}
    if cpus is not None:
        out["cpus_per_gpu_milli"] = round(cpus * 1000)
    if mem is not None:
        out["mem_per_gpu_mb"] = parse_mib(mem, "--mem-per-gpu")
    if disk is not None:
        out["disk_per_gpu_mb"] = parse_mib(disk, "--disk-per-gpu")
    if pids is not None:
        out["pids_per_gpu"] = pids
    return out


def register(app: typer.Typer) -> None:
    app.command("server")(server)


def server_demotion(policy: Policy, demote_after: str | None, demote_slice: str | None) -> dict[str, Any]:
    """The operator's demotion line and slice (docs/scheduling.md), for a policy that demotes."""
    from danlu.compute.limits import parse_seconds
    from danlu.core.errors import InvalidInput

    if policy.demote_after_ms is None:
        if demote_after is not None or demote_slice is not None:
            raise InvalidInput(
                "invalid_demotion",
                f"policy {policy.name} never demotes: --demote-after and --demote-slice apply to danlu and danlu-cost",
            )
        return {}
    out: dict[str, Any] = {}
    if demote_after is not None:
        off = demote_after.strip().lower() == "off"
        out["demote_after_s"] = None if off else parse_seconds(demote_after, "invalid_demotion", "--demote-after")
    if demote_slice is not None:
        out["demote_slice_s"] = parse_seconds(demote_slice, "invalid_demotion", "--demote-slice")
    return out


def server_idle_limits(
    sample_interval: float, idle_stop_default: str | None, idle_stop_max: str | None, threshold: str
) -> dict[str, Any]:
    """The operator's telemetry and idle auto-stop settings (docs/telemetry.md), checked up front."""
    from danlu.compute.limits import parse_seconds, parse_threshold
    from danlu.core.errors import InvalidInput

    if not 0.5 <= sample_interval <= 3600:
        raise InvalidInput("invalid_sample_interval", "--sample-interval is 0.5 to 3600 seconds")
    default_s = None
    if idle_stop_default and idle_stop_default.strip().lower() not in ("off", "0"):
        default_s = parse_seconds(idle_stop_default, "invalid_idle_stop", "--idle-stop-default")
    max_s = parse_seconds(idle_stop_max, "invalid_idle_stop", "--idle-stop-max") if idle_stop_max else None
    if default_s is not None and max_s is not None and default_s > max_s:
        raise InvalidInput("invalid_idle_stop", "--idle-stop-default is longer than --idle-stop-max")
    return {
        "sample_interval_s": sample_interval,
        "idle_stop_default_s": default_s if default_s is not None else max_s,
        "idle_stop_max_s": max_s,
        "idle_threshold_default_pm": parse_threshold(threshold),
    }
