"""First-start and every-start work: migrate, settings, system accounts, the local host with its
GPUs and per-GPU limits, the built-in image, the admin user (token printed once and written to
DATA_DIR/admin-token, mode 0600), and the data directory's permissions: the platform's own files
(database, tokens, logs, run folders) are 0600/0700. The sandbox folder (the data folder itself
unless the operator chose another) is 0711, traversable but not listable, since bubblewrap binds
each run's workspace by path as the renter's uid; each workspace is 0700 and owned by that uid."""

from __future__ import annotations

import hashlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from danlu.backend import SandboxStatus
from danlu.billing.accounts import ensure_accounts
from danlu.billing.signup import sign_up
from danlu.compute.devices import make_simulated_device_files
from danlu.compute.gpus import DiscoveredGpu
from danlu.compute.hosts import machine_defaults
from danlu.compute.images import ensure_host_image
from danlu.core.errors import InvalidInput
from danlu.core.money import exponent
from danlu.db.engine import Database, migrate
from danlu.db.models import Gpu, HostRow, Setting, User

ADMIN_NAME = "admin"


@dataclass
class BootResult:
    admin_token: str | None  # only on the very first start
    currency: str


PRIVATE_DIRS = ("runs",)  # 0700: only the platform
SANDBOX_DIRS = ("workspaces", "jobs", "control", "images", "devices")  # 0711: bound into sandboxes


def _mkdirs(path: Path, mode: int) -> None:
    """``mkdir -p`` whose new folders get ``mode`` whatever the umask."""
    missing = [p for p in [path, *path.parents] if not p.exists()]
    for folder in reversed(missing):
        folder.mkdir(exist_ok=True)
        os.chmod(folder, mode)


def secure_data_dir(data_dir: Path, db_url: str = "", sandbox_dir: Path | None = None) -> None:
    sandbox_dir = sandbox_dir or data_dir
    _mkdirs(sandbox_dir, 0o711)
    _mkdirs(data_dir, 0o700)
    for folder in {data_dir, sandbox_dir}:
        os.chmod(folder, 0o711 if folder == sandbox_dir else 0o700)
    for name in PRIVATE_DIRS:
        (data_dir / name).mkdir(exist_ok=True)
        os.chmod(data_dir / name, 0o700)
    for name in SANDBOX_DIRS:
        (sandbox_dir / name).mkdir(exist_ok=True)
        os.chmod(sandbox_dir / name, 0o711)
    if db_url.startswith("sqlite:///"):
        db_file = Path(db_url.removeprefix("sqlite:///"))
        for path in (db_file, Path(f"{db_file}-wal"), Path(f"{db_file}-shm")):
            if path.exists():
                os.chmod(path, 0o600)


def _lock_timezone(s: Session, timezone: str) -> None:
    """The deployment's time zone: invoice months, budgets' months and tariff hours are its local
    time, so it is fixed at the first start like the currency."""
    try:
        ZoneInfo(timezone)
    except (ValueError, ZoneInfoNotFoundError):
        raise InvalidInput(
            "invalid_timezone", f"unknown time zone {timezone!r}; use an IANA name like Asia/Shanghai"
        ) from None
    existing = s.get(Setting, "timezone")
    if existing is None:
        s.add(Setting(key="timezone", value=timezone))
        s.flush()
    elif existing.value != timezone:
        raise InvalidInput(
            "timezone_locked",
            f"this deployment's invoices and tariffs are in {existing.value}; start with --timezone {existing.value}",
        )


def _sandbox_dir_key(data_dir: Path) -> str:
    """The setting that keeps where this host's server on ``data_dir`` puts renters' folders."""
    where = f"{socket.gethostname()}:{data_dir.resolve()}"
    return "sandbox_dir@" + hashlib.sha256(where.encode()).hexdigest()[:16]


def _check_sandbox_dir(s: Session, data_dir: Path, sandbox_dir: Path) -> None:
    """Renters' workspaces, job folders and checkpoints live in the sandbox folder, so a restart on another
    folder would lose them (runs in flight fail to start, stopped rentals lose their workspace): refused,
    unless the recorded folder is gone (the operator moved it)."""
    recorded = s.get(Setting, _sandbox_dir_key(data_dir))
    if recorded is None or recorded.value == str(sandbox_dir.resolve()) or not Path(recorded.value).exists():
        return
    raise InvalidInput(
        "sandbox_dir_locked",
        f"renters' workspaces and job folders of this server are in {recorded.value}; start with --sandbox-dir "
        f"{recorded.value}, or move that folder to {sandbox_dir.resolve()} first",
    )


