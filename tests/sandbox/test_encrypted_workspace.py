"""Workspaces encrypted at rest (issue 26, item 5; ``danlu server --encrypt-workspaces``,
danlu.compute.sandbox.crypt): the renter's files reach the host's disk only as ciphertext — in the kernel-limited
image where the kernel holds the disk limit, in a plain store folder where the watcher does — each workspace
with a key of its own, and the disk limit still holds. Each test releases every mount it made."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from sqlalchemy import select

from danlu.backend import LaunchError
from danlu.compute.sandbox import crypt, volume
from danlu.compute.sandbox.probe import make_local_backend
from danlu.compute.workspace_size import workspace_bytes
from danlu.core.clock import SystemClock
from danlu.core.errors import DanluError
from danlu.db.models import Instance
from danlu.server.main import run
from danlu.server.options import ServerOptions
from tests.conftest import LiveServer, make_platform, require_sandbox, sandbox_folder, wait_for
from tests.sandbox.conftest import LIMITS, finished, log_of, rent

MiB = 1 << 20
MARKER = "danlu-plaintext-" + secrets.token_hex(6)


def _require_gocryptfs() -> None:
    ok, why = crypt.available()
    if ok:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"workspace encryption unavailable: {why} (CI=true: mandatory)")
    pytest.skip(f"workspace encryption unavailable here: {why}")


def _server(db_url: str, data_dir: Path, disk: str) -> Iterator[LiveServer]:
    require_sandbox()
    _require_gocryptfs()
    p, token = make_platform(
        db_url, data_dir, SystemClock(), spec="T4:2", disk=disk, encrypt=True, host_settings=LIMITS,
        stop_grace_s=2, tick_interval_s=0.2,
    )  # fmt: skip
    assert p.sandbox.encrypt and p.sandbox.keys == data_dir / "workspace-keys", p.sandbox
    assert p.backend.sandbox is not None
    p.backend.sandbox.disk_check_s = 3600.0 if disk == "auto" else 0.5
    try:
        with LiveServer(p, token) as srv:
            with srv.admin() as a:
                assert a.put("/admin/prices/T4", json={"price_per_hour": "3.60"}).status_code == 200
            yield srv
    finally:
        with p.db.read() as s:
            folders = [Path(w) for w in s.scalars(select(Instance.workspace))]
        for folder in folders:
            volume.release(folder, p.sandbox.keys)
        p.db.engine.dispose()


@pytest.fixture
def kernel_limited(db_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    yield from _server(db_url, tmp_path / "data", "auto")


@pytest.fixture
def watched(db_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    yield from _server(db_url, tmp_path / "data", "watch")


def _stored_bytes(store: Path) -> list[bytes]:
    """Every name and every file's bytes under ``store`` (what a stolen disk shows)."""
    out = []
    for root, dirs, files in os.walk(store):
        out += [n.encode() for n in dirs + files]
        out += [Path(root, n).read_bytes() for n in files]
    return out


def _mount_options(folder: Path) -> tuple[str, str]:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, rest = line.partition(" - ")
        if fields.split()[4] == str(folder):
            return rest.split()[0], fields.split()[5]
    return "", ""


# the second start prints what the first wrote; then the disk is filled to the kernel's limit and emptied
FILL = (
    f"cat /workspace/notes 2>/dev/null && echo ' read back'; printf %s {MARKER} > /workspace/notes; "
    f"mkdir -p /workspace/{MARKER}; cd /workspace; i=0; while head -c 1048576 /dev/zero > f$i; do i=$((i+1)); "
    "done; echo wrote=$i MiB; rm -f f*"
)


