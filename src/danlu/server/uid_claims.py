"""One host, several deployments: each ``danlu server`` claims its ``--sandbox-uids`` range in a host-wide
registry, and a server whose range overlaps a live claim of another data folder refuses to start
(issue 28, finding 7: two deployments with overlapping ranges gave two renters the same uid, so one
renter's code could signal or trace the other's).

A claim is live while its server runs (the data folder's ``server.lock`` is held) or while any process on
the host runs as a uid in the overlapping part (a stopped server's rentals keep running: a restart keeps
them). Otherwise it is stale and dropped: that deployment's files are private to the platform (0700), so
reusing its uids later gives nobody a way in, and a deployment that comes back with the old range is
refused while the new one runs. The registry (``REGISTRY``, or ``DANLU_UID_REGISTRY``) is a small JSON file
changed under an exclusive lock; a claim is kept until its data folder's server claims another range or the
folder is gone."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

from danlu.core.errors import Conflict

REGISTRY = Path("/var/lib/danlu/sandbox-uids.json")


def registry_path() -> Path:
    return Path(os.environ.get("DANLU_UID_REGISTRY") or REGISTRY)


def _held(data_dir: Path) -> bool:
    """Whether a server holds ``data_dir``'s lock (the lock file is only opened, never created, here)."""
    try:
        fd = os.open(data_dir / "server.lock", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def uids_in_use(first: int, last: int) -> list[int]:
    """Uids in ``first..last`` that some process on this host runs as (real, effective, saved or fs uid)."""
    found: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", encoding="ascii", errors="replace") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        found.update(u for u in map(int, line.split()[1:]) if first <= u <= last)
                        break
        except OSError:
            continue
    return sorted(found)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[list[dict[str, object]]]:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            claims = json.loads(path.read_text(encoding="utf-8")).get("claims", [])
        except FileNotFoundError:
            claims = []
        except (ValueError, AttributeError):
            claims = []  # unreadable: rebuilt from the servers that start from now on
        yield claims
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"claims": claims}, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    finally:
        os.close(fd)


def claim(data_dir: Path, first: int, last: int, registry: Path | None = None) -> None:
    """Claim ``first..last`` for the server of ``data_dir`` (which holds its lock), or raise
    ``sandbox_uids_overlap`` naming the deployment whose live claim overlaps it."""
    me = str(data_dir.resolve())
    with _locked(registry or registry_path()) as claims:
        kept = []
        for c in claims:
            other, lo, hi = str(c.get("data_dir", "")), int(c.get("first", 0)), int(c.get("last", -1))  # type: ignore[call-overload]
            if other == me or not Path(other).is_dir():
                continue  # ours (replaced below) or a deployment that is gone
            if hi < first or lo > last:
                kept.append(c)
                continue
            a, b = max(lo, first), min(hi, last)
            why = "its server is running" if _held(Path(other)) else ""
            if not why:
                busy = uids_in_use(a, b)
                if busy:
                    why = f"its rentals still run as uids {busy[0]}" + (
                        f" and {len(busy) - 1} more" if busy[1:] else ""
                    )
            if why:
                raise Conflict(
                    "sandbox_uids_overlap",
                    f"--sandbox-uids {first}-{last} overlaps {lo}-{hi}, the range of the danlu server on {other} "
                    f"({why}): two renters would share a uid. Give each deployment on this host its own range, "
                    f"e.g. --sandbox-uids {hi + 1}-{hi + 1 + (last - first)}",
                )
            # stale: that server is stopped and nothing runs as those uids; its claim is dropped
        kept.append({"data_dir": me, "first": first, "last": last})
        claims[:] = kept
