"""``danlu server``'s wiring: the GPUs (NVML, simulated or a Slurm cluster's), the sandbox, the database,
bootstrap, the Platform, the control loop and the app, then uvicorn. The CLI only reads its options
(danlu.cli.server_cmd); the heavy imports wait until a server really starts."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn

from danlu.accounts.credentials import ensure_admin_password
from danlu.backend import Backend
from danlu.compute.backends.slurm import SlurmBackend, SlurmCli, SlurmConfig
from danlu.compute.backends.slurm import discover as discover_slurm
from danlu.compute.backends.slurm_parse import parse_gpu_models
from danlu.compute.gpus import DEFAULT_SIMULATED_SPEC, DiscoveredGpu, discover_nvml, parse_simulated_spec
from danlu.compute.limits import parse_seconds, parse_threshold
from danlu.compute.sandbox import volume
from danlu.compute.sandbox.probe import make_local_backend, sandbox_dir_for
from danlu.context import Platform, Settings
from danlu.core.clock import SystemClock
from danlu.core.errors import DanluError, InvalidInput
from danlu.core.units import parse_mib
from danlu.db.engine import open_database
from danlu.scheduling.policies import Policy, get_policy
from danlu.server import uid_claims
from danlu.server.app import create_app
from danlu.server.bootstrap import ADMIN_NAME, BootResult, bootstrap
from danlu.server.lease import DataDirLock
from danlu.server.loop import ControlLoop
from danlu.server.options import ServerOptions, default_data_dir
from danlu.telemetry import logs

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


def run(opts: ServerOptions, echo: Callable[[str], None]) -> None:
    """Start the server and serve until interrupted. Bad options or a failed set-up raise DanluError
    before anything listens; ``echo`` prints the banner (addresses, GPUs, sandbox, admin token)."""
    host, port = opts.host, opts.port
    logs.configure(opts.log_format, access_log=opts.access_log)
    os.umask(0o077)  # the platform's own files are private unless a folder is opened up on purpose
    data_dir = (opts.data_dir or default_data_dir()).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    url = opts.db or f"sqlite:///{data_dir / 'danlu.db'}"
    dir_lock: DataDirLock | None = None
    try:
        if opts.backend_name not in ("local", "slurm"):
            raise DanluError("invalid_backend", f"--backend is local or slurm, not {opts.backend_name!r}")
        if opts.encrypt_workspaces and opts.backend_name == "slurm":  # a node's runner makes its workspace
            raise DanluError("sandbox_setup", "--encrypt-workspaces works with the local backend only, not Slurm")
        tls = tls_options(opts.tls_cert, opts.tls_key)
        gpus, gpu_note, slurm = discover_gpus(opts)
        demotion = server_demotion(
            get_policy(opts.policy), opts.demote_after, opts.demote_slice
        )  # also: a typo in --policy
        resizing = server_resizing(opts.resize_cooldown)
        idle = server_idle_limits(
            opts.sample_interval, opts.idle_stop_default, opts.idle_stop_max, opts.idle_threshold_default
        )
        dir_lock = DataDirLock(data_dir)  # before anything touches the folder: one server per data folder
        dir_lock.acquire()
        uid_first, uid_count = parse_uid_range(opts.sandbox_uids)
        try:
            local, sandbox = make_local_backend(
                data_dir,
                no_sandbox=opts.no_sandbox,
                cgroups=opts.cgroups,
                network=opts.network or "auto",
                disk=opts.disk_limit if slurm is None else "watch",  # Slurm nodes' runners watch (docs/slurm.md)
                encrypt=opts.encrypt_workspaces,
                keys=opts.workspace_keys.resolve() if opts.workspace_keys else None,
            )
        except (OSError, ValueError) as exc:
            raise DanluError("sandbox_setup", str(exc)) from None
        if local.sandbox is not None and local.sandbox.as_root:  # renters run as uids of this range
            uid_claims.claim(data_dir, uid_first, uid_first + uid_count - 1)
        # Slurm: the same sandbox, made inside each Slurm job on its node
        backend: Backend = local if slurm is None else SlurmBackend(data_dir, slurm, sandboxed=sandbox.sandboxed)
        host_settings = host_flags(opts.cpus_per_gpu, opts.mem_per_gpu, opts.disk_per_gpu, opts.pids_per_gpu)
        if opts.network is not None:
            host_settings["network_policy"] = sandbox.network  # as asked (auto: outbound where it works)
        clock = SystemClock()
        database = open_database(url)
        sandbox_dir = opts.sandbox_dir.resolve() if opts.sandbox_dir else sandbox_dir_for(data_dir, sandbox)
        if local.sandbox is not None and (local.sandbox.disk == "image" or local.sandbox.keys):
            # workspaces' file systems, encrypted ones among them (a reboot unmounted them)
            volume.mount_all(sandbox_dir, local.sandbox.keys)
        boot = bootstrap(
            database,
            data_dir,
            opts.currency,
            gpus,
            clock.now_ms(),
            host_settings=host_settings,
            sandbox=sandbox,
            sandbox_dir=sandbox_dir,
            timezone=opts.timezone,
        )
    except BaseException:
        if dir_lock is not None:
            dir_lock.release()  # a set-up that failed leaves the data folder to the next try
        raise
    settings = _settings(opts, data_dir, sandbox_dir, (uid_first, uid_count), {**demotion, **resizing, **idle})
    platform = Platform(db=database, clock=clock, backend=backend, settings=settings, sandbox=sandbox)
    loop = ControlLoop(platform, dir_lock=dir_lock)
    app = create_app(platform, loop)
    scheme = "https" if tls else "http"
    banner(echo, platform, boot, gpus, gpu_note, slurm, host, port, interactive=sys.stdout.isatty(), scheme=scheme)
    # The objects of start-up (modules, the app, its routes and models: ~240,000) live as long as the
    # process: frozen, the collector no longer walks them, and a full collection (every 10th of the
    # middle generation's by default) waits for 100 of those. Measured with gc.callbacks beside
    # benchmarks/api_throughput.py (100 instances, 32 connections, ~70 s): 9 full collections of up to
    # 200 ms each, every thread stopped -- the p99 of the polled reads (issue 29) -- and after, 1-2.
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, 100)
    loop.start(first_tick=True)  # the runs a killed server left are judged before any request
    try:
        # log_config None: uvicorn's own lines go through our handler (JSON too), at its --log-level
        uvicorn.run(app, host=opts.host, port=opts.port, log_config=None, **UVICORN_OPTIONS, **tls)  # type: ignore[arg-type]
    finally:
        loop.stop()


def _settings(
    opts: ServerOptions, data_dir: Path, sandbox_dir: Path, uids: tuple[int, int], checked: dict[str, Any]
) -> Settings:
    """The platform's settings from the options (``checked``: the demotion, resizing and idle limits, parsed before)."""
    return Settings(
        data_dir=data_dir,
        stop_grace_s=opts.stop_grace,
        exhausted_grace_s=opts.exhausted_grace,
        meter_interval_s=opts.meter_interval,
        tick_interval_s=opts.tick,
        scheduler_policy=opts.policy,
        preempt_notice_s=opts.preempt_notice,
        sandbox_uid_first=uids[0],
        sandbox_uid_count=uids[1],
        sandbox_dir=sandbox_dir,
        timezone=opts.timezone,  # the same zone bootstrap locked into the database
        webhook_allow_private=opts.webhook_allow_private,
        ssh_host=opts.host,
        ssh_port=opts.ssh_port,
        **checked,
    )