def test_an_encrypted_workspace_reaches_the_disk_only_as_ciphertext_under_its_kernel_limit(
    kernel_limited: LiveServer,
) -> None:
    p = kernel_limited.platform
    assert p.sandbox.keys is not None
    with kernel_limited.new_user("secretive") as c:
        iid = rent(c, ["sh", "-c", FILL])
        finished(c, iid)
        out = log_of(c, iid)
        assert "No space left on device" in out, out
        wrote = int(out.split("wrote=")[1].split()[0])
        assert 64 <= wrote <= 66, out  # the whole limit of files (the ciphertext's overhead is the store's)
        folder = p.workspaces / iid
        assert _mount_options(folder)[0] == crypt.FSTYPE
        assert {"nosuid", "nodev"} <= set(_mount_options(folder)[1].split(",")), _mount_options(folder)
        assert (folder / "notes").read_text() == MARKER  # storage metering, snapshots and rent --from read here
        store, key = crypt.store_of(folder), crypt.key_of(p.sandbox.keys, folder)
        image = volume.image_of(store)
        assert os.path.ismount(store) and image.exists() and not volume.image_of(folder).exists()
        assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_bytes()) == 65
        os.sync()
        raw = image.read_bytes()  # every byte the host's disk holds of this workspace
        assert MARKER.encode() not in raw and b"notes" not in raw
        assert (store / "gocryptfs.conf").exists()
        assert not any(MARKER.encode() in b for b in _stored_bytes(store))

        # a reboot unmounts everything; the server's start mounts the image and the encrypted files again
        volume.detach(folder)
        assert not os.path.ismount(folder) and not os.path.ismount(store)
        assert volume.mount_all(p.sandbox_root, p.sandbox.keys) == 2
        assert (folder / "notes").read_text() == MARKER

        again = c.post(f"/instances/{iid}/start")
        assert again.status_code == 200, again.text
        wait_for(lambda: log_of(c, iid).count("wrote=") == 2, timeout=60)  # the second run's end
        assert f"{MARKER} read back" in log_of(c, iid)
        finished(c, iid)

        # a copy (rent --from) is encrypted from its first byte, with a key of its own
        r = c.post("/instances", json={"gpu_model": "T4", "command": ["cat", "/workspace/notes"], "from_instance": iid})
        assert r.status_code == 201, r.text
        copy = r.json()["id"]
        finished(c, copy)
        assert log_of(c, copy).strip() == MARKER
        copy_folder = p.workspaces / copy
        assert _mount_options(copy_folder)[0] == crypt.FSTYPE
        assert crypt.key_of(p.sandbox.keys, copy_folder).read_bytes() != key.read_bytes()
        os.sync()
        assert MARKER.encode() not in volume.image_of(crypt.store_of(copy_folder)).read_bytes()

        for gone in (iid, copy):
            assert c.delete(f"/instances/{gone}").status_code in (200, 204)
        assert not os.path.ismount(folder) and not key.exists() and not image.exists() and not store.exists()
        assert not crypt.key_of(p.sandbox.keys, copy_folder).exists()


def test_a_jobs_folder_is_encrypted_too_and_its_run_reaches_its_workspace_and_checkpoints(
    kernel_limited: LiveServer,
) -> None:
    """A job's folder (0711, holding workspace/ and checkpoints/) keeps its mode once encrypted: the mount's root
    was the store's (0700, root's) and bubblewrap, as the renter, could not reach the folders inside it."""
    p = kernel_limited.platform
    script = f"printf %s {MARKER} > /workspace/w && printf %s {MARKER} > $DANLU_CHECKPOINT_DIR/c && echo wrote-both"
    with kernel_limited.new_user("batch") as c:
        r = c.post("/jobs", json={"command": ["sh", "-c", script], "gpus": 1, "gpu_types": ["T4"]})
        assert r.status_code == 201, r.text
        job = r.json()["id"]
        done = wait_for(lambda: (j := c.get(f"/jobs/{job}").json())["status"] in ("succeeded", "failed") and j, 90)
        log = c.get(f"/jobs/{job}/logs").json()["text"]
        assert done["status"] == "succeeded" and "wrote-both" in log, (done, log)
        folder = p.sandbox_root / "jobs" / job
        store = crypt.store_of(folder)
        assert p.sandbox.keys is not None and crypt.key_of(p.sandbox.keys, folder).exists()
        assert not crypt.mounted(folder) and not os.path.ismount(store)  # a finished job's folder is closed
        raw = volume.image_of(store).read_bytes()  # its files stay in its store's image, encrypted
        assert b"gocryptfs.conf" in raw and MARKER.encode() not in raw


