"""First-start and every-start work: migrate, settings, system accounts, the local host and its
GPUs, and the admin user (token printed once and written to DATA_DIR/admin-token, mode 0600)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from danlu.accounts.service import create_user
from danlu.billing.accounts import ensure_accounts
from danlu.compute.gpus import DiscoveredGpu
from danlu.core.errors import InvalidInput
from danlu.core.money import exponent
from danlu.db.engine import Database, migrate
from danlu.db.models import Gpu, Host, Setting, User

ADMIN_NAME = "admin"


@dataclass
class BootResult:
    admin_token: str | None  # only on the very first start
    currency: str


def bootstrap(db: Database, data_dir: Path, currency: str, gpus: list[DiscoveredGpu], now_ms: int) -> BootResult:
    migrate(db)
    exponent(currency)  # validates the code
    data_dir.mkdir(parents=True, exist_ok=True)
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
        ensure_accounts(s, currency.upper())
        if s.scalars(select(User).where(User.is_admin.is_(True))).first() is None:
            _, token = create_user(s, ADMIN_NAME, now_ms, is_admin=True)
        _register_host(s, gpus, now_ms)
        cur = s.get(Setting, "currency")
        assert cur is not None
    if token is not None:
        path = data_dir / "admin-token"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        os.chmod(path, 0o600)
    return BootResult(admin_token=token, currency=cur.value)


def _register_host(s: Session, gpus: list[DiscoveredGpu], now_ms: int) -> None:
    name = socket.gethostname() or "local"
    host = s.scalars(select(Host).where(Host.name == name)).first()
    if host is None:
        host = Host(name=name, is_local=True, created_at_ms=now_ms)
        s.add(host)
        s.flush()
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
                    present=True,
                )
            )
        else:
            row.present, row.idx, row.model, row.vram_mb = True, g.index, g.model, g.vram_mb
    for row in s.scalars(select(Gpu).where(Gpu.host_id == host.id)):
        if row.uuid not in seen:
            row.present = False  # gone from this host; never offered again until it returns
    s.flush()
