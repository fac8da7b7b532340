"""Resource limits of a sandbox with cgroups: memory, processes and CPU, enforced by the kernel.

Two drivers with one interface. **v2** where the host delegates the ``memory``, ``pids`` and ``cpu``
controllers to us (``cgroup.controllers`` of our own cgroup lists them and we may write below it);
**v1** where those controllers are mounted as separate v1 hierarchies we may write to (a root server on
a host in "hybrid" mode, as this project's CI machines are). Without either, limits fall back to
rlimits and a disk-usage check (danlu.compute.backends.local), and ``danlu admin hosts`` says so.

Each run gets one group, ``danlu-<deployment>/<run id>``, nested under the server's own cgroup so
the server's own limits still bound its renters. The group is created before the sandbox's first
process is let go and that process is moved in while it is blocked, so every process of the run
is inside from the start.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from danlu.backend import Limits

log = logging.getLogger(__name__)

ROOT = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000
REMOVE_WAIT_S = 2.0  # how long a removal waits for just-killed processes to exit


class Cgroups(Protocol):
    kind: str

    def create(self, name: str, limits: Limits) -> None: ...
    def attach(self, name: str, pid: int) -> None: ...
    def procs(self, name: str) -> list[int]: ...
    def oom_kills(self, name: str) -> int: ...
    def pids_limit_hits(self, name: str) -> int: ...
    def remove(self, name: str) -> bool: ...
    def usage(self, name: str) -> tuple[float, int] | None: ...
    def names(self) -> list[str]: ...


def _own_path(controller: str) -> str:
    """The server's own cgroup path in a v1 ``controller`` hierarchy ("" for v2's unified one)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if controller in ctrls.split(","):
            return path
    return "/"


