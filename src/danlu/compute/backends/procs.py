"""Process identity and signals for the local backend: a process is (pid, start time), so a
recycled pid is never mistaken for a run's (psutil, not hand-parsed /proc)."""

from __future__ import annotations

import os

import psutil


def live_process(pid: int, created: float | None, ticks: int | None = None) -> psutil.Process | None:
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


def send(proc: psutil.Process | None, sig: int, *, group: bool = False) -> None:
    if proc is None:
        return
    try:
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
        pass


def kill_group_leftovers(pgid: int) -> None:
    """Processes still in a finished plain run's group. Its leader is gone, but while any member
    lives the kernel keeps ``pgid`` from being reused, so every process in that group is ours."""
    for proc in psutil.process_iter():
        try:
            if proc.pid != pgid and os.getpgid(proc.pid) == pgid:
                proc.kill()
        except (ProcessLookupError, psutil.NoSuchProcess, psutil.AccessDenied):
            pass