def _record_sandbox_dir(s: Session, data_dir: Path, sandbox_dir: Path) -> None:
    key, value = _sandbox_dir_key(data_dir), str(sandbox_dir.resolve())
    row = s.get(Setting, key)
    if row is None:
        s.add(Setting(key=key, value=value))
    else:
        row.value = value


def bootstrap(
    db: Database,
    data_dir: Path,
    currency: str,
    gpus: list[DiscoveredGpu],
    now_ms: int,
    *,
    host_settings: dict[str, int | str] | None = None,
    sandbox: SandboxStatus | None = None,
    sandbox_dir: Path | None = None,
    timezone: str = "UTC",
) -> BootResult:
    """``host_settings``: per-GPU limits / network policy of the local host given on the command
    line (the rest keep their stored values, or this machine's defaults on a new host, whose
    network policy is the sandbox's ``auto`` choice)."""
    migrate(db)
    exponent(currency)  # validates the code
    with db.read() as s:  # before anything is created there
        _check_sandbox_dir(s, data_dir, sandbox_dir or data_dir)
    secure_data_dir(data_dir, db.url, sandbox_dir)
    make_simulated_device_files(sandbox_dir or data_dir, [g.uuid for g in gpus if g.simulated])
    token: str | None = None
    with db.write() as s:
        existing = s.get(Setting, "currency")
        if existing is None:
            s.add(Setting(key="currency", value=currency.upper()))
            s.flush()
        elif existing.value != currency.upper():
            raise InvalidInput(
                "currency_locked",
                f"this database keeps money in {existing.value}; start with --currency {existing.value}",
            )
        _lock_timezone(s, timezone)
        _record_sandbox_dir(s, data_dir, sandbox_dir or data_dir)
        ensure_accounts(s, currency.upper())
        if s.scalars(select(User).where(User.is_admin.is_(True))).first() is None:
            _, token = sign_up(s, ADMIN_NAME, now_ms, is_admin=True)
        by_host: dict[str | None, list[DiscoveredGpu]] = {}
        for g in gpus:
            by_host.setdefault(g.host, []).append(g)
        for host_name, host_gpus in by_host.items():
            _register_host(s, host_gpus, now_ms, host_settings or {}, sandbox, host_name)
        ensure_host_image(s, now_ms)
        cur = s.get(Setting, "currency")
        assert cur is not None
    if token is not None:
        path = data_dir / "admin-token"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        os.chmod(path, 0o600)
    return BootResult(admin_token=token, currency=cur.value)


def _register_host(
    s: Session,
    gpus: list[DiscoveredGpu],
    now_ms: int,
    settings: dict[str, int | str],
    sandbox: SandboxStatus | None,
    node: str | None = None,
) -> None:
    """This machine's GPUs (``node`` None), or one Slurm node's (its name)."""
    name = node or socket.gethostname() or "local"
    host = s.scalars(select(HostRow).where(HostRow.name == name)).first()
    if host is None:
        network = sandbox.network if sandbox is not None and sandbox.sandboxed else "none"
        host = HostRow(
            name=name,
            is_local=node is None,
            created_at_ms=now_ms,
            network_policy=network,
            **machine_defaults(len(gpus)),
        )
        s.add(host)
        s.flush()
    for key, value in settings.items():
        setattr(host, key, value)
    if host.network_policy == "outbound" and sandbox is not None and not sandbox.outbound_ok:
        host.network_policy = "none"  # it cannot be given here any more (e.g. no longer root)
    seen: set[str] = set()
    for g in gpus:
        uuid = g.uuid
        seen.add(uuid)
        row = s.scalars(select(Gpu).where(Gpu.uuid == uuid)).first()
        if row is None:
            # A previous GPU at the same index (another spec) gives its slot up first.
            s.execute(update(Gpu).where(Gpu.host_id == host.id, Gpu.idx == g.index).values(idx=-1 - Gpu.id))
            s.add(
                Gpu(
                    host_id=host.id,
                    idx=g.index,
                    uuid=uuid,
                    model=g.model,
                    nvml_name=g.nvml_name,
                    vram_mb=g.vram_mb,
                    simulated=g.simulated,
                    device_minor=g.minor,
                    present=True,
                )
            )
        else:
            row.present, row.idx, row.model, row.vram_mb = True, g.index, g.model, g.vram_mb
            row.device_minor = g.minor
    for row in s.scalars(select(Gpu).where(Gpu.host_id == host.id)):
        if row.uuid not in seen:
            row.present = False  # gone from this host; never offered again until it returns
    s.flush()
