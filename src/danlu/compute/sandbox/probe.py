"""What sandboxing this host can give, found once at start-up, and said in the banner, in every
listing (``sandbox`` field of offers) and in ``danlu admin hosts``.

* ``bubblewrap``: every rental and job run is sandboxed (the default);
* ``off``: the operator started the server with ``--no-sandbox`` (one trusted user); runs are plain
  processes of the platform's user;
* ``unavailable``: no working bubblewrap; the server refuses rentals by anyone but the operator.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

from danlu.backend import SandboxStatus
from danlu.compute.backends.local import LocalBackend
from danlu.compute.backends.spawn import SandboxOptions
from danlu.compute.sandbox import cgroups as cg
from danlu.compute.sandbox import crypt, volume
from danlu.compute.sandbox import driver as nvidia
from danlu.compute.sandbox.helpers import SAFE_PATH, helper
from danlu.compute.sandbox.network import outbound_available, resolve_policy

NOBODY = 65534


def bwrap_works(as_root: bool) -> tuple[bool, str]:
    """Whether bubblewrap can build a sandbox here (as an unprivileged uid when we are root)."""
    exe = helper("bwrap")
    if exe is None:
        return False, "bubblewrap is not installed (Debian package bubblewrap; `make run` installs it as root)"
    cmd = [exe, "--unshare-user", "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/", "--proc", "/proc"]
    cmd += ["--dev", "/dev", "--disable-userns", "true"]
    if as_root:
        cmd = [
            helper("setpriv") or "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            "--no-new-privs",
            *cmd,
        ]
    try:
        r = subprocess.run(cmd, capture_output=True, timeout=20, cwd="/", env={"PATH": SAFE_PATH})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bubblewrap failed to start: {exc}"
    if r.returncode != 0:
        msg = r.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit {r.returncode}"]
        return False, f"bubblewrap cannot create a sandbox here: {msg[0]} (user namespaces disabled?)"
    return True, "bubblewrap works"


def traversable(path: Path) -> bool:
    """Whether every existing folder from ``/`` down to ``path`` lets other users pass (o+x)."""
    return all(folder.stat().st_mode & stat.S_IXOTH for folder in [path, *path.parents] if folder.exists())


def sandbox_dir_for(data_dir: Path, status: SandboxStatus) -> Path:
    """Where what sandboxes bind lives. bubblewrap mounts by path as the renter's uid, so with
    per-renter uids that folder's ancestors must be traversable: the data folder when they are,
    else ``/var/lib/danlu/<deployment>`` (e.g. a checkout under a 0700 /root)."""
    if status.identity != "per-renter uid" or traversable(data_dir.resolve().parent):
        return data_dir
    return Path("/var/lib/danlu") / deployment_tag(data_dir)


def deployment_tag(data_dir: Path) -> str:
    """Names this deployment's cgroups apart from another server's on the same host."""
    return "danlu-" + hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:10]


def resolve_disk(disk: str) -> tuple[str, str]:
    """``--disk-limit``: image (a file system per workspace, the kernel enforces it), watch (the disk
    watcher alone), auto (image where this host can). Returns the mode and, for auto without images, why."""
    if disk not in ("auto", "image", "watch"):
        raise ValueError(f"--disk-limit is auto, image or watch, not {disk!r}")
    if disk == "watch":
        return "watch", ""
    ok, why = volume.available()
    if ok:
        return "image", ""
    if disk == "image":
        raise ValueError(f"--disk-limit image: {why}")
    return "watch", why


def make_local_backend(
    data_dir: Path,
    *,
    no_sandbox: bool = False,
    cgroups: str = "auto",
    network: str = "auto",
    disk: str = "watch",
    encrypt: bool = False,
    keys: Path | None = None,
) -> tuple[LocalBackend, SandboxStatus]:
    """The local backend this host can run, and what it gives. Raises ValueError/OSError when an
    explicitly asked-for part (``--cgroups v2``, ``--network outbound``, ``--disk-limit image``,
    ``--encrypt-workspaces``) is not available. ``disk`` defaults to the watcher here; the server asks for
    ``auto``. ``keys``: where workspaces' keys are kept (``DATA/workspace-keys``)."""
    if encrypt and not crypt.available()[0]:
        raise ValueError(f"--encrypt-workspaces: {crypt.available()[1]}")
    if encrypt and no_sandbox:
        raise ValueError("--encrypt-workspaces needs the sandbox (not --no-sandbox): workspaces are mounted for it")
    if no_sandbox:
        status = SandboxStatus("off", "renters' code runs as the platform's own user; for one trusted user only")
        return LocalBackend(data_dir, None), status
    as_root = os.geteuid() == 0
    ok, why = bwrap_works(as_root)
    if not ok:
        return LocalBackend(data_dir, None), SandboxStatus(
            "unavailable", f"{why}; rentals are refused to everyone but the operator (or start with --no-sandbox)"
        )
    driver = cg.detect(deployment_tag(data_dir), cgroups)
    policy, note = resolve_policy(network)
    disk_mode, disk_note = resolve_disk(disk)
    keys = keys or data_dir / "workspace-keys"
    options = SandboxOptions(
        cgroups=driver,
        as_root=as_root,
        network=policy,
        disk=disk_mode,
        keys=keys,
        encrypt=encrypt,
        driver=nvidia.discover(),
    )
    status = SandboxStatus(
        "bubblewrap",
        "; ".join(n for n in (note or why, f"disk limit not by the kernel: {disk_note}" if disk_note else "") if n),
        limits=driver.kind if driver is not None else "rlimits",
        network=policy,
        identity="per-renter uid" if as_root else "platform user (server not root: no per-renter uid)",
        outbound_ok=outbound_available()[0],
        disk="kernel" if disk_mode == "image" else "watched",
        keys=keys,
        encrypt=encrypt,
    )
    return LocalBackend(data_dir, options), status
