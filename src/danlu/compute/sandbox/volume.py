"""Disk limits the kernel enforces (issue 28, finding 4): each workspace — for a job, the job's folder
holding its workspace and its checkpoints — is an ext4 file system of the limit's size, in an image file
loop-mounted at the folder. A write past the limit fails with ``ENOSPC`` inside the sandbox and nothing
lands on the host's disk; the inode count (``-N``) makes the kernel enforce the file limit too.

The host's disk tooling has no other per-folder limit here: ext4 and XFS project quotas need a kernel
built with ``CONFIG_QFMT_V2`` / ``CONFIG_XFS_QUOTA`` and a file system mounted with them, which this
project cannot assume (the machine it was built on has neither). Loop devices only need root.

Layout: the image of ``SANDBOX/workspaces/i-…`` is ``SANDBOX/volumes/workspaces.i-….ext4`` (0600, root's,
never bound into a sandbox, so no renter can touch the raw blocks). The image stays mounted at its folder
for the folder's whole life — a stopped rental's workspace is read in place by storage metering, snapshots,
``rent --from`` and ``rm`` — and goes with the folder (``release``). Mounts do not survive a reboot:
``mount_all`` at server start mounts every image again.

A folder that already holds files when its image is first made (a workspace copied by ``rent --from`` or
restored from a snapshot before its first start, or one from before this mode) has them copied into the
image; the image is named ``.part`` until that copy is complete, so a crash midway never loses them.
A new limit (``danlu start ID --gpu … --count …``) resizes the file system offline at the next start: nothing
of the renter runs while an instance is stopped.

Sizing: ext4's own bookkeeping (inode tables, a journal of 1/64 of the limit between 4 MiB and 1 GiB, group
descriptors, the reserve for metadata) is not a formula of the size one can trust across sizes (measured from
16 MiB to 1 TiB, a fixed allowance was 10 MiB short around 1 GiB and 5 GiB over at 1 TiB). So the image is
made larger than needed and ``fit`` resizes it, mounted and measured, until the renter can store the whole
limit and at most ``tolerance`` (2 MiB or 0.2 %) more. The disk watcher then only reads the use (``statvfs``,
no walk): it stops no run on a file system the kernel limits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

from danlu.backend import LaunchError
from danlu.compute import fstree
from danlu.compute.sandbox import crypt
from danlu.compute.sandbox.helpers import SAFE_PATH

log = logging.getLogger(__name__)
MiB = 1 << 20
SUFFIX = ".ext4"
TOOLS = ("mkfs.ext4", "e2fsck", "resize2fs", "mount", "umount", "losetup")
MOUNT_OPTIONS = "loop,nodev,nosuid,noatime"
BLOCK = 4096


def available() -> tuple[bool, str]:
    """Whether this host can give each workspace a file system of its own: root, loop devices, e2fsprogs."""
    if os.geteuid() != 0:
        return False, "the server is not root (loop mounts need root)"
    if not os.path.exists("/dev/loop-control"):
        return False, "no loop devices (/dev/loop-control is missing)"
    missing = [t for t in TOOLS if shutil.which(t, path=SAFE_PATH) is None]
    if missing:
        return False, f"{', '.join(missing)} not installed (Debian packages e2fsprogs and mount)"
    return True, "an ext4 file system of the limit's size per workspace"


def first_size(disk_bytes: int, files: int) -> tuple[int, int]:
    """A first size for the image of a ``disk_bytes`` limit (more than enough: ``fit`` trims it to the
    limit once mounted), and its journal in MiB."""
    journal_mib = min(max(disk_bytes // 64, 4 * MiB), 1024 * MiB) // MiB
    size = disk_bytes + files * 256 + journal_mib * MiB + disk_bytes // 50 + 16 * MiB
    return _blocks(size), journal_mib


def _blocks(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def usable(folder: Path) -> int:
    """What the renter can store on the file system mounted at ``folder`` (in use or free): its blocks less
    the file system's own and ext4's reserve for metadata."""
    st = os.statvfs(folder)
    return (st.f_blocks - (st.f_bfree - st.f_bavail)) * st.f_frsize


def tolerance(disk_bytes: int) -> int:
    """How much more than the limit a renter may store: resize2fs works in whole block groups' metadata."""
    return max(2 * MiB, disk_bytes // 500)


def fits(folder: Path, disk_bytes: int) -> bool:
    """The file system at ``folder`` stores ``disk_bytes`` and at most ``tolerance`` more."""
    return disk_bytes <= usable(folder) <= disk_bytes + tolerance(disk_bytes)


def image_of(folder: Path) -> Path:
    """``SANDBOX/workspaces/i-x`` → ``SANDBOX/volumes/workspaces.i-x.ext4``."""
    return folder.parent.parent / "volumes" / f"{folder.parent.name}.{folder.name}{SUFFIX}"


def _call(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, env={"PATH": SAFE_PATH}, stdin=subprocess.DEVNULL)


def _run(*cmd: str, what: str, ok: tuple[int, ...] = (0,)) -> None:
    r = _call(*cmd)
    if r.returncode not in ok:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or [f"exit {r.returncode}"]
        raise LaunchError(f"{what}: {tail[0]}")


def _mount(image: Path, folder: Path) -> None:
    _run("mount", "-t", "ext4", "-o", MOUNT_OPTIONS, str(image), str(folder), what=f"could not mount {folder}'s disk")
    # Direct I/O from the loop device to the image: without it each block sits in the page cache twice (the
    # file system's and the image file's) and a 512 MiB write with fsync took 1.5x a host folder's time; with
    # it, 1.03x (benchmarks/disk_limit.py). Speed only: where the host's file system refuses, it stays off.
    device = _source(folder)
    if device.startswith("/dev/loop"):
        r = _call("losetup", "--direct-io=on", device)
        if r.returncode != 0:
            log.info("direct I/O stays off for %s: %s", device, r.stderr.strip())


def _source(folder: Path) -> str:
    """The device mounted at ``folder`` (the last mount there), from /proc/self/mountinfo."""
    device = ""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields, _, rest = line.partition(" - ")
            if fields.split()[4] == str(folder):
                device = rest.split()[1]
    return device


def _unmount(folder: Path, lazy: bool = False) -> None:
    """Unmount ``folder``. Busy (a process has a file open in it): ``lazy`` detaches it now, the kernel freeing
    it when the last file closes (only for a file system about to be deleted); otherwise ``LaunchError``: a
    file system still in use must never be checked or resized."""
    r = _call("umount", str(folder))
    if r.returncode == 0 or not os.path.ismount(folder):
        return
    if not lazy:
        raise LaunchError(f"{folder} is in use by another process ({r.stderr.strip()}); try again when it is not")
    _run("umount", "--lazy", str(folder), what=f"could not unmount {folder}")


def _detached(image: Path, folder: Path, wait_s: float = 3.0) -> None:
    """After the host's unmount, the image's loop device goes once nothing else mounts it; one still attached
    means a mount in another namespace (a sandbox that outlived its run, a rental's transfer sandbox): the file
    system is in use there and must not be checked or resized. ``LaunchError`` then."""
    deadline = time.monotonic() + wait_s
    while True:
        r = _call("losetup", "-j", str(image))
        if r.returncode == 0 and not r.stdout.strip():
            return
        if time.monotonic() > deadline:
            raise LaunchError(f"{folder} is in use by another process (its file system is mounted elsewhere)")
        time.sleep(0.05)


def _make(image: Path, disk_bytes: int, files: int) -> None:
    size, journal_mib = first_size(disk_bytes, files)
    image.parent.mkdir(mode=0o700, exist_ok=True)
    image.unlink(missing_ok=True)
    fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, size)  # sparse: the host's disk holds only what is written
    finally:
        os.close(fd)
    # 4 KiB blocks at every size; no reserve for root; no resize inode (every resize here is offline)
    _run(
        "mkfs.ext4", "-q", "-F", "-b", str(BLOCK), "-m", "0", "-O", "^resize_inode", "-N", str(files + files // 25),
        "-J", f"size={journal_mib}", "-E", "lazy_itable_init=1,lazy_journal_init=1", str(image),
        what="could not make the workspace's file system",
    )  # fmt: skip


def _resize(image: Path, size: int, disk_bytes: int) -> None:
    """Grow or shrink an unmounted image to ``size`` bytes; a shrink below what it holds is refused."""
    # 1: it corrected something on its own (-p repairs only what is safe without a person)
    _run("e2fsck", "-f", "-p", str(image), what="the workspace's file system needs repair", ok=(0, 1))
    if size > image.stat().st_size:
        os.truncate(image, size)
        _run("resize2fs", str(image), what="could not grow the workspace's file system")
    else:
        _run(
            "resize2fs", str(image), f"{size // 1024}K",
            what=f"the workspace holds more than its limit of {disk_bytes // MiB} MiB; remove files first",
        )  # fmt: skip
        os.truncate(image, size)


def fit(image: Path, folder: Path, disk_bytes: int) -> None:
    """Resize the file system mounted at ``folder`` until the renter can store ``disk_bytes`` and at most
    ``tolerance`` more (a few passes: each size changes the file system's own overhead a little).

    A shrink below what the workspace holds is left undone, and the run starts on the file system as it is:
    a renter must be able to start it to delete files. A resize onto a smaller limit is refused before
    that (``409 disk_limit``, danlu.compute.instances), so this is a workspace already over its limit."""
    for _ in range(4):
        if fits(folder, disk_bytes):
            return
        have = usable(folder)
        try:
            _unmount(folder)
            _detached(image, folder)
        except LaunchError:
            if not os.path.ismount(folder):
                _mount(image, folder)
            if have < disk_bytes:
                raise
            log.warning("%s is in use: left at its size", folder)
            return
        try:
            _resize(image, _blocks(image.stat().st_size + disk_bytes + tolerance(disk_bytes) // 2 - have), disk_bytes)
        except LaunchError as exc:
            if have < disk_bytes:
                raise
            log.warning("%s stays larger than its limit: %s", folder, exc)
            return
        finally:
            _mount(image, folder)
    if usable(folder) < disk_bytes:
        raise LaunchError(f"could not size {folder}'s file system to {disk_bytes // MiB} MiB")


def prepare(folder: Path, disk_bytes: int, files: int, *, image: bool, keys: Path | None, encrypt: bool) -> None:
    """Make ``folder`` ready for a run: a file system of the limit's size where ``image`` (the kernel holds
    the limit), encrypted (danlu.compute.sandbox.crypt, keys in ``keys``) where it already is or where
    ``encrypt`` and the folder is new. A workspace that holds files unencrypted stays as it is: turning
    encryption on encrypts the workspaces made from then on. Raises ``LaunchError`` saying why it could not."""
    store = crypt.store_of(folder)
    if keys is None or not (store.exists() or (encrypt and not _holds_files(folder))):
        if image:
            ensure(folder, disk_bytes, files)
        return
    if image_of(store).exists() and not os.path.ismount(store):
        _mount(image_of(store), store)  # never init a store whose files are in an image not mounted
    if image:  # the store is the image: the kernel limits the ciphertext (a little more than the files)
        limit = crypt.stored_bytes(disk_bytes)
        ready = crypt.is_open(folder) and os.path.ismount(store) and image_of(store).exists() and fits(store, limit)
        if not ready:
            crypt.lock(folder)  # the store below it is resized or moved into its image
            crypt.make_parents(store)
            ensure(store, limit, files * 2)  # a folder's gocryptfs.diriv is a file of its own
            os.chmod(store, 0o700)
    crypt.unlock(folder, keys)


def _holds_files(folder: Path) -> bool:
    """Files not encrypted are there (or in the folder's own image): such a workspace stays as it was."""
    if image_of(folder).exists():
        return True
    try:
        return folder.is_dir() and not os.path.ismount(folder) and any(folder.iterdir())
    except OSError:  # a mount whose file system is gone: not a new folder
        return True


def ensure(folder: Path, disk_bytes: int, files: int) -> None:
    """Mount ``folder``'s file system at it — making it (with whatever the folder holds) the first time,
    resizing it to a changed limit. Raises ``LaunchError`` saying why it could not."""
    image, part = image_of(folder), image_of(folder).with_suffix(".part")
    folder.mkdir(parents=True, exist_ok=True)
    if os.path.ismount(folder) and image.exists():
        fit(image, folder, disk_bytes)
        _drop_lost_found(folder)  # e2fsck's, when it was resized
        return
    if os.path.ismount(folder):
        _unmount(folder)
    if not image.exists():
        _clear_partial(part)
        _make(part, disk_bytes, files)
        staging = part.with_suffix(".staging")
        staging.mkdir(mode=0o700)
        _mount(part, staging)
        try:
            if any(folder.iterdir()):  # copy what is there (links as links, owners, modes, times)
                _run(
                    "cp", "-a", "--no-target-directory", str(folder), str(staging),
                    what=f"the workspace does not fit its {disk_bytes // MiB} MiB limit",
                )  # fmt: skip
            os.chmod(staging, os.stat(folder).st_mode & 0o7777)
        finally:
            _unmount(staging)
            staging.rmdir()
        os.rename(part, image)  # complete: from here the image, not the folder, holds the files
    if any(folder.iterdir()):  # the copy's leftovers (a crash after the rename): the image has them
        mode = os.stat(folder).st_mode & 0o7777
        fstree.remove_tree(folder)
        folder.mkdir(mode=mode)
    _mount(image, folder)
    fit(image, folder, disk_bytes)
    _drop_lost_found(folder)


def _drop_lost_found(folder: Path) -> None:
    """mkfs and e2fsck make ``lost+found``: a root-only folder the renter would only stumble on (one the renter
    made is the renter's, and stays)."""
    try:
        st = os.stat(folder / "lost+found", follow_symlinks=False)
        if st.st_uid == 0 and stat.S_ISDIR(st.st_mode):
            os.rmdir(folder / "lost+found")
    except OSError:  # none, or not empty: e2fsck put something found in it
        pass


def detach(folder: Path) -> None:
    """Unmount ``folder``'s file systems, keeping its image and store (its files stay there): a finished
    job's, which no run needs mounted any more (each held a loop device for as long as the server ran)."""
    crypt.lock(folder, lazy=True)
    store = crypt.store_of(folder)
    for mounted in (store, folder):
        if os.path.ismount(mounted):
            _unmount(mounted, lazy=True)


def release(folder: Path, keys: Path | None = None) -> None:
    """The folder goes: unmount it and delete its image, its encrypted store and its key (a no-op for a
    folder without them)."""
    detach(folder)
    store = crypt.store_of(folder)
    for image in (image_of(folder), image_of(store)):
        for path in (image, image.with_suffix(".part")):
            path.unlink(missing_ok=True)
    crypt.forget(folder, keys)


def _clear_partial(part: Path) -> None:
    """End a move into an image that never completed (a server killed mid-copy): its staging mount and
    folder and the ``.part`` image. The folder still holds the files (the rename comes after the copy)."""
    staging = part.with_suffix(".staging")
    if os.path.ismount(staging):
        _unmount(staging, lazy=True)
    with contextlib.suppress(FileNotFoundError):
        staging.rmdir()
    part.unlink(missing_ok=True)


def mount_all(sandbox_dir: Path, keys: Path | None = None) -> int:
    """Mount every image at its folder again (after a reboot mounts are gone), after ending every move into an
    image a killed server left half done, then every encrypted workspace on its store (``keys``); returns how
    many were mounted. One that fails is logged and left: its instance's next start says why."""
    if keys is not None:
        return _mount_images(sandbox_dir / "ciphers") + _mount_images(sandbox_dir) + crypt.unlock_all(sandbox_dir, keys)
    return _mount_images(sandbox_dir)


def _mount_images(sandbox_dir: Path) -> int:
    volumes = sandbox_dir / "volumes"
    if not volumes.is_dir():
        return 0
    unfinished = {p.with_suffix(".part") for pattern in ("*.part", "*.staging") for p in volumes.glob(pattern)}
    for part in sorted(unfinished):
        try:
            _clear_partial(part)
        except OSError as exc:
            log.warning("could not clear the unfinished image %s: %s", part, exc)
    mounted = 0
    for image in sorted(volumes.glob(f"*{SUFFIX}")):
        parent, _, name = image.name[: -len(SUFFIX)].partition(".")
        folder = sandbox_dir / parent / name
        # rentals' only: a job's image is mounted by its next run (``ensure``), and a finished job's never again
        if parent != "workspaces" or not name or os.path.ismount(folder):
            continue
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if any(folder.iterdir()):
                log.warning("%s is not empty and not mounted; its image %s is left for its next start", folder, image)
                continue
            _mount(image, folder)
            mounted += 1
        except (OSError, LaunchError) as exc:
            log.warning("could not mount %s at %s: %s", image, folder, exc)
    return mounted
