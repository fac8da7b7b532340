"""Spawning a run's process tree: the platform's supervisor, and (sandboxed) the chain
``[nsenter] → prlimit → setpriv → [keyctl session] → bwrap`` with the command held back on a
block pipe until the platform lets it go (danlu.compute.backends.local explains the life cycle;
docs/security.md what the sandbox sees)."""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from danlu.backend import LaunchError, RunSpec
from danlu.compute.sandbox import bwrap, driver, network
from danlu.compute.sandbox.cgroups import Cgroups
from danlu.compute.sandbox.helpers import SAFE_PATH, helper
from danlu.compute.sandbox.network import NetworkError, host_addresses, nft_rules

# The supervisor's epilogue: the exit status, atomically (the file's mtime is when the run ended);
# then its whole process group goes, itself included: a sandbox whose outer bubblewrap died before
# the inner one could die with its parent (the server killed mid-launch) is never left behind.
RECORD = 'rc=$?; printf "%s\\n" "$rc" > "$exitf.tmp" && mv -f "$exitf.tmp" "$exitf"; kill -KILL 0'


@dataclass
class SandboxOptions:
    """How this host sandboxes runs (decided once at start-up, see danlu.compute.sandbox.probe)."""

    cgroups: Cgroups | None  # None: rlimits and the disk-usage check only
    as_root: bool  # the server is root: each renter runs under its own uid
    network: str = "none"  # the effective policy: none | outbound | host
    tmp_bytes: int = 1 << 30  # size cap of /tmp, /dev/shm and /run inside a sandbox
    disk_check_s: float = 15.0
    # image: each workspace is an ext4 file system of its limit's size (the kernel stops writes past it,
    # danlu.compute.sandbox.volume); watch: the disk watcher alone measures it every disk_check_s
    disk: str = "watch"
    # where each workspace's key is kept (danlu.compute.sandbox.crypt), and whether new workspaces are
    # encrypted (``--encrypt-workspaces``); workspaces encrypted before stay so either way
    keys: Path | None = None
    encrypt: bool = False
    # the host's NVIDIA driver files (host path, path in the sandbox), bound into a registered image's runs
    # that have GPUs (danlu.compute.sandbox.driver); none where the host has no driver
    driver: tuple[tuple[str, str], ...] = ()
    fork_bomb_s: float = 10.0
    own_addresses: list[str] = field(default_factory=host_addresses)
    # keyutils' keyctl: each run joins a session keyring of its own (else every sandbox would share
    # the server's session keyring, and read and change each other's keys and root's).
    keyring: bool = field(default_factory=lambda: helper("keyctl") is not None)
    nofile: int = 65536


def write_overlays(spec: RunSpec, entries: list[bwrap.Entry], uid: int | None) -> list[tuple[Path, str]]:
    """Platform-written files bound over the image's: /etc/passwd and /etc/group naming the
    renter's uid, and for ``outbound`` an /etc/resolv.conf pointing at slirp's resolver — where the
    image has them as plain files (a mount point must exist in a read-only image)."""
    files = bwrap.passwd_files(uid)
    if spec.network == "outbound":
        files["resolv.conf"] = f"nameserver {network.SLIRP_DNS}\n"
    present = {e.name for e in entries if e.symlink_target is None}
    etc_dir = spec.image.path / "etc" if spec.image.kind == "rootfs" else None
    out = []
    for name, text in files.items():
        if spec.image.kind == "host":
            if f"etc/{name}" not in present:
                continue
        elif etc_dir is None or "etc" not in present or not (etc_dir / name).is_file() or (etc_dir / name).is_symlink():
            continue
        path = spec.control_dir / name
        path.write_text(text)
        os.chmod(path, 0o644)
        out.append((path, f"/etc/{name}"))
    return out


def read_json_object(fd: int, timeout_s: float) -> dict[str, Any]:
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