def test_without_kernel_limits_the_store_is_a_folder_of_ciphertext(watched: LiveServer) -> None:
    p = watched.platform
    with watched.new_user("plainless") as c:
        iid = rent(c, ["sh", "-c", f"printf %s {MARKER} > /workspace/{MARKER}; id -u; ls -ln /workspace"])
        finished(c, iid)
        folder = p.workspaces / iid
        uid = log_of(c, iid).split()[0]
        assert (folder / MARKER).read_text() == MARKER and str((folder / MARKER).stat().st_uid) == uid
        store = crypt.store_of(folder)
        assert not os.path.ismount(store) and (store / "gocryptfs.conf").exists()
        assert store.stat().st_mode & 0o777 == 0o700 and store.stat().st_uid == int(uid)  # the renter's alone
        assert store.parent.stat().st_mode & 0o777 == 0o711  # passable, not listable (crypt.make_parents)
        stored = _stored_bytes(store)
        assert len(stored) >= 6 and not any(MARKER.encode() in b for b in stored)
        assert c.delete(f"/instances/{iid}").status_code in (200, 204)
        assert not store.exists() and not folder.exists()


def test_a_workspace_opens_only_with_its_own_key(tmp_path: Path) -> None:
    _require_gocryptfs()
    keys = tmp_path / "keys"
    one, two = (tmp_path / "sandbox" / "workspaces" / name for name in ("i-one", "i-two"))
    try:
        crypt.unlock(one, keys)
        crypt.unlock(two, keys)
        (one / "f").write_text("one's")
        crypt.lock(one)
        assert not (one / "f").exists() and crypt.store_of(one).is_dir()
        own = crypt.key_of(keys, one).read_bytes()
        crypt.key_of(keys, one).write_bytes(crypt.key_of(keys, two).read_bytes())  # another workspace's key
        with pytest.raises(LaunchError, match=r"could not open .*i-one.*encrypted files"):
            crypt.unlock(one, keys)
        crypt.key_of(keys, one).unlink()
        with pytest.raises(LaunchError, match="key is missing"):
            crypt.unlock(one, keys)
        crypt.key_of(keys, one).write_bytes(own)
        crypt.unlock(one, keys)
        assert (one / "f").read_text() == "one's"
        (tmp_path / "plain").mkdir()
        (tmp_path / "plain" / "kept").write_text("x")
        with pytest.raises(LaunchError, match="not encrypted"):  # never encrypted in place, never hidden
            crypt.unlock(tmp_path / "plain", keys)
    finally:
        for folder in (one, two):
            volume.release(folder, keys)
    assert not any(keys.iterdir()) and not crypt.store_of(one).exists()


def test_a_renter_writing_files_never_makes_its_own_stat_fail() -> None:
    """gocryptfs switches its whole process to the renter's uid while it creates a renter's file; with the
    store's parents 0700 every lookup it made by path meanwhile failed (EACCES on ≈1 % of ``stat`` calls,
    the renter's own and the platform's: ``GET /instances/ID`` answered 500)."""
    _require_gocryptfs()
    base = sandbox_folder()  # a renter's uid can pass through it (pytest's tmp_path is 0700)
    keys, folder = base / "keys", base / "workspaces" / "i-busy"
    as_renter = ["setpriv", "--reuid", "2999990", "--regid", "2999990", "--clear-groups"]
    try:
        umask = os.umask(0o077)  # as `danlu server` runs
        try:
            volume.prepare(folder, 64 * MiB, 10_000, image=volume.available()[0], keys=keys, encrypt=True)
        finally:
            os.umask(umask)
        os.chmod(folder.parent, 0o711)  # the renter reaches it by path here (a sandbox binds it)
        os.chown(folder, 2999990, 2999990)
        writer = subprocess.Popen(
            [*as_renter, "sh", "-c", f"cd {folder}; mkdir m; for k in $(seq 20); do for i in $(seq 20); do "
             "head -c 1048576 /dev/zero > f$i; done; rm -f f*; done; touch done"],
        )  # fmt: skip
        reader = (
            f"import os\nerrors = n = 0\nd = os.open('{folder}/m', os.O_RDONLY)\n"
            f"while not os.path.exists('{folder}/done') or n < 2000:\n    n += 1\n    try:\n"
            "        up = os.open('..', os.O_RDONLY | os.O_DIRECTORY, dir_fd=d)\n"
            "        os.fstat(up)\n        os.close(up)\n"
            f"        os.stat('{folder}')\n    except OSError:\n        errors += 1\nprint(errors, n)\n"
        )
        out = subprocess.run([*as_renter, sys.executable, "-c", reader], capture_output=True, text=True, timeout=300)
        assert writer.wait(timeout=300) == 0
        errors, calls = map(int, out.stdout.split())
        assert calls >= 2000 and errors == 0, (errors, calls, out.stderr)
        assert workspace_bytes(str(folder)) == 0  # the platform's walk (as root) too
    finally:
        volume.release(folder, keys)


