"""Renter-built trees of any depth: the platform's walks and removals neither recurse nor follow links
(a renter's folder nested thousands of levels deep made every one of them raise RecursionError: the
disk limit went unmeasured, the run's end unrecorded and ``rm`` answered 500, leaving the files)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from danlu.compute import fstree
from danlu.compute.sandbox.disk import usage
from danlu.compute.workspace_size import workspace_bytes

DEPTH = 3000  # past Python's recursion limit (1000) and, with the path, past PATH_MAX (4096 bytes)


def _deep(top: Path, depth: int = DEPTH) -> None:
    """top/a/a/…/a/payload (1 MiB), made fd-relative as a renter would (the path is too long to name)."""
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("a", dir_fd=fd)
        nfd = os.open("a", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    out = os.open("payload", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(out, b"x" * (1 << 20))
    os.close(out)
    os.close(fd)


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[Path]:
    """A deep workspace, removed afterwards (pytest's own clean-up of old temp folders recurses)."""
    _deep(tmp_path / "ws")
    yield tmp_path / "ws"
    fstree.remove_tree(tmp_path / "ws")


def _fds_into(path: Path) -> list[str]:
    """This process's open descriptors on ``path`` or below (other threads' descriptors do not count)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError as exc:  # gone (the listing's own), or a path too long to name: the deep tree's
            if exc.errno != errno.ENAMETOOLONG:
                continue
            target = f"{path}/…"
        if target == str(path) or target.startswith(f"{path}/"):
            out.append(target)
    return out


def test_a_tree_deeper_than_the_recursion_limit_is_measured_whole(ws: Path) -> None:
    u = usage((str(ws),), max_files=10_000)
    assert u.files == DEPTH + 1  # every folder and the payload at the bottom
    assert u.bytes >= 1 << 20
    assert workspace_bytes(str(ws)) == 1 << 20
    assert _fds_into(ws) == []  # all closed after
    held: list[int] = []
    fstree.scan(str(ws), lambda name, st: held.append(len(_fds_into(ws))) is None)
    assert len(held) == DEPTH + 1 and max(held) == 1  # one folder open at a time, even 3,000 levels down


def test_the_walk_stops_at_the_file_limit(ws: Path) -> None:
    assert usage((str(ws),), max_files=100).files == 101


def test_a_deep_tree_is_removed_without_following_links(tmp_path: Path, ws: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not the renter's")
    (ws / "link").symlink_to(outside)
    (ws / "file-link").symlink_to(outside / "keep")
    os.link(outside / "keep", ws / "hard")
    assert fstree.remove_tree(ws) is True
    assert not ws.exists()
    assert (outside / "keep").read_text() == "not the renter's"
    assert _fds_into(ws) == [] and _fds_into(outside) == []
    assert fstree.remove_tree(ws) is True  # already gone: nothing to do


def test_a_symlink_at_the_top_is_unlinked_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "f").write_text("x")
    link = tmp_path / "ws"
    link.symlink_to(target)
    assert fstree.remove_tree(link) is True
    assert not link.is_symlink() and (target / "f").exists()
    seen: list[str] = []
    fstree.scan(str(link), lambda name, st: seen.append(name) is None)
    assert seen == []  # the walk does not start through a link


def test_a_folder_moved_away_mid_walk_stops_the_walk_instead_of_walking_elsewhere(tmp_path: Path) -> None:
    top = tmp_path / "ws"
    (top / "a" / "b" / "c").mkdir(parents=True)

    def move_b_up(name: str, st: os.stat_result) -> bool:
        if name == "c":  # the walk is inside a/b: move b to the top, so its ".." is no longer a
            os.rename(top / "a" / "b", top / "b2")
        return True

    with pytest.raises(fstree.TreeChanged):
        fstree.scan(str(top), move_b_up)


def test_a_workspace_that_cannot_be_measured_three_times_in_a_row_is_over_its_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A renter moving folders about so that every walk fails must not escape the disk limit."""
    from danlu.compute.sandbox import disk

    def moved(folders: tuple[str, ...], max_files: int) -> disk.Usage:
        raise fstree.TreeChanged("a folder was moved while it was being walked")

    monkeypatch.setattr(disk, "usage", moved)
    w = disk.DiskWatcher(interval_s=3600)  # its own thread measures once; the test measures the rest
    w.watch({"r1": disk.Watched((str(tmp_path),), init_pid=os.getpid(), disk_bytes=1 << 30, files=10_000)})
    for _ in range(disk.UNMEASURED_LIMIT):
        w.measure_now()
    reading = w.reading("r1")
    assert reading is not None and reading.unmeasured
    reason = disk.violation(1 << 30, 10_000, reading)
    assert reason.startswith("disk limit: the workspace could not be measured 3 times in a row"), reason
    monkeypatch.setattr(disk, "usage", lambda folders, max_files: disk.Usage(4096, 1))
    w.measure_now()  # measured again: the count starts over
    again = w.reading("r1")
    assert again is not None and not again.unmeasured and disk.violation(1 << 30, 10_000, again) == ""