def spawn_plain(spec: RunSpec, exit_path: Path, logfd: int) -> tuple[int, int]:
    """Unsandboxed (``--no-sandbox``): the command runs as the platform's own user, held until a
    byte arrives on the returned block pipe. Returns (supervisor pid, block pipe)."""
    block_r, block_w = os.pipe()
    outer = f'trap : TERM INT; exitf=$1; shift; read -r -u {block_r} go || exit 0; exec {block_r}<&-; "$@"; '
    env = {"PATH": os.environ.get("PATH", SAFE_PATH), "HOME": str(spec.workspace), **spec.env}
    try:
        proc = subprocess.Popen(
            ["/bin/bash", "-c", outer + RECORD, "danlu-run", str(exit_path), *spec.command],
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
    return proc.pid, block_w


def spawn_sandboxed(
    spec: RunSpec, sb: SandboxOptions, exit_path: Path, logfd: int, uid: int | None
) -> tuple[int, int, int]:
    """The sandboxed run, its command held on the block pipe. Returns (supervisor pid, block
    pipe, the sandbox's init pid)."""
    if spec.limits is None:
        raise LaunchError("a sandboxed run needs limits")
    limits = spec.limits
    if sb.cgroups is not None:
        sb.cgroups.create(spec.run_id, limits)
    entries = bwrap.host_image_entries() if spec.image.kind == "host" else bwrap.image_entries(spec.image.path)
    overlays = write_overlays(spec, entries, uid)
    drv = sb.driver if driver.applies(spec) else ()  # the host's GPU driver, for an image not the host's
    env = driver.environment(bwrap.environment(spec)) if drv else bwrap.environment(spec)
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    exit_r, exit_w = os.pipe()  # closes when the supervisor ends: slirp4netns's cue to exit
    net: network.OutboundNetwork | None = None
    chain: list[str] = []
    if spec.network == "outbound":
        try:
            net = network.OutboundNetwork(exit_r, nft_rules(sb.own_addresses), exit_path.with_suffix(".net.log"))
        except (OSError, subprocess.TimeoutExpired) as exc:
            for fd in (info_r, info_w, block_r, block_w, exit_r, exit_w):
                os.close(fd)
            if sb.cgroups is not None:
                sb.cgroups.remove(spec.run_id)
            raise LaunchError(f"could not start the sandbox's network: {exc}") from exc
        chain += ["nsenter", f"--net={net.path}", "--"]
        if sb.cgroups is not None:  # its CPU and memory are the renter's, not the host's
            sb.cgroups.attach(spec.run_id, net.slirp_pid)
    # Set as root, kept across setpriv. One file (the output log too) never outgrows the disk
    # limit; no core dumps to the host's helpers.
    nofile = min(sb.nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1])  # never above our own
    rlimits = [f"--fsize={limits.disk_bytes}", "--core=0", f"--nofile={nofile}"]
    if sb.cgroups is None:
        rlimits.append(f"--as={limits.memory_bytes}")
        if uid is not None:  # counted per uid: only a renter's own uid makes it a per-renter limit
            rlimits.append(f"--nproc={limits.pids}")
    chain += ["prlimit", *rlimits, "--"]
    if uid is not None:
        chain += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs", "--"]
    else:
        chain += ["setpriv", "--no-new-privs", "--"]
    options = bwrap.bwrap_args(
        spec, entries, overlays=overlays, binds=drv, info_fd=info_w, block_fd=block_r, tmp_bytes=sb.tmp_bytes
    )
    args_fd = os.memfd_create("danlu-args", 0)
    os.write(args_fd, b"".join(a.encode() + b"\0" for a in [*bwrap.env_args(env), *options]))
    os.lseek(args_fd, 0, os.SEEK_SET)
    if sb.keyring:  # only keyctl's "Joined session keyring" notice goes nowhere; stderr comes back after
        stash = 1 + max(info_r, info_w, block_r, block_w, exit_r, exit_w, args_fd)  # an fd bwrap is not given
        chain += ["bash", "-c", f'exec {stash}>&2 2>/dev/null; exec "$@"', "danlu-quiet"]
        chain += ["keyctl", "session", "-", "bash", "-c", f'exec 2>&{stash} {stash}>&-; exec "$@"', "danlu-keyring"]
    argv = [*chain, "bwrap", "--args", str(args_fd), "--", *spec.command]
    outer = f'trap : TERM INT; exitf=$1; shift; "$@" {block_w}>&- {exit_w}>&-; '
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc = subprocess.Popen(
            ["/bin/bash", "-c", outer + RECORD, "danlu-run", str(exit_path), *argv],
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
        info = read_json_object(info_r, 10.0)
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
        raise LaunchError(f"could not start the sandbox: {exc}") from exc
    finally:
        for fd in (args_fd, info_w, block_r, exit_w, info_r, exit_r):
            if fd != -1:
                os.close(fd)
        if net is not None:  # the run is in the namespace now (or gone): it keeps it alive
            net.release_holder()
    return proc.pid, block_w, init