def discover_gpus(opts: ServerOptions) -> tuple[list[DiscoveredGpu], str, SlurmConfig | None]:
    """This deployment's GPUs, a line saying where they came from, and the Slurm cluster's settings
    (``--backend slurm``): its GRES; ``--simulate-gpus``; else NVML, else clearly labelled simulated ones."""
    slurm = None
    if opts.backend_name == "slurm":
        slurm_config = SlurmConfig(
            conf=opts.slurm_conf.resolve() if opts.slurm_conf else None,
            partition=opts.slurm_partition,
            spot_partition=opts.slurm_spot_partition or opts.slurm_partition,
        )
        gres_models = parse_gpu_models(opts.slurm_gpu_model)
        gpus, slurm_config.gres_types = discover_slurm(
            SlurmCli(slurm_config), gres_models, simulated=opts.slurm_fake_gpus
        )
        gpu_note = f"Slurm GRES of {len({g.host for g in gpus})} node(s)" + (
            " — SIMULATED (--slurm-fake-gpus: the cluster's GPU devices are not real)" if opts.slurm_fake_gpus else ""
        )
        slurm = slurm_config
    elif opts.simulate_gpus:
        gpus = parse_simulated_spec(opts.simulate_gpus, "local")
        gpu_note = f"simulated GPUs ({opts.simulate_gpus}) as requested by --simulate-gpus"
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
    return gpus, gpu_note, slurm


