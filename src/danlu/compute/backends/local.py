"""The local backend: runs on this host, each run in a bubblewrap sandbox (or, only when the
operator asked for ``--no-sandbox``, as a plain process of the platform's own user).

Every run has a **supervisor**: a small bash process of the platform's, outside the sandbox, that
leads its own process group, waits for the run and writes its exit status to
``DATA/runs/KEY/RUN.exit`` (atomically, via rename). The file's mtime is the moment the run ended,
so billing ends exactly then even if the server noticed later or was down. The renter cannot
forge it: it lives in the platform's 0700 run folder, which no sandbox sees. A supervisor killed
with its group leaves no exit file: that is how a lost run is told apart from one that finished.

A sandboxed run is ``supervisor → [nsenter] → prlimit → setpriv (the renter's uid) → [keyctl
session] → bwrap → command`` (built in danlu.compute.backends.spawn). bubblewrap blocks
(``--block-fd``) until the platform has moved the sandbox's first process into the run's cgroup,
and until the platform has recorded the handle and called :meth:`start`. The supervisor holds a
copy of the block pipe, so a server that dies before ``start`` leaves a run that never starts,
rather than one that runs untracked.

The handle (opaque above this module) is JSON naming the supervisor (pid + its start time, so a
recycled pid is never mistaken for it), the sandbox's first process, and the run's files.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import psutil

from danlu.backend import (
    PREEMPT_FILE,
    RUNNING,
    EnterRequest,
    LaunchError,
    RunSpec,
    RunState,
    RunUsage,
    read_log,
    run_dir,
    run_file,
)
from danlu.compute.backends import netns
from danlu.compute.backends.entering import enter_plain, enter_sandbox
from danlu.compute.backends.procs import kill_group_leftovers, live_process, send
from danlu.compute.backends.spawn import SandboxOptions, spawn_plain, spawn_sandboxed
from danlu.compute.sandbox import bwrap, driver, volume
from danlu.compute.sandbox.disk import DiskWatcher, Watched, file_limit, violation
from danlu.compute.sandbox.netstat import NetCounter

log = logging.getLogger(__name__)


NET_LOOKUPS = 5  # a run still outside a namespace of its own after this many samples is on the host's network


def _children() -> dict[int, list[int]]:
    """ppid → pids, from one /proc scan."""
    children: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["ppid"]):
        children.setdefault(int(proc.info.get("ppid") or 0), []).append(proc.pid)
    return children


def _procs_usage(pids: Iterable[int]) -> tuple[float, int]:
    """CPU seconds and RSS of these processes (a run's: its supervisor and its cgroup's), each read alone:
    the cost follows the run's own processes, not every process on the host (issue 29)."""
    cpu_s, rss = 0.0, 0
    for pid in dict.fromkeys(pids):
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                times = proc.cpu_times()
                cpu_s += times.user + times.system
                rss += proc.memory_info().rss
        except psutil.Error:
            continue
    return cpu_s, rss


