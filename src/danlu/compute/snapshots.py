"""Snapshots of stopped workspaces (issue 26, item 4): ``danlu snapshot create ID``, ``danlu snapshots``,
``danlu rent --from SNAPSHOT``, ``danlu snapshot rm``.

Each billing account has its own restic repository (``DATA/snapshots/account-N``), encrypted with a
random key the platform keeps for that account only (``DATA/snapshot-keys/account-N``, 0600, root):
snapshots are deduplicated within the account (a second snapshot of an unchanged workspace stores
nothing new) and one account's repository cannot be read with another's key, nor by anyone who gets
the repository's files without the key. restic runs as root on the server's host, reads the workspace
without following links (it stores a link as a link) and restores owners, modes and links as they
were. Only a rental that is not running is snapshotted: nothing writes while restic reads.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select

from danlu.billing import storage
from danlu.billing.accounts import lock_billing_account
from danlu.compute import fstree
from danlu.compute.storage import (
    close_stored,
    due_for_release,
    new_workspace,
    open_stored,
    release_workspace,
    remove_workspace,
)
from danlu.compute.views import ReadCache
from danlu.compute.workspace_use import resting_workspace
from danlu.context import Platform
from danlu.core.clock import iso
from danlu.core.errors import Conflict, DanluError, InvalidInput, NotFound
from danlu.core.money import format_minor
from danlu.db.models import AllocationRow, Event, Instance, Snapshot, User

SNAPSHOT_ID_PREFIX = "s-"
log = logging.getLogger(__name__)


class SnapshotFailed(DanluError):
    http_status = 503  # restic is missing or failed: the server could not, not the request was wrong


@dataclass(frozen=True)
class SnapshotView:
    id: str
    name: str
    instance_id: str
    size_bytes: int
    added_bytes: int
    created_at_ms: int
    per_day_minor: int = 0  # what keeping it costs a day, at the price it was taken at (0: free)
    currency: str | None = None  # of that price (None: free)

    @property
    def per_day(self) -> str:
        """``per_day_minor`` as an amount ("0.10"); "0" when free."""
        return format_minor(self.per_day_minor, self.currency) if self.currency else "0"


def _view(row: Snapshot, alloc: AllocationRow | None = None) -> SnapshotView:
    """``alloc``: the storage allocation billing it (None: free)."""
    per_day = storage.per_day_minor(alloc.price_per_hour_minor, alloc.gpu_count) if alloc is not None else 0
    currency = alloc.currency if alloc is not None else None
    return SnapshotView(
        row.id, row.name, row.instance_id, row.size_bytes, row.added_bytes, row.created_at_ms, per_day, currency
    )


def _repo(p: Platform, account_id: int) -> tuple[Path, Path]:
    """The account's repository and key file, made on first use (the key: 32 random bytes, 0600)."""
    base = p.settings.data_dir
    repo, key = base / "snapshots" / f"account-{account_id}", base / "snapshot-keys" / f"account-{account_id}"
    for folder in (repo.parent, key.parent):
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not key.exists():
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(32))
    if not (repo / "config").exists():
        _restic(p, repo, key, "init")
    return repo, key