def banner(
    echo: Callable[[str], None],
    platform: Platform,
    boot: BootResult,
    gpus: list[DiscoveredGpu],
    gpu_note: str,
    slurm: SlurmConfig | None,
    host: str,
    port: int,
    interactive: bool = False,
    scheme: str = "http",
) -> None:
    """What a newcomer reads first: where the platform listens, its GPUs and sandbox, how to sign in.
    The admin token and password are shown only when ``interactive`` (a terminal)."""
    data_dir, sandbox_dir, sandbox = platform.settings.data_dir, platform.sandbox_root, platform.sandbox
    echo(f"danlu {boot.currency} platform on {scheme}://{host}:{port}  (API docs: {scheme}://{host}:{port}/docs)")
    echo(f"database: {platform.db.dialect}  data directory: {data_dir}")
    echo(f"GPUs: {len(gpus)} — {gpu_note}")
    for g in gpus:
        where = f"{g.host} " if g.host else ""
        echo(f"  {where}[{g.index}] {g.model} {g.vram_mb // 1024} GB{'  (simulated)' if g.simulated else ''}")
    if slurm is not None:
        echo(f"backend: slurm (SLURM_CONF={slurm.conf or 'default'}, partition {slurm.partition or 'default'})")
    echo(sandbox.banner())
    if sandbox_dir != data_dir:
        echo(f"  renters' workspaces: {sandbox_dir} (the data directory's parents are not traversable)")
    # The first start's secrets go to a person at a terminal; under systemd or a pipe (journald,
    # a log collector) only their 0600 files name them (issue 28).
    token_file = data_dir / "admin-token"
    if boot.admin_token and interactive:
        echo(f"admin token (shown once, also in {token_file}, mode 0600): {boot.admin_token}")
    else:
        echo(f"admin token: in {token_file} (mode 0600)")
    echo(f"try:  export DANLU_URL={scheme}://{host}:{port} DANLU_TOKEN=$(cat {token_file}); danlu offers")
    password = ensure_admin_password(platform, data_dir, ADMIN_NAME)
    shown = (
        f"{password}  (shown once, also in {data_dir / 'admin-password'})"
        if password and interactive
        else f"in {data_dir / 'admin-password'} (mode 0600)"
    )
    echo(f"console: {scheme}://{host}:{port}/  sign in as {ADMIN_NAME!r}, password {shown}")
    if platform.settings.ssh_port is not None:
        echo(
            f"ssh:  ssh -p {platform.settings.ssh_port} INSTANCE_ID@{host}  (keys: danlu key add ~/.ssh/id_ed25519.pub)"
        )


def tls_options(cert: Path | None, key: Path | None) -> dict[str, str]:
    """uvicorn's TLS options for ``--tls-cert``/``--tls-key``: both or neither, each a readable PEM
    file, the pair matching (checked here, so a mistake is an error before anything listens)."""
    if cert is None and key is None:
        return {}
    if cert is None or key is None:
        raise InvalidInput("invalid_tls", "HTTPS needs both --tls-cert and --tls-key (PEM files)")
    import ssl

    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except FileNotFoundError as exc:
        raise InvalidInput("invalid_tls", f"cannot read {exc.filename}") from None
    except (ssl.SSLError, OSError) as exc:
        raise InvalidInput(
            "invalid_tls", f"--tls-cert {cert} and --tls-key {key} are not a PEM certificate and its key: {exc}"
        ) from None
    return {"ssl_certfile": str(cert), "ssl_keyfile": str(key)}


def parse_uid_range(text: str) -> tuple[int, int]:
    first, _, last = text.partition("-")
    try:
        lo, hi = int(first), int(last)
    except ValueError:
        raise InvalidInput("invalid_uid_range", "--sandbox-uids is FIRST-LAST, e.g. 2000000-2999999") from None
    if not 1000 <= lo <= hi < 2**31 - 1:
        raise InvalidInput("invalid_uid_range", "--sandbox-uids must lie within 1000..2147483646, FIRST <= LAST")
    return lo, hi - lo + 1


def host_flags(cpus: float | None, mem: str | None, disk: str | None, pids: int | None) -> dict[str, int | str]:
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


def server_demotion(policy: Policy, demote_after: str | None, demote_slice: str | None) -> dict[str, Any]:
    """The operator's demotion line and slice (docs/scheduling.md), for a policy that demotes."""
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


def server_resizing(resize_cooldown: str | None) -> dict[str, Any]:
    """How long an elastic job runs at one count before a resize (docs/scheduling.md, elastic jobs)."""
    if resize_cooldown is None:
        return {}
    try:
        return {"resize_cooldown_s": parse_seconds(resize_cooldown, "invalid_resize_cooldown", "--resize-cooldown")}
    except InvalidInput as exc:  # (raised here by name, so the code's Chinese sentence is checked for)
        raise InvalidInput("invalid_resize_cooldown", exc.message) from None


def server_idle_limits(
    sample_interval: float, idle_stop_default: str | None, idle_stop_max: str | None, threshold: str
) -> dict[str, Any]:
    """The operator's telemetry and idle auto-stop settings (docs/telemetry.md), checked up front."""
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