def _tree_usage(roots: dict[str, int]) -> tuple[dict[str, RunUsage], dict[int, list[int]]]:
    """CPU seconds and RSS of each root process and all its descendants, from one /proc scan
    (returned too, as ppid → pids)."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for proc in psutil.process_iter(["ppid", "cpu_times"]):
        info = proc.info
        children.setdefault(int(info.get("ppid") or 0), []).append(proc.pid)
        times = info.get("cpu_times")
        cpu[proc.pid] = float(times.user + times.system) if times is not None else 0.0
    out: dict[str, RunUsage] = {}
    for handle, root in roots.items():
        if root not in cpu:
            continue
        seen, stack, cpu_s, rss = set(), [root], 0.0, 0
        while stack:
            pid = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            cpu_s += cpu.get(pid, 0.0)
            try:
                rss += psutil.Process(pid).memory_info().rss
            except psutil.Error:
                pass
            stack.extend(children.get(pid, ()))
        out[handle] = RunUsage(cpu_s, rss)
    return out, children


def volume_folders(spec: RunSpec) -> list[Path]:
    """The folders the disk limit covers, each a file system of its own where the kernel holds it: the
    workspace, or a job's folder holding its workspace and checkpoints (one limit for both); a job in a
    rental's workspace (``danlu run --workspace``): that workspace and the job's folder holding its
    checkpoints, each limited."""
    if spec.checkpoints is None:
        return [spec.workspace]
    if spec.checkpoints.parent == spec.workspace.parent:
        return [spec.workspace.parent]
    return [spec.workspace, spec.checkpoints.parent]


def _chown_private(path: Path, uid: int | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o711)
    path.mkdir(exist_ok=True)
    if uid is not None:
        os.chown(path, uid, uid)
    os.chmod(path, 0o700)


class LocalBackend:
    name = "local"
    starts_before_record = False
    spans_hosts = False

    def __init__(self, data_dir: Path, sandbox: SandboxOptions | None) -> None:
        self.data_dir = data_dir
        self.sandbox = sandbox
        self._lock = threading.Lock()
        self._launching: set[str] = set()
        self._blockers: dict[str, int] = {}  # run id → write end of its block pipe, until start
        self._pid_hits: dict[str, tuple[int, float | None]] = {}
        self._disk = DiskWatcher(sandbox.disk_check_s if sandbox is not None else 15.0)
        self._net = NetCounter()
        self._net_misses: dict[str, int] = {}  # runs not (yet) found in a namespace of their own
        self._polls = 0
        # remove empty run cgroups no run here knows (left by a crash). Off where several processes
        # share the cgroups, each knowing only its own run (a Slurm node's runners: one would remove
        # another's group between its create and its attach)
        self.sweeps = True

    # -- paths --------------------------------------------------------------------------------
    def _run_dir(self, log_key: str) -> Path:
        return run_dir(self.data_dir, log_key)

    def _file(self, h: dict[str, Any], suffix: str) -> Path:
        return run_file(self.data_dir, h, suffix)

    def _env(self, spec: RunSpec) -> dict[str, str]:
        if self.sandbox is not None:
            ws, ckpt, control = bwrap.WORKSPACE, bwrap.CHECKPOINTS, bwrap.CONTROL
        else:
            ws, ckpt, control = str(spec.workspace), str(spec.checkpoints), str(spec.control_dir)
        extra = {"DANLU_WORKSPACE": ws, "DANLU_PREEMPT_FILE": f"{control}/{PREEMPT_FILE}"}
        if spec.checkpoints is not None:
            extra["DANLU_CHECKPOINT_DIR"] = ckpt
        return {**spec.env, **extra}

    # -- launch -------------------------------------------------------------------------------
    def launch(self, spec: RunSpec) -> str:
        if spec.nodes:  # never asked (spans_hosts is False): the platform refuses such a job at submit
            raise LaunchError("a gang over several hosts needs a backend that spans hosts (Slurm); this is one host")
        run_dir = self._run_dir(spec.log_key)
        exit_path = run_dir / f"{spec.run_id}.exit"
        for suffix in ("exit", "started", "reason"):
            (run_dir / f"{spec.run_id}.{suffix}").unlink(missing_ok=True)
        uid = spec.uid if self.sandbox is not None and self.sandbox.as_root else None
        if self.sandbox is not None and spec.limits is not None:
            sb, disk = self.sandbox, spec.limits.disk_bytes
            for limited in volume_folders(spec):
                volume.prepare(
                    limited, disk, file_limit(disk), image=sb.disk == "image", keys=sb.keys, encrypt=sb.encrypt
                )
        for folder in (spec.workspace, spec.checkpoints):
            if folder is not None:
                _chown_private(folder, uid)
        spec = replace(spec, env=self._env(spec))
        with self._lock:
            self._launching.add(spec.run_id)
        logfd = os.open(run_dir / "output.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        h: dict[str, Any] = {"log": spec.log_key, "run": spec.run_id, "exit": str(exit_path.relative_to(self.data_dir))}
        try:
            if self.sandbox is None:
                pid, block_w = spawn_plain(spec, exit_path, logfd)
            else:
                try:
                    pid, block_w, init = spawn_sandboxed(spec, self.sandbox, exit_path, logfd, uid)
                except LaunchError as exc:  # bubblewrap says why in the run's log
                    tail = self.read_output(spec.log_key, 0)[0].strip().splitlines()[-1:]
                    raise LaunchError(f"{exc}{' — ' + tail[0] if tail else ''}") from exc
                limits = spec.limits
                assert limits is not None
                h.update(
                    sb=True, init=init, ict=psutil.Process(init).create_time(), cg=self.sandbox.cgroups is not None
                )
                h.update(ws=str(spec.workspace), disk=limits.disk_bytes, mem=limits.memory_bytes, pids=limits.pids)
                h["ckpt"] = str(spec.checkpoints) if spec.checkpoints is not None else None
                if self.sandbox.disk == "image":
                    h["kd"] = True  # the kernel holds its disk limit: the watcher only reads the use
                if self.sandbox.driver and driver.applies(spec):
                    h["drv"] = True  # the host's GPU driver is bound in: sessions get its folders too
            h.update(pid=pid, ct=psutil.Process(pid).create_time(), ws=str(spec.workspace))
        except BaseException as exc:
            with self._lock:
                self._launching.discard(spec.run_id)
            if isinstance(exc, psutil.NoSuchProcess):  # it ended while being prepared
                log_tail = self.read_output(spec.log_key, 0)[0][-200:]
                raise LaunchError(f"the run ended while it was being prepared: {log_tail}") from exc
            raise
        finally:
            os.close(logfd)
        with self._lock:
            self._blockers[spec.run_id] = block_w
        return json.dumps(h, sort_keys=True)

    def start(self, handle: str) -> None:  # the platform's clock times a local run
        h = json.loads(handle)
        with self._lock:
            fd = self._blockers.pop(h["run"], -1)
        try:
            if fd == -1:
                return
            try:
                os.write(fd, b"go\n")
            except OSError:  # the run is already gone; the next poll says how it ended
                pass
            finally:
                os.close(fd)
            if h.get("sb"):  # written after the command was let go: a dead server errs on "never started"
                self._file(h, "started").touch(mode=0o600)
        finally:
            with self._lock:  # only now may a poll judge a run without the marker as never started
                self._launching.discard(h["run"])

    def launching(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._launching

    def cancel(self, handle: str) -> None:
        """Not the local way: the platform terminates, then kills after its own grace period."""
        return None

    def unavailable(self) -> None:
        return None

    def held_elsewhere(self) -> None:  # this machine's GPUs are the platform's alone
        return None

    def ref(self, handle: str) -> str:
        return f"local:{json.loads(handle)['pid']}"

    # -- state --------------------------------------------------------------------------------
    def alive_until(self, handles: Sequence[str]) -> dict[str, int]:
        return {}  # the supervisor is on this host: poll sees a death at once

    def _cgroup_pids(self, h: dict[str, Any]) -> Callable[[], list[int]] | None:
        """The run's processes as its own cgroup lists them (one file, whatever else runs on the host); None
        where it has no cgroup (its processes are then found from its init)."""
        cgroups = self.sandbox.cgroups if self.sandbox is not None else None
        if cgroups is None or not h.get("cg"):
            return None
        return partial(cgroups.procs, str(h["run"]))

    def poll(self, handles: Sequence[str]) -> dict[str, RunState]:
        parsed = {handle: json.loads(handle) for handle in handles}
        out = {handle: self._state(h) for handle, h in parsed.items()}
        if self.sandbox is not None:  # measure the running sandboxes' disk use off this thread
            self._disk.interval_s = self.sandbox.disk_check_s
            self._disk.watch(
                {
                    h["run"]: Watched(
                        folders=tuple(x for x in (h["ws"], h.get("ckpt")) if x),
                        init_pid=h["init"],
                        disk_bytes=h["disk"],
                        files=file_limit(h["disk"]),
                        kernel=bool(h.get("kd")),
                        pids=self._cgroup_pids(h),
                    )
                    for handle, h in parsed.items()
                    if h.get("sb") and out[handle].kind == "running"
                }
            )
        self._polls += 1
        if self.sweeps and self.sandbox is not None and self.sandbox.cgroups is not None and self._polls % 60 == 1:
            self._sweep({h["run"] for h in parsed.values()})
        return out

    def _state(self, h: dict[str, Any]) -> RunState:
        outer = live_process(h["pid"], h.get("ct"), h.get("ticks"))
        if outer is not None:
            if h.get("sb") and not self._file(h, "started").exists() and not self.launching(h["run"]):
                self._kill(h)
                return RunState("never_started", reason="the server stopped before the command started")
            if h.get("sb"):
                self._enforce(h)
            return RUNNING
        exit_path = self.data_dir / h["exit"]
        try:
            code = int(exit_path.read_text().strip())
            ended_ms = exit_path.stat().st_mtime_ns // 1_000_000
        except (FileNotFoundError, ValueError):
            return RunState("lost")
        reason_file = self._file(h, "reason")
        reason = reason_file.read_text().strip() if reason_file.exists() else ""
        cgroups = self.sandbox.cgroups if self.sandbox is not None and h.get("cg") else None
        if not reason and cgroups is not None and cgroups.oom_kills(h["run"]) > 0:
            reason = (
                f"out of memory: the sandbox reached its {h['mem'] >> 20} MiB memory limit and the kernel "
                "ended it; rent more GPUs for more memory, or use less"
            )
        return RunState("exited", code=code, ended_ms=ended_ms, reason=reason)

    def _enforce(self, h: dict[str, Any]) -> None:
        """Limits the kernel does not end a run for by itself: a sustained fork bomb and the
        workspace's disk use (bytes and files, danlu.compute.sandbox.disk). A violation ends the
        sandbox with the reason recorded."""
        assert self.sandbox is not None
        now, run = time.monotonic(), h["run"]
        reason = ""
        if h.get("cg") and self.sandbox.cgroups is not None:
            hits = self.sandbox.cgroups.pids_limit_hits(run)
            last, since = self._pid_hits.get(run, (hits, None))
            if hits > last:
                since = since if since is not None else now
                if now - since >= self.sandbox.fork_bomb_s:
                    reason = (
                        f"process limit: the sandbox kept trying to run more than {h['pids']} processes for "
                        f"{self.sandbox.fork_bomb_s:.0f} s (a fork bomb?), so it was stopped"
                    )
            else:
                since = None
            self._pid_hits[run] = (hits, since)
        reading = self._disk.reading(run)
        if not reason and reading is not None and not h.get("kd"):  # else the kernel said ENOSPC already
            reason = violation(h["disk"], file_limit(h["disk"]), reading)
        if reason:
            self._file(h, "reason").write_text(reason + "\n")
            send(live_process(h["init"], h["ict"]), signal.SIGKILL)  # the supervisor records the end

    # -- signals ------------------------------------------------------------------------------
    def terminate(self, handle: str) -> None:
        h = json.loads(handle)
        outer = live_process(h["pid"], h.get("ct"), h.get("ticks"))
        if outer is None:
            return
        if not h.get("sb"):
            send(outer, signal.SIGTERM, group=True)
            return
        if not self._file(h, "started").exists():
            self._kill(h)  # never started: there is nothing to shut down gracefully
            return
        init = live_process(h["init"], h["ict"])
        if init is None:
            return
        try:
            workload = init.children(recursive=True)  # every process of the sandbox but its init
        except psutil.NoSuchProcess:
            return
        for proc in workload:
            send(proc, signal.SIGTERM)

    def kill(self, handle: str) -> None:
        self._kill(json.loads(handle))

    def _kill(self, h: dict[str, Any]) -> None:
        with self._lock:
            fd = self._blockers.pop(h["run"], -1)
            self._launching.discard(h["run"])
        if fd != -1:
            os.close(fd)
        # The supervisor first: killed after the sandbox it could see its child end and record an
        # exit status for a run that was killed (a loaded machine opens that window).
        outer = live_process(h["pid"], h.get("ct"), h.get("ticks"))
        if outer is not None:
            send(outer, signal.SIGKILL, group=True)
        elif not h.get("sb") and not psutil.pid_exists(h["pid"]):
            # Its leader is gone, so the group's pgid is still ours while any member lives. A live
            # process with that pid that is not our supervisor means the pid was reused, which the kernel
            # allows only once our group is empty: that group is someone else's.
            kill_group_leftovers(h["pid"])
        if h.get("sb"):
            # The sandbox's init: when it dies the kernel kills every process in its PID namespace.
            send(live_process(h["init"], h["ict"]), signal.SIGKILL)

    def release(self, handle: str) -> None:
        h = json.loads(handle)
        if h.get("cg") and self.sandbox is not None and self.sandbox.cgroups is not None:
            self.sandbox.cgroups.remove(h["run"])  # if processes linger, the next sweep retries
        for suffix in ("started", "reason", "net.log"):
            self._file(h, suffix).unlink(missing_ok=True)
        (self.data_dir / h["exit"]).unlink(missing_ok=True)
        self._pid_hits.pop(h["run"], None)

    def discard(self, run_id: str) -> None:
        for proc in psutil.process_iter(["cmdline"]):
            cmd = proc.info.get("cmdline") or []
            if len(cmd) > 4 and cmd[3] == "danlu-run" and cmd[4].endswith(f"/{run_id}.exit"):
                send(proc, signal.SIGKILL, group=True)
        if self.sandbox is not None and self.sandbox.cgroups is not None:
            self.sandbox.cgroups.remove(run_id)

    def _sweep(self, active: set[str]) -> None:
        assert self.sandbox is not None and self.sandbox.cgroups is not None
        for name in self.sandbox.cgroups.names():
            if name not in active and not self.launching(name) and not self.sandbox.cgroups.procs(name):
                self.sandbox.cgroups.remove(name)

    # -- sessions ---------------------------------------------------------------------------------
    def enter(self, handle: str, request: EnterRequest) -> subprocess.Popen[bytes]:
        """The session's environment is the run's (danlu.compute.sandbox.bwrap.environment: PATH,
        HOME, LANG, USER, the DANLU_* paths) with the request's variables over it."""
        h = json.loads(handle)
        sandboxed = bool(h.get("sb")) and self.sandbox is not None
        ws = bwrap.WORKSPACE if sandboxed else str(h.get("ws") or "/")
        env = {"PATH": bwrap.SANDBOX_PATH if sandboxed else os.environ.get("PATH", bwrap.SANDBOX_PATH)}
        env |= {"HOME": ws, "LANG": "C.UTF-8", "USER": "renter", "DANLU_WORKSPACE": ws}
        if sandboxed:
            env["DANLU_PREEMPT_FILE"] = f"{bwrap.CONTROL}/{PREEMPT_FILE}"
            if h.get("ckpt"):
                env["DANLU_CHECKPOINT_DIR"] = bwrap.CHECKPOINTS
            if h.get("drv"):
                env = driver.environment(env)
        request = replace(request, env={**env, **request.env})
        if not sandboxed:
            return enter_plain(h, request)
        assert self.sandbox is not None
        return enter_sandbox(h, self.sandbox, request)

    def connect(self, handle: str, port: int) -> socket.socket:
        return netns.connect(json.loads(handle), port)

    async def dial(self, handle: str, port: int) -> socket.socket:
        return await netns.dial(json.loads(handle), port)

    def listening(self, handle: str) -> list[int]:
        return netns.listening(json.loads(handle))

    # -- usage --------------------------------------------------------------------------------
    def usage(self, handles: Sequence[str]) -> dict[str, RunUsage]:
        """From the run's cgroup where cgroup v2 counts CPU time; from the processes its cgroup lists (v1, plus
        its supervisor), each read alone; else from its process tree (the supervisor and everything under it):
        one pass over /proc for all such runs. Sandboxed runs
        add their workspace's size (the disk watcher's last reading) and, with a network namespace of
        their own, its traffic (danlu.compute.sandbox.netstat)."""
        cgroups = self.sandbox.cgroups if self.sandbox is not None else None
        out: dict[str, RunUsage] = {}
        roots: dict[str, int] = {}
        runs: dict[str, tuple[str, int]] = {}
        for handle in handles:
            h = json.loads(handle)
            if live_process(h["pid"], h.get("ct"), h.get("ticks")) is None:
                continue
            runs[handle] = (str(h["run"]), int(h["pid"]))
            counted = cgroups.usage(h["run"]) if cgroups is not None and h.get("cg") else None
            if counted is None and cgroups is not None and h.get("cg"):  # v1: its own processes, not a host scan
                counted = _procs_usage([int(h["pid"]), *cgroups.procs(h["run"])])
            if counted is not None:
                out[handle] = RunUsage(*counted)
            else:
                roots[handle] = int(h["pid"])
        children: dict[int, list[int]] | None = None
        if roots:
            tree, children = _tree_usage(roots)
            out.update(tree)
        if self.sandbox is None:
            return out
        for handle, used in list(out.items()):
            run_id, pid = runs[handle]
            disk = self._disk.reading(run_id)
            net = self._net.read(run_id, pid, children)
            if net is None and children is None and self._net_misses.get(run_id, 0) < NET_LOOKUPS:
                children = _children()  # a run not yet located in its namespace: one scan for all
                net = self._net.read(run_id, pid, children)
            if net is None:  # the host's network (never found), or a namespace not made yet
                self._net_misses[run_id] = self._net_misses.get(run_id, 0) + 1
            out[handle] = replace(
                used,
                disk_bytes=disk.bytes if disk is not None else None,
                net_rx_bytes=net[0] if net else None,
                net_tx_bytes=net[1] if net else None,
            )
        alive = {run_id for run_id, _ in runs.values()}
        self._net.forget(alive)
        self._net_misses = {r: n for r, n in self._net_misses.items() if r in alive}
        return out

    # -- output -------------------------------------------------------------------------------
    def read_output(self, log_key: str, offset: int, limit: int = 1 << 20) -> tuple[str, int]:
        return read_log(self.data_dir, log_key, offset, limit)
