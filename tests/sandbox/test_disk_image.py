"""The kernel holds the workspace disk limit (issue 28, finding 4; danlu.compute.sandbox.volume): a workspace is
an ext4 file system of the limit's size, loop-mounted at its folder. A write past the limit fails inside the
sandbox with ENOSPC and never lands on the host; so does a file past the file limit. The disk watcher is
slowed to once an hour here, so what stops the writes can only be the kernel.

Each test releases every file system it made (a mount left behind would outlive the suite)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from danlu.backend import LaunchError
from danlu.compute.sandbox import volume
from danlu.core.clock import SystemClock
from danlu.db.models import Instance
from tests.conftest import LiveServer, make_platform, require_sandbox, wait_for
from tests.sandbox.conftest import LIMITS, finished, log_of, rent

MiB = 1 << 20


def _require_loop_mounts() -> None:
    ok, why = volume.available()
    if ok:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"kernel disk limits unavailable: {why} (CI=true: mandatory)")
    pytest.skip(f"kernel disk limits unavailable here: {why}")


@pytest.fixture
def kernel_limited(db_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    require_sandbox()
    _require_loop_mounts()
    p, token = make_platform(
        db_url,
        tmp_path / "data",
        SystemClock(),
        spec="T4:2",
        disk="auto",  # as `danlu server` asks: the kernel where this host can (here, root with loop devices)
        host_settings=LIMITS,  # 64 MiB of disk per GPU
        stop_grace_s=2,
        tick_interval_s=0.2,
    )
    assert p.sandbox.disk == "kernel", p.sandbox
    assert p.backend.sandbox is not None
    p.backend.sandbox.disk_check_s = 3600.0  # the watcher's first pass comes after the test
    try:
        with LiveServer(p, token) as srv:
            with srv.admin() as a:
                assert a.put("/admin/prices/T4", json={"price_per_hour": "3.60"}).status_code == 200
            yield srv
    finally:
        with p.db.read() as s:
            folders = [Path(w) for w in s.scalars(select(Instance.workspace))]
        for folder in folders:
            volume.release(folder.parent if folder.name == "workspace" else folder)  # a job's: its folder
        p.db.engine.dispose()


def test_a_write_past_the_disk_limit_fails_in_the_sandbox_and_never_reaches_the_host(
    kernel_limited: LiveServer,
) -> None:
    fill = "i=0; while head -c 1048576 /dev/zero > f$i; do i=$((i+1)); done; echo wrote=$i MiB; df -k /workspace"
    with kernel_limited.new_user("filler") as c:
        iid = rent(c, ["sh", "-c", fill])
        view = finished(c, iid)
        out = log_of(c, iid)
        assert "No space left on device" in out, out
        wrote = int(out.split("wrote=")[1].split()[0])
        assert 64 <= wrote <= 66, out  # the whole limit, and at most the tolerance (2 MiB) more
        folder = kernel_limited.platform.workspaces / iid
        assert os.path.ismount(folder) and 64 * MiB <= volume.usable(folder) <= 66 * MiB
        image = volume.image_of(folder)
        assert image.stat().st_blocks * 512 <= image.stat().st_size < 80 * MiB  # all the host holds
        assert view["status"] == "exited" and "disk limit" not in view["status_reason"], view  # not the watcher
        assert c.delete(f"/instances/{iid}").status_code in (200, 204)
        assert not os.path.ismount(folder) and not image.exists()


def test_an_upload_past_the_limit_answers_disk_limit_and_leaves_nothing(kernel_limited: LiveServer) -> None:
    """An upload of undeclared size (chunked): the kernel stops it at the limit, the API says why."""

    def body() -> Iterator[bytes]:
        for _ in range(40):
            yield b"\0" * MiB

    with kernel_limited.new_user("uploader") as c:
        iid = rent(c, ["sh", "-c", "head -c 40000000 /dev/zero > first; echo ready; exec sleep 3000"])
        wait_for(lambda: "ready" in log_of(c, iid))
        r = c.put(f"/instances/{iid}/files", params={"path": "second"}, content=body())  # 40 MiB more: ENOSPC
        assert r.status_code == 409 and r.json()["error"]["code"] == "disk_limit", r.text
        assert os.listdir(kernel_limited.platform.workspaces / iid) == ["first"]  # the partial file went
        ok = c.put(f"/instances/{iid}/files", params={"path": "small"}, content=b"fits")
        assert ok.status_code == 200, ok.text


def test_files_past_the_file_limit_fail_in_the_sandbox(kernel_limited: LiveServer) -> None:
    make = (
        "import os\nn = 0\n"
        "try:\n    while n < 100000:\n        open(f'/workspace/e{n}', 'w').close(); n += 1\n"
        "except OSError as e:\n    print('stopped', n, e.strerror, flush=True)\n"
    )
    with kernel_limited.new_user("inodes") as c:
        iid = rent(c, ["sh", "-c", 'python3 -c "$P"'], env={"P": make})
        finished(c, iid)
        out = log_of(c, iid)
        assert "No space left on device" in out, out
        made = int(out.split("stopped ")[1].split()[0])
        assert 9_000 <= made <= 12_000, out  # the file limit: 10,000 at 64 MiB (one per 32 KiB, at least 10,000)


def test_a_jobs_workspace_and_checkpoints_share_one_kernel_limit(kernel_limited: LiveServer) -> None:
    fill = (
        "head -c 40000000 /dev/zero > /workspace/data && echo workspace-ok; "
        "i=0; while head -c 1048576 /dev/zero > /checkpoints/c$i; do i=$((i+1)); done; echo checkpoints=$i MiB"
    )
    with kernel_limited.new_user("jobfill") as c:
        r = c.post("/jobs", json={"command": ["sh", "-c", fill], "gpus": 1, "gpu_types": ["T4"]})
        assert r.status_code == 201, r.text
        jid = r.json()["id"]
        done = wait_for(lambda: (v := c.get(f"/jobs/{jid}").json())["status"] in ("failed", "succeeded") and v, 60)
        out = c.get(f"/jobs/{jid}/logs").json()["text"]
        assert isinstance(done, dict) and done["status"] == "succeeded", (done, out)
        assert "workspace-ok" in out and "No space left on device" in out, out
        ckpt = int(out.split("checkpoints=")[1].split()[0])
        assert 24 <= ckpt <= 27, out  # 64 MiB in all: 38 MiB in the workspace, the rest in checkpoints
    # Finished, the job's file system is unmounted (each held a loop device while the server ran), its files
    # kept in its image; a server start mounts rentals' images only (a job's next run mounts its own)
    folder = kernel_limited.platform.sandbox_root / "jobs" / jid
    assert not os.path.ismount(folder) and volume.image_of(folder).stat().st_size > 0
    assert volume.mount_all(kernel_limited.platform.sandbox_root) == 0 and not os.path.ismount(folder)


def test_a_job_runs_in_a_rentals_workspace_in_place_each_folder_under_its_kernel_limit(
    kernel_limited: LiveServer,
) -> None:
    """Issue 26, item 6 in the real sandbox: ``danlu run --workspace ID`` writes into the rental's own file
    system (the rental reads it when it starts again), and the job's checkpoints are a file system of their
    own with the same limit (outside the rental's, they would be unlimited on the host's disk)."""
    with kernel_limited.new_user("piper") as c:
        iid = rent(c, ["sh", "-c", "cat result.txt 2>/dev/null || echo no-result; echo ready; sleep 300"])
        wait_for(lambda: "ready" in log_of(c, iid))
        assert "no-result" in log_of(c, iid)
        assert c.post(f"/instances/{iid}/stop").status_code == 200
        wait_for(lambda: c.get(f"/instances/{iid}").json()["status"] == "stopped")
        fill = (
            "echo from-job > /workspace/result.txt; "
            "i=0; while head -c 1048576 /dev/zero > /checkpoints/c$i; do i=$((i+1)); done; echo checkpoints=$i MiB"
        )
        body = {"command": ["sh", "-c", fill], "gpus": 1, "gpu_types": ["T4"], "workspace": iid}
        r = c.post("/jobs", json=body)
        assert r.status_code == 201 and r.json()["workspace_of"] == iid, r.text
        jid = r.json()["id"]
        done = wait_for(lambda: (v := c.get(f"/jobs/{jid}").json())["status"] in ("failed", "succeeded") and v, 60)
        out = c.get(f"/jobs/{jid}/logs").json()["text"]
        assert isinstance(done, dict) and done["status"] == "succeeded", (done, out)
        assert "No space left on device" in out, out
        assert 55 <= int(out.split("checkpoints=")[1].split()[0]) <= 66, out  # ~64 MiB: a file system of its own
        again = c.post(f"/instances/{iid}/start")
        assert again.status_code == 200, again.text
        wait_for(lambda: log_of(c, iid).count("ready") == 2)
        assert "from-job" in log_of(c, iid)  # in place: the rental sees what the job wrote
        bad = c.post("/jobs", json={**body, "workspace": iid})  # the rental runs now: the job waits
        assert bad.status_code == 201 and bad.json()["workspace_busy"] is True, bad.text
        c.post(f"/jobs/{bad.json()['id']}/cancel")


def test_a_stopped_workspace_stays_readable_on_the_host_and_is_mounted_again_after_a_reboot(
    kernel_limited: LiveServer,
) -> None:
    with kernel_limited.new_user("keeper") as c:
        iid = rent(c, ["sh", "-c", "echo kept > /workspace/note; echo ready; sleep 300"])
        wait_for(lambda: "ready" in log_of(c, iid))
        assert c.post(f"/instances/{iid}/stop").status_code == 200
        wait_for(lambda: c.get(f"/instances/{iid}").json()["status"] == "stopped")
        folder = kernel_limited.platform.workspaces / iid
        assert (folder / "note").read_text() == "kept\n"  # storage metering, snapshots and rent --from read here
        volume._unmount(folder)  # what a reboot does
        assert not (folder / "note").exists()
        assert volume.mount_all(kernel_limited.platform.sandbox_root) == 1  # what the server does at start
        assert (folder / "note").read_text() == "kept\n"
        again = c.post(f"/instances/{iid}/start")
        assert again.status_code == 200, again.text
        wait_for(lambda: log_of(c, iid).count("ready") == 2)


def test_a_folder_with_files_moves_into_its_image_and_resizes(tmp_path: Path) -> None:
    """What ``rent --from`` and a snapshot restore leave before the first start moves into the image, links
    kept as links; a larger limit grows it, a smaller one shrinks it unless the files do not fit."""
    _require_loop_mounts()
    folder = tmp_path / "sandbox" / "workspaces" / "i-test"
    folder.mkdir(parents=True)
    (folder / "data").write_bytes(b"x" * (3 * MiB))
    (folder / "out").symlink_to("/etc/shadow")
    os.chmod(folder, 0o700)
    try:
        volume.ensure(folder, 64 * MiB, 10_000)
        assert os.path.ismount(folder) and not volume.image_of(folder).with_suffix(".part").exists()
        assert (folder / "data").stat().st_size == 3 * MiB and os.readlink(folder / "out") == "/etc/shadow"
        assert sorted(p.name for p in folder.iterdir()) == ["data", "out"]  # no lost+found
        assert os.stat(folder).st_mode & 0o777 == 0o700

        assert 64 * MiB <= volume.usable(folder) <= 66 * MiB
        with open(folder / "data", "rb"):  # in use (a host-side reader): never checked or resized under it
            with pytest.raises(LaunchError, match="in use"):
                volume.ensure(folder, 128 * MiB, 10_000)
            assert os.path.ismount(folder) and 64 * MiB <= volume.usable(folder) <= 66 * MiB
        volume.ensure(folder, 128 * MiB, 10_000)  # grown
        assert 128 * MiB <= volume.usable(folder) <= 130 * MiB
        assert sorted(p.name for p in folder.iterdir()) == ["data", "out"]  # e2fsck's lost+found went too
        (folder / "big").write_bytes(b"y" * (100 * MiB))
        # a shrink below what it holds is left undone: the renter can start it to delete files (a resize
        # onto a smaller limit is refused before, with 409 disk_limit)
        volume.ensure(folder, 64 * MiB, 10_000)
        assert volume.usable(folder) >= 128 * MiB and (folder / "big").stat().st_size == 100 * MiB
        (folder / "big").unlink()
        volume.ensure(folder, 32 * MiB, 10_000)  # shrunk
        assert 32 * MiB <= volume.usable(folder) <= 34 * MiB
        assert (folder / "data").stat().st_size == 3 * MiB
    finally:
        volume.release(folder)
    assert not os.path.ismount(folder) and not volume.image_of(folder).exists()


def test_a_move_into_the_image_killed_midway_is_cleaned_at_start_and_done_again(tmp_path: Path) -> None:
    """A server killed (kill -9) while it copied a folder into its new image left the image's ``.staging`` mount
    and its ``.part`` image behind for good (the kill drill found them after 2 of 4 runs by hand). The server's
    start (mount_all) ends such leftovers — the folder still holds the files, the rename had not happened — and
    the next start moves them again."""
    _require_loop_mounts()
    sandbox = tmp_path / "sandbox"
    folder = sandbox / "workspaces" / "i-killed"
    folder.mkdir(parents=True)
    (folder / "data").write_bytes(b"x" * MiB)
    part = volume.image_of(folder).with_suffix(".part")
    staging = part.with_suffix(".staging")
    part.parent.mkdir(parents=True)
    volume._make(part, 64 * MiB, 10_000)  # what ensure() had done when the kill came
    staging.mkdir(mode=0o700)
    volume._mount(part, staging)
    try:
        assert volume.mount_all(sandbox) == 0  # the server starts again: nothing complete to mount …
        assert not os.path.ismount(staging) and not staging.exists() and not part.exists()  # … and no leftovers
        assert (folder / "data").stat().st_size == MiB  # the files were never moved
        volume.ensure(folder, 64 * MiB, 10_000)  # the rental's next start moves them again
        assert os.path.ismount(folder) and (folder / "data").stat().st_size == MiB
    finally:
        if os.path.ismount(staging):
            volume._unmount(staging, lazy=True)
        volume.release(folder)
    assert not os.path.ismount(folder) and not volume.image_of(folder).exists()