def test_the_server_refuses_encryption_it_cannot_give(tmp_path: Path) -> None:
    umask = os.umask(0o022)  # `danlu server` sets the process's umask (077) first: this worker's, here
    try:
        with pytest.raises(DanluError, match="local backend only") as slurm:
            run(ServerOptions(data_dir=tmp_path, backend_name="slurm", encrypt_workspaces=True), print)
    finally:
        os.umask(umask)
    assert slurm.value.code == "sandbox_setup"
    with pytest.raises(ValueError, match="needs the sandbox"):
        make_local_backend(tmp_path, no_sandbox=True, encrypt=True)
    require_sandbox()
    _require_gocryptfs()
    _, status = make_local_backend(tmp_path, encrypt=True)
    assert "workspaces encrypted at rest (gocryptfs)" in status.banner()


def test_a_store_whose_image_is_not_mounted_is_mounted_never_made_again(tmp_path: Path) -> None:
    """A job's store is an image mounted by its next run only; a server restarted with --disk-limit watch would
    have found its mount point empty, taken it for a new workspace and written a new key over the old one."""
    _require_gocryptfs()
    if not volume.available()[0]:
        pytest.skip("no loop mounts here")
    keys, folder = tmp_path / "keys", tmp_path / "sandbox" / "jobs" / "j-again"
    try:
        volume.prepare(folder, 64 * MiB, 10_000, image=True, keys=keys, encrypt=True)
        (folder / "kept").write_text("still here")
        key = crypt.key_of(keys, folder).read_bytes()
        volume.detach(folder)  # a finished (or requeued) job's folder, or a reboot
        assert not os.path.ismount(crypt.store_of(folder))
        volume.prepare(folder, 64 * MiB, 10_000, image=False, keys=keys, encrypt=True)
        assert (folder / "kept").read_text() == "still here" and crypt.key_of(keys, folder).read_bytes() == key
    finally:
        volume.release(folder, keys)


def test_a_killed_gocryptfs_is_mounted_again_at_the_next_start(tmp_path: Path) -> None:
    _require_gocryptfs()
    keys, folder = tmp_path / "keys", tmp_path / "sandbox" / "workspaces" / "i-killed"
    try:
        volume.prepare(folder, 64 * MiB, 10_000, image=False, keys=keys, encrypt=True)
        (folder / "kept").write_text("still here")
        store = str(crypt.store_of(folder))
        daemons = [p for p in psutil.process_iter(["cmdline"]) if store in (p.info["cmdline"] or [])]
        assert len(daemons) == 1
        daemons[0].kill()
        daemons[0].wait(10)
        assert crypt.mounted(folder) and not crypt.is_open(folder)  # ENOTCONN
        volume.prepare(folder, 64 * MiB, 10_000, image=False, keys=keys, encrypt=True)
        assert (folder / "kept").read_text() == "still here"
    finally:
        volume.release(folder, keys)
