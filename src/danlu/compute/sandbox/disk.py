"""A run's disk use, measured off the control loop: its workspace and checkpoints (bytes and
files), plus files it deleted but still holds open — without project quotas the platform must
count all three, or a renter fills the host's disk (and the database with it) around the limit.

The walk (``compute.fstree.scan``) is fd-relative, one folder open at a time, never follows a link and
stays on one file system, so a renter swapping a folder for a symlink mid-walk
(``renameat2(RENAME_EXCHANGE)``) cannot send it outside, and a folder nested thousands of levels deep
is measured like any other (``os.fwalk`` recursed and raised, so such a workspace was never measured);
it stops counting once a limit is passed, so a workspace of millions of files costs a bounded walk.
A watcher thread measures every active run every ``interval_s``; the backend reads the latest reading
when it polls. A run whose workspace cannot be measured ``UNMEASURED_LIMIT`` times in a row (a renter
moving folders about to make every walk fail) is stopped as over its limit: the platform does not
take unmeasured disk on trust.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import psutil

from danlu.compute import fstree

log = logging.getLogger(__name__)
BYTES_PER_FILE = 32 << 10  # the file-count limit: one file per 32 KiB of disk, at least MIN_FILES
MIN_FILES = 10_000
UNMEASURED_LIMIT = 3  # failed measurements in a row that stop a run


def file_limit(disk_bytes: int) -> int:
    return max(MIN_FILES, disk_bytes // BYTES_PER_FILE)


@dataclass(frozen=True)
class Usage:
    bytes: int
    files: int
    unmeasured: str = ""  # why the workspace could not be measured UNMEASURED_LIMIT times in a row


@dataclass(frozen=True)
class Watched:
    folders: tuple[str, ...]
    init_pid: int  # the sandbox's init: its descendants' open-but-deleted files count too
    disk_bytes: int
    files: int
    kernel: bool = False  # on a file system of its own (danlu.compute.sandbox.volume): its counters say it all
    # The run's processes, from its own cgroup where it has one (not a scan of every process on the host)
    pids: Callable[[], Iterable[int]] | None = field(default=None, compare=False)


def fs_usage(folder: str) -> Usage:
    """A workspace on a file system of its own: bytes and files in use, from the file system's own counters
    (deleted-but-open files included), without a walk."""
    st = os.statvfs(folder)
    return Usage((st.f_blocks - st.f_bfree) * st.f_frsize, st.f_files - st.f_ffree)


def usage(folders: tuple[str, ...], max_files: int) -> Usage:
    """Bytes (blocks, hard links once) and entries under ``folders``; stops counting past ``max_files``.
    Raises ``fstree.TreeChanged`` when a folder is moved away mid-walk."""
    total = files = 0
    inodes: set[tuple[int, int]] = set()

    def count(_name: str, st: os.stat_result) -> bool:
        nonlocal total, files
        if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
            if (st.st_dev, st.st_ino) in inodes:
                return True
            inodes.add((st.st_dev, st.st_ino))
        total += st.st_blocks * 512
        files += 1
        return files <= max_files

    for top in folders:
        fstree.scan(top, count)
        if files > max_files:
            break
    return Usage(total, files)


def descendants(init_pid: int) -> list[int]:
    """The processes under ``init_pid``, where the run has no cgroup to list them (psutil reads every process on
    the host to find them: issue 29 measured it at 72 % of a busy server's samples with 100 runs)."""
    try:
        return [proc.pid for proc in psutil.Process(init_pid).children(recursive=True)]
    except psutil.Error:
        return []


def deleted_but_open(pids: Iterable[int]) -> int:
    """Bytes of files the run's processes (``pids``) deleted and still hold open."""
    total, inodes = 0, set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 0 and (st.st_dev, st.st_ino) not in inodes:
                inodes.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def violation(disk_bytes: int, max_files: int, u: Usage) -> str:
    """The reason to end the run, or ""."""
    if u.unmeasured:
        return (
            f"disk limit: the workspace could not be measured {UNMEASURED_LIMIT} times in a row ({u.unmeasured}), "
            "so the sandbox was stopped; do not move folders about in it all the time"
        )
    if u.bytes > disk_bytes:
        return (
            f"disk limit: the workspace used {u.bytes >> 20} MiB of its {disk_bytes >> 20} MiB, so the sandbox "
            "was stopped; remove files (start it and delete them) or rent more GPUs for more disk"
        )
    if u.files > max_files:
        return (
            f"file limit: the workspace holds more than {max_files} files, so the sandbox was stopped; "
            "pack small files into archives, or rent more GPUs for a higher limit"
        )
    return ""


class DiskWatcher:
    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._watched: dict[str, Watched] = {}
        self._readings: dict[str, Usage] = {}
        self._failures: dict[str, int] = {}  # failed measurements in a row, per run
        self._thread: threading.Thread | None = None

    def watch(self, runs: dict[str, Watched]) -> None:
        """The runs to measure from now on (the ones the last poll saw running)."""
        with self._lock:
            self._watched = dict(runs)
            for gone in set(self._readings) - set(runs):
                del self._readings[gone]
            for gone in set(self._failures) - set(runs):
                del self._failures[gone]
            if self._thread is None and runs:
                self._thread = threading.Thread(target=self._run, name="danlu-disk-watcher", daemon=True)
                self._thread.start()

    def reading(self, run_id: str) -> Usage | None:
        with self._lock:
            return self._readings.get(run_id)

    def measure_now(self) -> None:
        with self._lock:
            runs = dict(self._watched)
        for run_id, w in runs.items():
            try:
                if w.kernel:
                    u = fs_usage(w.folders[0])
                else:
                    u = usage(w.folders, w.files)
                    pids = w.pids() if w.pids is not None else descendants(w.init_pid)
                    u = Usage(u.bytes + deleted_but_open(pids), u.files)
            except Exception as exc:  # one unreadable workspace must not stop the others being measured
                log.warning("could not measure the disk use of %s: %s", run_id, exc)
                with self._lock:
                    if run_id in self._watched:
                        failed = self._failures[run_id] = self._failures.get(run_id, 0) + 1
                        if failed >= UNMEASURED_LIMIT:
                            self._readings[run_id] = Usage(0, 0, unmeasured=str(exc) or type(exc).__name__)
                continue
            with self._lock:
                if run_id in self._watched:
                    self._failures.pop(run_id, None)
                    self._readings[run_id] = u

    def _run(self) -> None:
        while True:
            self.measure_now()
            time.sleep(self.interval_s)