def _restic(p: Platform, repo: Path, key: Path, *args: str) -> str:
    if shutil.which("restic") is None:
        raise SnapshotFailed("snapshots_unavailable", "restic is not installed on the server (Debian package restic)")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(p.settings.data_dir),
        "RESTIC_REPOSITORY": str(repo),
        "RESTIC_PASSWORD_FILE": str(key),
        "RESTIC_CACHE_DIR": str(p.settings.data_dir / "snapshots" / ".cache"),
    }
    done = subprocess.run(["restic", *args], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise SnapshotFailed("snapshot_failed", f"restic {args[0]} failed: {done.stderr.strip()[-400:]}")
    return done.stdout


def create(p: Platform, user: User, instance_id: str, name: str = "") -> SnapshotView:
    """Snapshot the renter's own instance's workspace while it is not running."""
    if len(name) > 64 or any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise InvalidInput("invalid_name", "snapshot names are at most 64 characters, without control characters")
    with p.db.read() as s:
        inst = resting_workspace(s, user, instance_id, "snapshotted")
        account, workspace = inst.billing_account_id, Path(inst.workspace)
    return _take(p, user.id, account, instance_id, workspace, name)


def _take(p: Platform, user_id: int, account: int, instance_id: str, workspace: Path, name: str) -> SnapshotView:
    workspace.mkdir(parents=True, exist_ok=True)
    repo, key = _repo(p, account)
    out = _restic(p, repo, key, "backup", "--json", "--host", "danlu", "--tag", instance_id, str(workspace))
    summary = next((m for m in map(_json, out.splitlines()) if m.get("message_type") == "summary"), None)
    if summary is None or not summary.get("snapshot_id"):
        raise SnapshotFailed("snapshot_failed", "restic backup gave no snapshot id")
    size = int(str(summary.get("total_bytes_processed", 0)))  # restic read every file once
    row = Snapshot(
        id=SNAPSHOT_ID_PREFIX + secrets.token_hex(5),
        user_id=user_id,
        billing_account_id=account,
        instance_id=instance_id,
        name=name,
        restic_id=str(summary["snapshot_id"]),
        size_bytes=size,
        added_bytes=int(str(summary.get("data_added", 0))),
        created_at_ms=p.clock.now_ms(),
    )
    with p.db.write() as s:
        lock_billing_account(s, account)  # serialises the account's snapshots: its quota holds across them
        pol = storage.policy(s)
        kept = int(s.scalar(select(func.sum(Snapshot.size_bytes)).where(Snapshot.billing_account_id == account)) or 0)
        over = pol.snapshot_quota_gb and kept + size > pol.snapshot_quota_gb * storage.MIB * storage.MIB_PER_GB
        if not over:
            s.add(row)
            source = s.get(Instance, instance_id)
            assert source is not None
            alloc = open_stored(s, source, storage.SNAPSHOT_MODEL, size, row.created_at_ms)  # billed from now
            row.allocation_id = alloc.id if alloc is not None else None
            s.flush()
            return _view(row, alloc)
    _restic(p, repo, key, "forget", "--prune", row.restic_id)  # not kept: nothing of it stays stored
    raise Conflict(
        "snapshot_quota_exceeded",
        f"this snapshot ({_gib(size)}) and the account's others ({_gib(kept)}) exceed its snapshot quota of "
        f"{pol.snapshot_quota_gb} GB; remove snapshots you no longer need (`danlu snapshot rm ID`)",
    )


def _gib(size: int) -> str:
    return f"{size / (storage.MIB * storage.MIB_PER_GB):.2f} GB"


def _json(line: str) -> dict[str, object]:
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# A person's snapshots as read, until a snapshot or allocation is written in this process or a second
# passes (the console's instances page shows them on every load).
_LISTED: ReadCache[int, tuple[SnapshotView, ...]] = ReadCache(("snapshots", "allocations"), ttl_s=1.0)


def list_snapshots(p: Platform, user: User) -> list[SnapshotView]:
    return list(_LISTED.get(p.db.engine, user.id, lambda: _read_snapshots(p, user.id)))


def listed_snapshots(p: Platform, user_id: int) -> list[SnapshotView] | None:
    """:func:`list_snapshots` if it is in memory, else None (reads nothing)."""
    hit = _LISTED.peek(p.db.engine, user_id)
    return None if hit is None else list(hit)


def _read_snapshots(p: Platform, user_id: int) -> tuple[SnapshotView, ...]:
    with p.db.read() as s:
        rows = s.execute(
            select(Snapshot, AllocationRow)
            .outerjoin(AllocationRow, AllocationRow.id == Snapshot.allocation_id)
            .where(Snapshot.user_id == user_id)
            .order_by(Snapshot.created_at_ms)
        ).all()
        return tuple(_view(r, a) for r, a in rows)


def _owned(p: Platform, user: User, snapshot_id: str) -> Snapshot:
    with p.db.read() as s:
        row = s.get(Snapshot, snapshot_id) if len(snapshot_id) <= 32 else None
        if row is None or row.user_id != user.id:  # another renter's snapshot is not there
            raise NotFound("snapshot_not_found", f"no snapshot {snapshot_id!r}; list yours with `danlu snapshots`")
        s.expunge(row)
        return row


def remove(p: Platform, user: User, snapshot_id: str) -> None:
    """Forget the snapshot and prune what only it held."""
    _remove(p, _owned(p, user, snapshot_id))


def _remove(p: Platform, row: Snapshot, event: Event | None = None) -> None:
    repo, key = _repo(p, row.billing_account_id)
    _restic(p, repo, key, "forget", "--prune", row.restic_id)
    with p.db.write() as s:
        gone = s.get(Snapshot, row.id, with_for_update=True)
        if gone is not None:
            if gone.allocation_id is not None:  # billed up to its removal
                close_stored(s, gone.billing_account_id, gone.allocation_id, p.clock.now_ms())
            s.delete(gone)
            if event is not None:
                s.add(event)


def before_release(p: Platform) -> tuple[int, int]:
    """The ``snapshots`` phase, where the operator asks for it (``--snapshot-before-release``): each stopped
    rental whose workspace is due for release is snapshotted, then released, the event naming the snapshot.
    One that cannot be snapshotted (restic failed, the account's quota) is kept, retried each pass, and logged:
    nothing is released unsaved. Returns (snapshotted and released, failed)."""
    now = p.clock.now_ms()
    with p.db.read() as s:
        if not storage.policy(s).snapshot_before_release:
            return 0, 0
    done = failed = 0
    for inst_id, user_id, account, workspace in due_for_release(p, now):
        try:
            snap = _take(p, user_id, account, inst_id, Path(workspace), "before release")
        except DanluError as exc:
            log.warning("could not snapshot %s before its release (kept, retried): %s", inst_id, exc.message)
            failed += 1
            continue
        done += release_workspace(p, inst_id, p.clock.now_ms(), snap.id)
    return done, failed


def retention(p: Platform) -> tuple[int, int]:
    """The ``snapshots`` phase: with a snapshot retention period, warn each snapshot's renter ``release_after``
    (the storage policy's notice) before its end, and remove it at its end — never sooner than that notice
    after the warning. Returns (warned, removed)."""
    now = p.clock.now_ms()
    with p.db.read() as s:
        pol = storage.policy(s)
        if pol.snapshot_retention_s == 0:
            return 0, 0
        keep_ms, notice_ms = pol.snapshot_retention_s * 1000, pol.release_after_s * 1000
        rows = list(s.scalars(select(Snapshot).where(Snapshot.created_at_ms <= now - keep_ms + notice_ms)))
        s.expunge_all()
    warned = removed = 0
    for row in rows:
        if row.warned_at_ms is None:
            when = iso(max(row.created_at_ms + keep_ms, now + notice_ms))
            with p.db.write() as s:
                live = s.get(Snapshot, row.id, with_for_update=True)
                if live is None or live.warned_at_ms is not None:
                    continue
                live.warned_at_ms = now
                message = (
                    f"snapshot {live.id} of {live.instance_id} will be removed at {when}, at the end of its retention "
                    f"period; rent from it to keep what you need (`danlu rent --from {live.id}`)"
                )
                s.add(_event(live, "snapshot_retention_warning", now, message))
            warned += 1
        elif now >= max(row.created_at_ms + keep_ms, row.warned_at_ms + notice_ms):
            message = (
                f"snapshot {row.id} of {row.instance_id} was removed at the end of its retention period, as warned "
                f"at {iso(row.warned_at_ms)}"
            )
            try:
                _remove(p, row, _event(row, "snapshot_removed", now, message))
            except DanluError as exc:
                log.warning("could not remove snapshot %s at the end of its retention: %s", row.id, exc.message)
                continue
            removed += 1
    return warned, removed


def _event(row: Snapshot, kind: str, now: int, message: str) -> Event:
    return Event(
        user_id=row.user_id,
        billing_account_id=row.billing_account_id,
        instance_id=row.instance_id,
        kind=kind,
        message=message,
        at_ms=now,
    )


def restore(p: Platform, user: User, snapshot_id: str, dest: Path) -> int:
    """Restore the renter's own snapshot into a new workspace folder ``dest``; its size in bytes."""
    row = _owned(p, user, snapshot_id)
    repo, key = _repo(p, row.billing_account_id)
    with p.db.read() as s:
        inst = s.get(Instance, row.instance_id)
        source = inst.workspace if inst is not None else str(p.workspaces / row.instance_id)
    # restic 0.14 (Debian 12) restores a snapshot's full path under the target: restore into a staging
    # folder inside the new workspace (its file system: encrypted where workspaces are), then move what the
    # workspace held into place.
    new_workspace(p, dest)
    staging = dest / f".danlu-restoring-{secrets.token_hex(6)}"  # no name the snapshot itself can hold
    try:
        staging.mkdir(mode=0o700)
        _restic(p, repo, key, "restore", row.restic_id, "--target", str(staging))
        restored = staging / source.lstrip("/")
        for entry in os.listdir(restored):
            os.rename(restored / entry, dest / entry)
        st = os.stat(restored)
        os.chown(dest, st.st_uid, st.st_gid)
        os.chmod(dest, st.st_mode & 0o7777)
        fstree.remove_tree(staging)
    except BaseException:
        remove_workspace(p, dest)
        raise
    return row.size_bytes
