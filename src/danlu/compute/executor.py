"""The local executor: runs an instance's command as its own process group on this host.

The command runs under a tiny ``/bin/sh`` wrapper that is the group leader. The wrapper waits for
the command, then writes its exit status to ``RUN_DIR/exit`` (atomically, via rename); the file's
mtime is the moment the command ended, so billing can end exactly then even if the control loop
notices a second later, and even if the server was down when it happened. A SIGKILL of the group
leaves no exit file: that is how a lost process is told apart from one that finished.

A process is identified by (pid, start time in clock ticks from /proc/PID/stat), so a recycled
pid is never mistaken for the instance's process after a server restart.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from danlu.core.errors import InvalidInput

# `trap : TERM INT` keeps the wrapper alive long enough to record the child's status when the
# group is signalled (a trap action, unlike an ignored signal, is not inherited by the child).
WRAPPER = (
    'trap : TERM INT; "$@"; rc=$?; '
    'printf "%s\\n" "$rc" > "$DANLU_RUN_DIR/exit.tmp" && mv -f "$DANLU_RUN_DIR/exit.tmp" "$DANLU_RUN_DIR/exit"'
)


@dataclass(frozen=True)
class LaunchSpec:
    command: list[str]
    workspace: Path
    run_dir: Path
    env: dict[str, str]


@dataclass(frozen=True)
class ProcessRef:
    pid: int
    start_ticks: int


@dataclass(frozen=True)
class ExitInfo:
    code: int
    ended_ms: int


class Executor(Protocol):
    def launch(self, spec: LaunchSpec) -> ProcessRef: ...
    def alive(self, ref: ProcessRef) -> bool: ...
    def exit_info(self, run_dir: Path) -> ExitInfo | None: ...
    def signal_group(self, ref: ProcessRef, sig: int) -> None: ...


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def read_output(run_dir: Path, offset: int, limit: int = 1 << 20) -> tuple[str, int]:
    """A chunk of a run's captured stdout/stderr (``run_dir/output.log``) from byte ``offset``;
    returns (text, next offset). Invalid UTF-8 is replaced, never an error."""
    if offset < 0:
        raise InvalidInput("invalid_offset", "offset must be 0 or more")
    try:
        with open(run_dir / "output.log", "rb") as f:
            f.seek(offset)
            data = f.read(limit)
    except FileNotFoundError:
        return "", offset
    return data.decode("utf-8", errors="replace"), offset + len(data)


class LocalExecutor:
    """Processes on this machine. Linux only (reads /proc)."""

    def launch(self, spec: LaunchSpec) -> ProcessRef:
        spec.workspace.mkdir(parents=True, exist_ok=True)
        spec.run_dir.mkdir(parents=True, exist_ok=True)
        (spec.run_dir / "exit").unlink(missing_ok=True)
        env = {**os.environ, **spec.env, "DANLU_RUN_DIR": str(spec.run_dir)}
        with open(spec.run_dir / "output.log", "ab") as log:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", WRAPPER, "danlu-run", *spec.command],
                cwd=spec.workspace,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        fields = _stat_fields(proc.pid)
        start_ticks = int(fields[19]) if fields else 0
        return ProcessRef(pid=proc.pid, start_ticks=start_ticks)

    def alive(self, ref: ProcessRef) -> bool:
        fields = _stat_fields(ref.pid)
        if fields is None:
            return False
        if int(fields[19]) != ref.start_ticks:
            return False  # the pid was recycled by another process
        if fields[0] in ("Z", "X"):
            try:  # our own child: reap it so it does not linger as a zombie
                os.waitpid(ref.pid, os.WNOHANG)
            except ChildProcessError:
                pass
            return False
        return True

    def exit_info(self, run_dir: Path) -> ExitInfo | None:
        path = run_dir / "exit"
        try:
            text = path.read_text().strip()
            mtime_ns = path.stat().st_mtime_ns
        except FileNotFoundError:
            return None
        try:
            code = int(text)
        except ValueError:
            return None
        return ExitInfo(code=code, ended_ms=mtime_ns // 1_000_000)

    def signal_group(self, ref: ProcessRef, sig: int) -> None:
        if not self.alive(ref) and sig != signal.SIGKILL:
            return
        try:
            os.killpg(ref.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
