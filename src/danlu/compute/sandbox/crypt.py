"""Workspaces encrypted at rest (issue 26, item 5; ``danlu server --encrypt-workspaces``), with gocryptfs
(the Debian package of that name): each workspace — for a job, the job's folder — is a gocryptfs file system
mounted at its folder, its files stored encrypted (AES-256-GCM, names included) in a *store* the platform
keeps apart: ``SANDBOX/ciphers/workspaces/i-…`` (root's, 0700, never bound into a sandbox). Where the kernel
holds the disk limit (danlu.compute.sandbox.volume), the store is the limit's ext4 image, so the kernel
limits the ciphertext; the plaintext exists only behind the mount.

Each workspace has a key of its own: 32 random bytes the platform keeps in ``KEYS/workspaces.i-…`` (0600,
root's; ``KEYS`` is ``DATA/workspace-keys`` unless ``--workspace-keys DIR`` puts it elsewhere). The key is
gocryptfs's password: it unlocks the store's master key (``gocryptfs.conf``, scrypt-wrapped). Removing the
workspace removes its key, so what its blocks still hold on the disk can no longer be read.

gocryptfs runs as root with ``allow_other``: the kernel checks permissions (``default_permissions``), files
are created as the uid that asks (the renter's), and the mount is ``nosuid,nodev``. Each mount is one
gocryptfs process (≈13 MiB resident) in a session of its own: it outlives a server that is killed, as a loop
mount does, and ``unlock_all`` mounts every store again after a reboot.
"""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import tempfile
from pathlib import Path

from danlu.backend import LaunchError
from danlu.compute import fstree
from danlu.compute.sandbox.helpers import SAFE_PATH, helper

log = logging.getLogger(__name__)
FSTYPE = "fuse.gocryptfs"
# per 4 KiB block, 32 bytes (nonce and tag); a file's header 18 bytes; a folder's gocryptfs.diriv one block
OVERHEAD = (4096 + 32, 4096)


def available() -> tuple[bool, str]:
    """Whether this host can encrypt workspaces: root, FUSE, gocryptfs."""
    if os.geteuid() != 0:
        return False, "the server is not root (gocryptfs mounts for every renter need root)"
    if not os.path.exists("/dev/fuse"):
        return False, "no FUSE (/dev/fuse is missing)"
    if helper("gocryptfs") is None:
        return False, "gocryptfs is not installed (the Debian package gocryptfs)"
    return True, "gocryptfs, a key per workspace"


def store_of(folder: Path) -> Path:
    """``SANDBOX/workspaces/i-x`` → ``SANDBOX/ciphers/workspaces/i-x``: where its files are kept encrypted."""
    return folder.parent.parent / "ciphers" / folder.parent.name / folder.name


def key_of(keys: Path, folder: Path) -> Path:
    return keys / f"{folder.parent.name}.{folder.name}"


def stored_bytes(disk_bytes: int) -> int:
    """The ciphertext of ``disk_bytes`` of files (the store's limit where the kernel holds it)."""
    return disk_bytes * OVERHEAD[0] // OVERHEAD[1]


# gocryptfs's own files (each folder's gocryptfs.diriv) must be readable by the renter's uid, which gocryptfs
# takes on while it creates a renter's file (``make_parents``); the server's umask (077) would make them 0400,
# root's alone (gocryptfs makes them 0444: an IV is not secret)
UMASK = 0o022


def _call(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, capture_output=True, text=True, env={"PATH": SAFE_PATH}, stdin=subprocess.DEVNULL, umask=UMASK
    )


