"""``danlu server``'s options as one value (its flags, `danlu server --help`; the config file's keys,
danlu.cli.server_config), apart from the server's wiring (danlu.server.main) so that commands
reading them (`danlu config show`, `danlu admin backup|restore|db`) start without loading it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ServerOptions:
    """``danlu server``'s options, as the CLI documents them (`danlu server --help`)."""

    db: str = ""
    host: str = "127.0.0.1"
    port: int = 8000
    tls_cert: Path | None = None
    tls_key: Path | None = None
    log_format: str = "text"
    access_log: bool = True
    ssh_port: int | None = None
    data_dir: Path | None = None
    sandbox_dir: Path | None = None
    simulate_gpus: str = ""
    currency: str = "CNY"
    timezone: str = "UTC"
    stop_grace: int = 10
    exhausted_grace: int = 0
    meter_interval: float = 10.0
    tick: float = 1.0
    policy: str = "danlu"
    preempt_notice: int = 60
    demote_after: str | None = None
    demote_slice: str | None = None
    resize_cooldown: str | None = None
    no_sandbox: bool = False
    network: str | None = None
    cgroups: str = "auto"
    disk_limit: str = "auto"
    encrypt_workspaces: bool = False
    workspace_keys: Path | None = None
    sandbox_uids: str = "2000000-2999999"
    cpus_per_gpu: float | None = None
    mem_per_gpu: str | None = None
    disk_per_gpu: str | None = None
    pids_per_gpu: int | None = None
    sample_interval: float = 5.0
    idle_stop_default: str = "20m"
    idle_stop_max: str | None = None
    idle_threshold_default: str = "5"
    webhook_allow_private: bool = False
    backend_name: str = "local"
    slurm_conf: Path | None = None
    slurm_partition: str = ""
    slurm_spot_partition: str = ""
    slurm_gpu_model: list[str] = field(default_factory=list)
    slurm_fake_gpus: bool = False


def default_data_dir() -> Path:
    env = os.environ.get("DANLU_DATA_DIR")
    return Path(env) if env else Path.home() / ".local" / "share" / "danlu"
