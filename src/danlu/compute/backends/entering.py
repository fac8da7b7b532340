"""Starting a session's process inside a local run: the server side of
danlu.compute.sandbox.enter (which explains the order of privileges). The helper is held on a
block pipe until it is in the run's cgroup, as a run's own command is until it is recorded."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from danlu.backend import EnterError, EnterRequest
from danlu.compute.backends.procs import live_process
from danlu.compute.backends.spawn import SandboxOptions
from danlu.compute.sandbox.helpers import helper

HELPER = Path(__file__).resolve().parent.parent / "sandbox" / "enter.py"


def _ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rindex(b")") + 2 :].split()[19])


def _rlimits(h: dict[str, Any], sb: SandboxOptions) -> dict[str, tuple[int, int]]:
    """The run's own rlimits (danlu.compute.backends.spawn), for the session's processes too."""
    nofile = min(sb.nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    out = {"RLIMIT_FSIZE": (h["disk"], h["disk"]), "RLIMIT_CORE": (0, 0), "RLIMIT_NOFILE": (nofile, nofile)}
    if not h.get("cg"):
        out["RLIMIT_AS"] = (h["mem"], h["mem"])
        out["RLIMIT_NPROC"] = (h["pids"], h["pids"])
    return out


def _wait_built(init_pid: int, timeout_s: float = 10.0) -> None:
    """bubblewrap names its child (the sandbox's init) before the child has built the sandbox's file system: a
    session joining its mount namespace then would find the host's tree there, or bubblewrap's half-built
    staging root, without /workspace (a files request right after a rental started failed so; an exec right
    after one exited 125). Wait until the child's root is its own and holds /workspace: bubblewrap binds everything
    into the new root before it moves into it."""
    host = os.stat("/")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            root = os.stat(f"/proc/{init_pid}/root")
            built = (root.st_dev, root.st_ino) != (host.st_dev, host.st_ino) and os.path.isdir(
                f"/proc/{init_pid}/root/workspace"
            )
        except OSError as exc:
            raise EnterError("the run has ended") from exc
        if built:
            return
        if time.monotonic() > deadline:
            raise EnterError("the sandbox is still being built; try again in a few seconds")
        time.sleep(0.02)


def enter_sandbox(h: dict[str, Any], sb: SandboxOptions, request: EnterRequest) -> subprocess.Popen[bytes]:
    """``request`` in the sandbox of the run whose handle is ``h`` (the local backend's)."""
    if not sb.as_root or os.geteuid() != 0:
        raise EnterError("sessions into a sandbox need a root server (it joins the sandbox's namespaces)")
    init = live_process(h["init"], h["ict"])
    if init is None or live_process(h["pid"], h.get("ct"), h.get("ticks")) is None:
        raise EnterError("the run has ended")
    try:
        uid, ticks = init.uids().real, _ticks(init.pid)
    except (psutil.Error, OSError, ValueError) as exc:
        raise EnterError("the run has ended") from exc
    _wait_built(init.pid)
    block_r, block_w = os.pipe()
    spec = {"init": init.pid, "init_ticks": ticks, "uid": uid, "keyring": sb.keyring, "cwd": "/workspace"}
    spec |= {"argv": request.command, "env": request.env, "tty": request.tty, "block_fd": block_r}
    spec["rlimits"] = _rlimits(h, sb)
    if request.die_with_parent:
        spec["parent"] = os.getpid()
    back = () if request.terminal_back is None or not request.tty else (request.terminal_back,)
    if back:
        spec["terminal_back"] = back[0]
    # The spec (the renter's environment: secrets) goes through a memfd, never the command line,
    # which every local user can read in /proc (as a run's bubblewrap arguments do, spawn.py).
    spec_fd = os.memfd_create("danlu-enter", 0)
    os.write(spec_fd, json.dumps(spec).encode())
    os.lseek(spec_fd, 0, os.SEEK_SET)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(HELPER), str(spec_fd)],
            stdin=request.stdio[0],
            stdout=request.stdio[1],
            stderr=request.stdio[2],
            env={},
            cwd="/",
            pass_fds=(block_r, spec_fd, *back),
            start_new_session=True,
        )
    except OSError as exc:
        os.close(block_w)
        raise EnterError(f"could not start the session: {exc}") from exc
    finally:
        os.close(block_r)
        os.close(spec_fd)
    try:
        if h.get("cg") and sb.cgroups is not None:
            sb.cgroups.attach(h["run"], proc.pid)
        os.write(block_w, b"go\n")
    except OSError as exc:
        proc.kill()
        proc.wait()
        raise EnterError(f"could not put the session into the run's cgroup: {exc}") from exc
    finally:
        os.close(block_w)
    return proc


def enter_plain(h: dict[str, Any], request: EnterRequest) -> subprocess.Popen[bytes]:
    """``--no-sandbox``: a plain process of the platform's user in the run's workspace, as the run is."""
    if live_process(h["pid"], h.get("ct"), h.get("ticks")) is None:
        raise EnterError("the run has ended")
    command = request.command
    if request.tty:  # a session of its own with the terminal as its controlling one (util-linux setsid)
        command = [helper("setsid") or "setsid", "--ctty", *command]
    try:
        return subprocess.Popen(
            command,
            stdin=request.stdio[0],
            stdout=request.stdio[1],
            stderr=request.stdio[2],
            env=request.env,
            cwd=h.get("ws") or "/",
            start_new_session=not request.tty,
        )
    except OSError as exc:
        raise EnterError(f"could not start {request.command[0]!r}: {exc.strerror}") from exc