def mounted(folder: Path) -> bool:
    """Whether a gocryptfs file system is mounted at ``folder`` (per /proc/self/mountinfo)."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields, _, rest = line.partition(" - ")
            if fields.split()[4] == str(folder) and rest.split()[0] == FSTYPE:
                return True
    return False


def is_open(folder: Path) -> bool:
    """Mounted and answering (a mount whose gocryptfs was killed says ``ENOTCONN``)."""
    if not mounted(folder):
        return False
    try:
        os.statvfs(folder)
    except OSError:
        return False
    return True


def make_parents(store: Path) -> None:
    """``SANDBOX/ciphers/workspaces``, each 0711. gocryptfs 2.3, running as root, creates a renter's file by
    switching its whole process to the renter's uid for a moment (``setreuid`` applies to every thread in
    Go): an operation that reopens the store by path meanwhile must be able to pass through its parents,
    or it fails with ``EACCES`` (≈1 % of a renter's ``stat`` calls while it wrote files, with 0700). They
    cannot be listed, and each store is the renter's own, 0700."""
    for parent in (store.parent.parent, store.parent):
        parent.mkdir(mode=0o711, parents=True, exist_ok=True)
        os.chmod(parent, 0o711)


def _key(keys: Path, folder: Path, new: bool) -> Path:
    """The folder's key; ``new``: made now unless it exists — a key is never written over (a store that only
    looks new, its image not mounted, must stay readable with the key it has)."""
    key = key_of(keys, folder)
    if not new or key.exists():
        if not key.exists():
            raise LaunchError(f"{folder}'s key is missing ({key}); its encrypted files cannot be read")
        return key
    keys.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secrets.token_hex(32).encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    return key


def unlock(folder: Path, keys: Path) -> None:
    """Mount ``folder``'s encrypted file system at it, making its store and key the first time (a folder
    that holds files unencrypted is never made encrypted in place: ``prepare`` decides which are).
    Raises ``LaunchError`` saying why it could not."""
    store = store_of(folder)
    if is_open(folder):
        return
    if mounted(folder):  # its gocryptfs is gone (killed): the stale mount goes first
        _call("umount", "--lazy", str(folder))
    folder.mkdir(parents=True, exist_ok=True)
    before = os.stat(folder)
    new = not (store / "gocryptfs.conf").exists()
    if new:
        if any(folder.iterdir()):
            raise LaunchError(f"{folder} holds files that are not encrypted; it is left as it is")
        make_parents(store)
        store.mkdir(mode=0o700, exist_ok=True)
        if any(p.name != "lost+found" for p in store.iterdir()):
            raise LaunchError(f"{store} holds files but no gocryptfs.conf; it is left for the operator")
        key = _key(keys, folder, new=True)
        _run("gocryptfs", "-init", "-q", "-nosyslog", "-passfile", str(key), str(store), what="could not encrypt")
    _mount(store, folder, _key(keys, folder, new=False))
    if new:  # the mount's root is the store's: it takes the folder's owner and mode (a job's folder is 0711)
        os.chown(folder, before.st_uid, before.st_gid)
        os.chmod(folder, before.st_mode & 0o7777)


def _mount(store: Path, at: Path, key: Path) -> None:
    # gocryptfs forks its daemon, which keeps the streams it was given: a pipe would never reach its end
    with tempfile.TemporaryFile() as err:
        r = subprocess.run(
            ["gocryptfs", "-q", "-nosyslog", "-allow_other", "-passfile", str(key), str(store), str(at)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env={"PATH": SAFE_PATH}, umask=UMASK,
        )  # fmt: skip
        if r.returncode != 0:
            err.seek(0)
            tail = err.read().decode(errors="replace").strip().splitlines()[-1:] or [f"exit {r.returncode}"]
            raise LaunchError(f"could not open {at}'s encrypted files: {tail[0]}")


def _run(*cmd: str, what: str) -> None:
    r = _call(*cmd)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or [f"exit {r.returncode}"]
        raise LaunchError(f"{what}: {tail[0]}")


def lock(folder: Path, lazy: bool = False) -> None:
    """Unmount ``folder``'s encrypted file system (its gocryptfs exits). In use: ``lazy`` detaches it now;
    otherwise ``LaunchError``."""
    if not mounted(folder):
        return
    r = _call("umount", str(folder))
    if r.returncode == 0 or not mounted(folder):
        return
    if not lazy:
        raise LaunchError(f"{folder} is in use by another process ({r.stderr.strip()}); try again when it is not")
    _run("umount", "--lazy", str(folder), what=f"could not unmount {folder}")


def forget(folder: Path, keys: Path | None) -> None:
    """The folder goes, its mounts already gone (``volume.release``): its store's files and its key."""
    store = store_of(folder)
    if store.is_dir() and not os.path.ismount(store):
        fstree.remove_tree(store)
    if keys is not None:
        key_of(keys, folder).unlink(missing_ok=True)


def unlock_all(sandbox_dir: Path, keys: Path) -> int:
    """Mount every rental's encrypted workspace again (after a reboot, or a gocryptfs that was killed); a
    job's folder is mounted by its next run. Returns how many; one that fails is logged and left: its
    instance's next start says why."""
    stores = sandbox_dir / "ciphers" / "workspaces"
    if not stores.is_dir():
        return 0
    opened = 0
    for store in sorted(stores.iterdir()):
        folder = sandbox_dir / "workspaces" / store.name
        if (store / "gocryptfs.conf").exists() and not is_open(folder):
            try:
                unlock(folder, keys)
                opened += 1
            except (LaunchError, OSError) as exc:
                log.warning("could not open the encrypted workspace %s: %s", folder, exc)
    return opened