def _read_key(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
    except (FileNotFoundError, ValueError):
        pass
    return 0


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return 0


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _procs(path: Path) -> list[int]:
    try:
        return [int(x) for x in (path / "cgroup.procs").read_text().split()]
    except FileNotFoundError:
        return []


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _rmdir_when_empty(paths: list[Path], kill: Callable[[], None], wait_s: float = REMOVE_WAIT_S) -> bool:
    """Remove groups whose processes were just killed: a kill is asynchronous, and an rmdir while a killed
    process has not yet exited fails (EBUSY). Retried until each is gone, at most ``wait_s`` (a process in
    uninterruptible sleep can take that long); False if one is still there (the local backend's sweep
    retries it; on a Slurm node nothing would, and 5 of 13 runs left empty groups: issue 28, finding 8)."""
    deadline = time.monotonic() + wait_s
    while True:
        kill()  # again each time: what a killed process forked meanwhile
        if all([_rmdir(path) for path in paths]):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


class CgroupV1:
    """Separate ``memory``, ``pids`` and ``cpu`` hierarchies (cgroup v1)."""

    kind = "cgroup-v1"
    CONTROLLERS = ("memory", "pids", "cpu")

    def __init__(self, base_name: str, root: Path = ROOT) -> None:
        self.bases = {c: root / c / _own_path(c).lstrip("/") / base_name for c in self.CONTROLLERS}

    @classmethod
    def usable(cls, root: Path = ROOT) -> bool:
        return all((root / c / "cgroup.procs").exists() and os.access(root / c, os.W_OK) for c in cls.CONTROLLERS)

    def create(self, name: str, limits: Limits) -> None:
        for base in self.bases.values():
            (base / name).mkdir(parents=True, exist_ok=True)
        mem = self.bases["memory"] / name
        files = ["memory.limit_in_bytes"]
        if (mem / "memory.memsw.limit_in_bytes").exists():  # no swapping past the limit either
            # The kernel keeps memory <= memory+swap at every write: a cgroup kept from an earlier run
            # of the instance (its name is reused) resized onto more GPUs must raise memsw first.
            files.append("memory.memsw.limit_in_bytes")
            if limits.memory_bytes > _read_int(mem / "memory.limit_in_bytes"):
                files.reverse()
        for file in files:
            _write(mem / file, str(limits.memory_bytes))
        _write(self.bases["pids"] / name / "pids.max", str(limits.pids))
        cpu = self.bases["cpu"] / name
        _write(cpu / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        _write(cpu / "cpu.cfs_quota_us", str(max(1000, limits.cpus_milli * CPU_PERIOD_US // 1000)))

    def attach(self, name: str, pid: int) -> None:
        for base in self.bases.values():
            _write(base / name / "cgroup.procs", str(pid))

    def procs(self, name: str) -> list[int]:
        return _procs(self.bases["pids"] / name)

    def oom_kills(self, name: str) -> int:
        return _read_key(self.bases["memory"] / name / "memory.oom_control", "oom_kill")

    def pids_limit_hits(self, name: str) -> int:
        return _read_key(self.bases["pids"] / name / "pids.events", "max")

    def usage(self, name: str) -> tuple[float, int] | None:
        return None  # v1's cpu hierarchy counts no CPU time (cpuacct is apart): the process tree does

    def remove(self, name: str) -> bool:
        def kill() -> None:
            for pid in self.procs(name):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

        return _rmdir_when_empty([base / name for base in self.bases.values()], kill)

    def names(self) -> list[str]:
        base = self.bases["pids"]
        return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


class CgroupV2:
    """The unified hierarchy (cgroup v2), where the host delegated memory, pids and cpu to us.

    v2 forbids processes in a group whose controllers are handed down ("no internal processes"),
    so when the server's own group holds processes the server first moves itself into a leaf
    ``supervisor`` group beside its renters'."""

    kind = "cgroup-v2"
    NEEDED = frozenset({"memory", "pids", "cpu"})

    def __init__(self, base_name: str, root: Path = ROOT) -> None:
        own = root / _own_path("").lstrip("/")
        self.base = own / base_name
        self._enable(own)
        self.base.mkdir(exist_ok=True)
        _write(self.base / "cgroup.subtree_control", "+memory +pids +cpu")

    @classmethod
    def usable(cls, root: Path = ROOT) -> bool:
        own = root / _own_path("").lstrip("/")
        try:
            have = set((own / "cgroup.controllers").read_text().split())
        except FileNotFoundError:
            return False
        return have >= cls.NEEDED and os.access(own, os.W_OK)

    @staticmethod
    def _enable(own: Path) -> None:
        try:
            _write(own / "cgroup.subtree_control", "+memory +pids +cpu")
        except OSError:  # EBUSY: processes live in our own group; move them into a leaf first
            leaf = own / "supervisor"
            leaf.mkdir(exist_ok=True)
            for pid in _procs(own):
                try:
                    _write(leaf / "cgroup.procs", str(pid))
                except OSError:
                    pass
            _write(own / "cgroup.subtree_control", "+memory +pids +cpu")

    def create(self, name: str, limits: Limits) -> None:
        g = self.base / name
        g.mkdir(exist_ok=True)
        _write(g / "memory.max", str(limits.memory_bytes))
        if (g / "memory.swap.max").exists():
            _write(g / "memory.swap.max", "0")
        _write(g / "pids.max", str(limits.pids))
        _write(g / "cpu.max", f"{max(1000, limits.cpus_milli * CPU_PERIOD_US // 1000)} {CPU_PERIOD_US}")

    def attach(self, name: str, pid: int) -> None:
        _write(self.base / name / "cgroup.procs", str(pid))

    def procs(self, name: str) -> list[int]:
        return _procs(self.base / name)

    def oom_kills(self, name: str) -> int:
        return _read_key(self.base / name / "memory.events", "oom_kill")

    def pids_limit_hits(self, name: str) -> int:
        return _read_key(self.base / name / "pids.events", "max")

    def usage(self, name: str) -> tuple[float, int] | None:
        """(CPU seconds, memory bytes) the kernel counted for the group, exited processes included."""
        try:
            usec = _read_key(self.base / name / "cpu.stat", "usage_usec")
            mem = int((self.base / name / "memory.current").read_text().strip())
        except (OSError, ValueError):
            return None
        return usec / 1e6, mem

    def remove(self, name: str) -> bool:
        g = self.base / name

        def kill() -> None:
            if (g / "cgroup.kill").exists():
                try:
                    _write(g / "cgroup.kill", "1")
                except OSError:
                    pass

        return _rmdir_when_empty([g], kill)

    def names(self) -> list[str]:
        return sorted(p.name for p in self.base.iterdir() if p.is_dir()) if self.base.is_dir() else []


def detect(base_name: str, mode: str = "auto") -> Cgroups | None:
    """The cgroup driver to use (``mode``: auto | v2 | v1 | off), or None for rlimits only."""
    if mode == "off":
        return None
    if mode in ("auto", "v2") and CgroupV2.usable():
        try:
            return CgroupV2(base_name)
        except OSError as exc:
            log.warning("cgroup v2 is delegated but not writable (%s)", exc)
    if mode in ("auto", "v1") and CgroupV1.usable():
        return CgroupV1(base_name)
    if mode != "auto":
        raise OSError(f"cgroup {mode} is not usable on this host")
    return None
