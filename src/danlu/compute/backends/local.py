"""The local backend: runs on this host, each run in a bubblewrap sandbox (or, only when the
operator asked for ``--no-sandbox``, as a plain process of the platform's own user).

Every run has a **supervisor**: a small bash process of the platform's, outside the sandbox, that
leads its own process group, waits for the run and writes its exit status to
``DATA/runs/KEY/RUN.exit`` (atomically, via rename). The file's mtime is the moment the run ended,
so billing ends exactly then even if the server noticed later or was down. The renter cannot
forge it: it lives in the platform's 0700 run folder, which no sandbox sees. A supervisor killed
with its group leaves no exit file: that is how a lost run is told apart from one that finished.

A sandboxed run is ``supervisor → setpriv (the renter's uid) → [prlimit] → bwrap → command``.
bubblewrap blocks (``--block-fd``) until the platform has moved the sandbox's first process into
the run's cgroup and given it its network, and until the platform has recorded the handle and
called :meth:`start`. The supervisor holds a copy of the block pipe, so a server that dies before
``start`` leaves a run that never starts, rather than one that runs untracked.

The handle (opaque above this module) is JSON naming the supervisor (pid + its start time, so a
recycled pid is never mistaken for it), the sandbox's first process, and the run's files.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil

from danlu.compute.backends.base import RUNNING, LaunchError, RunSpec, RunState
from danlu.compute.sandbox import bwrap, network
from danlu.compute.sandbox.cgroups import Cgroups
from danlu.compute.sandbox.network import NetworkError, host_addresses, nft_rules
from danlu.core.errors import InvalidInput

log = logging.getLogger(__name__)

SAFE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
PREEMPT_FILE = "DANLU_PREEMPT_DEADLINE"
MAX_OFFSET = 1 << 62
_RECORD = 'rc=$?; printf "%s\\n" "$rc" > "$exitf.tmp" && mv -f "$exitf.tmp" "$exitf"'


@dataclass
class SandboxOptions:
    """How this host sandboxes runs (decided once at start-up, see danlu.compute.sandbox.probe)."""

    cgroups: Cgroups | None  # None: rlimits and the disk-usage check only
    as_root: bool  # the server is root: each renter runs under its own uid
    network: str = "none"  # the effective policy: none | outbound | host
    tmp_bytes: int = 1 << 30  # size cap of /tmp, /dev/shm and /run inside a sandbox
    disk_check_s: float = 15.0
    fork_bomb_s: float = 10.0
    own_addresses: list[str] = field(default_factory=host_addresses)


def _du(path: Path) -> int:
    """Bytes on disk under ``path`` (hard links once), without following symlinks."""
    total, seen = 0, set()
    for root, dirs, files in os.walk(path, followlinks=False):
        for name in dirs + files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if st.st_nlink > 1 and not os.path.isdir(os.path.join(root, name)):
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def _proc(pid: int, created: float | None, ticks: int | None = None) -> psutil.Process | None:
    """The live process ``pid`` if it is still the one we started (same start time), else None."""
    if not pid:
        return None
    try:
        proc = psutil.Process(pid)
        start = proc.create_time()
        if ticks is not None:  # a handle written before 0006: start time in clock ticks since boot
            clk = os.sysconf("SC_CLK_TCK")
            if abs(start - (psutil.boot_time() + ticks / clk)) > 1.5 / clk:
                return None
        elif created is None or abs(start - created) > 0.001:
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            try:  # our own child: reap it so it does not linger as a zombie
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            return None
        return proc
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def _signal(proc: psutil.Process | None, sig: int, *, group: bool = False) -> None:
    if proc is None:
        return
    try:
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
        pass


def _kill_group_leftovers(pgid: int) -> None:
    """Processes still in a finished plain run's group. Its leader is gone, but while any member
    lives the kernel keeps ``pgid`` from being reused, so every process in that group is ours."""
    for proc in psutil.process_iter():
        try:
            if proc.pid != pgid and os.getpgid(proc.pid) == pgid:
                proc.kill()
        except (ProcessLookupError, psutil.NoSuchProcess, psutil.AccessDenied):
            pass


def _chown_private(path: Path, uid: int | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o711)
    path.mkdir(exist_ok=True)
    if uid is not None:
        os.chown(path, uid, uid)
    os.chmod(path, 0o700)


def _read_json_object(fd: int, timeout_s: float) -> dict[str, Any]:
    buf, deadline = b"", time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise LaunchError("the sandbox did not start in time")
        chunk = os.read(fd, 4096)
        if not chunk:
            raise LaunchError("the sandbox exited while starting")
        buf += chunk
        try:
            value = json.loads(buf)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value


class LocalBackend:
    name = "local"

    def __init__(self, data_dir: Path, sandbox: SandboxOptions | None) -> None:
        self.data_dir = data_dir
        self.sandbox = sandbox
        self._lock = threading.Lock()
        self._launching: set[str] = set()
        self._blockers: dict[str, int] = {}  # run id → write end of its block pipe, until start
        self._pid_hits: dict[str, tuple[int, float | None]] = {}
        self._disk_checked: dict[str, float] = {}
        self._polls = 0

    # -- paths --------------------------------------------------------------------------------
    def _run_dir(self, log_key: str) -> Path:
        path = self.data_dir / "runs" / log_key
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        return path

    def _file(self, h: dict[str, Any], suffix: str) -> Path:
        return self.data_dir / "runs" / str(h["log"]) / f"{h['run']}.{suffix}"

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
        run_dir = self._run_dir(spec.log_key)
        exit_path = run_dir / f"{spec.run_id}.exit"
        for suffix in ("exit", "started", "reason"):
            (run_dir / f"{spec.run_id}.{suffix}").unlink(missing_ok=True)
        uid = spec.uid if self.sandbox is not None and self.sandbox.as_root else None
        for folder in (spec.workspace, spec.checkpoints):
            if folder is not None:
                _chown_private(folder, uid)
        spec = replace(spec, env=self._env(spec))
        with self._lock:
            self._launching.add(spec.run_id)
        logfd = os.open(run_dir / "output.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            if self.sandbox is None:
                return self._launch_plain(spec, exit_path, logfd)
            return self._launch_sandboxed(spec, self.sandbox, exit_path, logfd, uid)
        except BaseException:
            with self._lock:
                self._launching.discard(spec.run_id)
            raise
        finally:
            os.close(logfd)

    def _launch_plain(self, spec: RunSpec, exit_path: Path, logfd: int) -> str:
        """Unsandboxed (``--no-sandbox``): the command runs as the platform's own user."""
        block_r, block_w = os.pipe()
        outer = f'trap : TERM INT; exitf=$1; shift; read -r -u {block_r} go || exit 0; exec {block_r}<&-; "$@"; '
        env = {"PATH": os.environ.get("PATH", SAFE_PATH), "HOME": str(spec.workspace), **spec.env}
        try:
            proc = subprocess.Popen(
                ["/bin/bash", "-c", outer + _RECORD, "danlu-run", str(exit_path), *spec.command],
                cwd=spec.workspace,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=logfd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=(block_r,),
            )
        except OSError as exc:
            os.close(block_w)
            raise LaunchError(f"could not start the process: {exc}") from exc
        finally:
            os.close(block_r)
        with self._lock:
            self._blockers[spec.run_id] = block_w
        h = {"pid": proc.pid, "ct": psutil.Process(proc.pid).create_time(), "log": spec.log_key, "run": spec.run_id}
        h["exit"] = str(exit_path.relative_to(self.data_dir))
        return json.dumps(h, sort_keys=True)

    def _launch_sandboxed(self, spec: RunSpec, sb: SandboxOptions, exit_path: Path, logfd: int, uid: int | None) -> str:
        if spec.limits is None:
            raise LaunchError("a sandboxed run needs limits")
        limits = spec.limits
        if sb.cgroups is not None:
            sb.cgroups.create(spec.run_id, limits)
        entries = (
            bwrap.image_entries(Path("/"), bwrap.HOST_IMAGE_ENTRIES)
            if spec.image.kind == "host"
            else bwrap.image_entries(spec.image.path)
        )
        env = bwrap.environment(spec)
        args_fd = os.memfd_create("danlu-args", 0)
        os.write(args_fd, b"".join(a.encode() + b"\0" for a in bwrap.env_args(env)))
        os.lseek(args_fd, 0, os.SEEK_SET)
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe()
        exit_r, exit_w = os.pipe()  # closes when the supervisor ends: slirp4netns's cue to exit
        net: network.OutboundNetwork | None = None
        chain: list[str] = []
        if spec.network == "outbound":
            try:
                net = network.OutboundNetwork(exit_r, nft_rules(sb.own_addresses), exit_path.with_suffix(".net.log"))
            except (OSError, subprocess.TimeoutExpired) as exc:
                for fd in (args_fd, info_r, info_w, block_r, block_w, exit_r, exit_w):
                    os.close(fd)
                if sb.cgroups is not None:
                    sb.cgroups.remove(spec.run_id)
                raise LaunchError(f"could not start the sandbox's network: {exc}") from exc
            chain += ["nsenter", f"--net={net.path}", "--"]
        if uid is not None:
            chain += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs", "--"]
        else:
            chain += ["setpriv", "--no-new-privs", "--"]
        rlimits = [f"--fsize={limits.disk_bytes}"]  # one file (the output log too) never outgrows the disk limit
        if sb.cgroups is None:
            rlimits.append(f"--as={limits.memory_bytes}")
            if uid is not None:  # counted per uid: only a renter's own uid makes it a per-renter limit
                rlimits.append(f"--nproc={limits.pids}")
        chain += ["prlimit", *rlimits, "--"]
        bargs = bwrap.bwrap_args(
            spec, entries, args_fd=args_fd, info_fd=info_w, block_fd=block_r, tmp_bytes=sb.tmp_bytes
        )
        argv = [*chain, "bwrap", *bargs]
        outer = f'trap : TERM INT; exitf=$1; shift; "$@" {block_w}>&- {exit_w}>&-; '
        proc: subprocess.Popen[bytes] | None = None
        try:
            proc = subprocess.Popen(
                ["/bin/bash", "-c", outer + _RECORD, "danlu-run", str(exit_path), *argv],
                cwd="/",
                env={"PATH": SAFE_PATH},
                stdin=subprocess.DEVNULL,
                stdout=logfd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=(args_fd, info_w, block_r, block_w, exit_w),
            )
            for fd in (args_fd, info_w, block_r, exit_w):
                os.close(fd)
            args_fd = info_w = block_r = exit_w = -1
            info = _read_json_object(info_r, 10.0)
            init = int(info["child-pid"])
            if sb.cgroups is not None:
                sb.cgroups.attach(spec.run_id, init)
        except (OSError, LaunchError, NetworkError, KeyError, ValueError) as exc:
            if proc is not None:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            if sb.cgroups is not None:
                sb.cgroups.remove(spec.run_id)
            os.close(block_w)
            tail = self.read_output(spec.log_key, 0)[0].strip().splitlines()[-1:]
            raise LaunchError(f"could not start the sandbox: {exc}{' — ' + tail[0] if tail else ''}") from exc
        finally:
            for fd in (args_fd, info_w, block_r, exit_w, info_r, exit_r):
                if fd != -1:
                    os.close(fd)
            if net is not None:  # the run is in the namespace now (or gone): it keeps it alive
                net.release_holder()
        with self._lock:
            self._blockers[spec.run_id] = block_w
        h: dict[str, Any] = {"pid": proc.pid, "ct": psutil.Process(proc.pid).create_time(), "sb": True}
        h.update(log=spec.log_key, run=spec.run_id, exit=str(exit_path.relative_to(self.data_dir)))
        h.update(init=init, ict=psutil.Process(init).create_time(), cg=sb.cgroups is not None)
        h.update(ws=str(spec.workspace), disk=limits.disk_bytes, mem=limits.memory_bytes, pids=limits.pids)
        return json.dumps(h, sort_keys=True)

    def start(self, handle: str) -> None:
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

    # -- state --------------------------------------------------------------------------------
    def poll(self, handles: Sequence[str]) -> dict[str, RunState]:
        out = {handle: self._state(json.loads(handle)) for handle in handles}
        self._polls += 1
        if self.sandbox is not None and self.sandbox.cgroups is not None and self._polls % 60 == 1:
            self._sweep({json.loads(handle)["run"] for handle in handles})
        return out

    def _state(self, h: dict[str, Any]) -> RunState:
        outer = _proc(h["pid"], h.get("ct"), h.get("ticks"))
        if outer is not None:
            if h.get("sb") and not self._file(h, "started").exists() and not self.launching(h["run"]):
                self.kill(json.dumps(h))
                return RunState("lost", reason="the server stopped before the command started")
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
        workspace's disk use. A violation ends the sandbox with the reason recorded."""
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
        if not reason and now - self._disk_checked.get(run, 0.0) >= self.sandbox.disk_check_s:
            self._disk_checked[run] = now
            used = _du(Path(h["ws"]))
            if used > h["disk"]:
                reason = (
                    f"disk limit: the workspace used {used >> 20} MiB of its {h['disk'] >> 20} MiB, so the sandbox "
                    "was stopped; remove files (start it and delete them) or rent more GPUs for more disk"
                )
        if reason:
            self._file(h, "reason").write_text(reason + "\n")
            _signal(_proc(h["init"], h["ict"]), signal.SIGKILL)  # the supervisor records the end

    # -- signals ------------------------------------------------------------------------------
    def terminate(self, handle: str) -> None:
        h = json.loads(handle)
        outer = _proc(h["pid"], h.get("ct"), h.get("ticks"))
        if outer is None:
            return
        if not h.get("sb"):
            _signal(outer, signal.SIGTERM, group=True)
            return
        if not self._file(h, "started").exists():
            self.kill(handle)  # never started: there is nothing to shut down gracefully
            return
        init = _proc(h["init"], h["ict"])
        if init is None:
            return
        try:
            workload = init.children(recursive=True)  # every process of the sandbox but its init
        except psutil.NoSuchProcess:
            return
        for proc in workload:
            _signal(proc, signal.SIGTERM)

    def kill(self, handle: str) -> None:
        h = json.loads(handle)
        with self._lock:
            fd = self._blockers.pop(h["run"], -1)
            self._launching.discard(h["run"])
        if fd != -1:
            os.close(fd)
        if h.get("sb"):
            # The sandbox's init: when it dies the kernel kills every process in its PID namespace.
            _signal(_proc(h["init"], h["ict"]), signal.SIGKILL)
        outer = _proc(h["pid"], h.get("ct"), h.get("ticks"))
        if outer is not None:
            _signal(outer, signal.SIGKILL, group=True)
        elif not h.get("sb"):
            _kill_group_leftovers(h["pid"])

    def release(self, handle: str) -> None:
        h = json.loads(handle)
        if h.get("cg") and self.sandbox is not None and self.sandbox.cgroups is not None:
            self.sandbox.cgroups.remove(h["run"])  # if processes linger, the next sweep retries
        for suffix in ("started", "reason", "net.log"):
            self._file(h, suffix).unlink(missing_ok=True)
        (self.data_dir / h["exit"]).unlink(missing_ok=True)
        self._pid_hits.pop(h["run"], None)
        self._disk_checked.pop(h["run"], None)

    def discard(self, run_id: str) -> None:
        for proc in psutil.process_iter(["cmdline"]):
            cmd = proc.info.get("cmdline") or []
            if len(cmd) > 4 and cmd[3] == "danlu-run" and cmd[4].endswith(f"/{run_id}.exit"):
                _signal(proc, signal.SIGKILL, group=True)
        if self.sandbox is not None and self.sandbox.cgroups is not None:
            self.sandbox.cgroups.remove(run_id)

    def _sweep(self, active: set[str]) -> None:
        assert self.sandbox is not None and self.sandbox.cgroups is not None
        for name in self.sandbox.cgroups.names():
            if name not in active and not self.launching(name) and not self.sandbox.cgroups.procs(name):
                self.sandbox.cgroups.remove(name)

    # -- output -------------------------------------------------------------------------------
    def read_output(self, log_key: str, offset: int, limit: int = 1 << 20) -> tuple[str, int]:
        """A chunk of a run's captured stdout/stderr from byte ``offset``; returns (text, next
        offset). Invalid UTF-8 is replaced, never an error."""
        if not 0 <= offset <= MAX_OFFSET:
            raise InvalidInput("invalid_offset", "offset must be a byte offset between 0 and 2^62")
        try:
            with open(self.data_dir / "runs" / log_key / "output.log", "rb") as f:
                f.seek(offset)
                data = f.read(limit)
        except FileNotFoundError:
            return "", offset
        return data.decode("utf-8", errors="replace"), offset + len(data)
