"""A session joins a sandbox only once bubblewrap has built its file system (danlu.compute.backends.entering
._wait_built): bubblewrap names its child before the child has pivoted into the sandbox's root, and a files
request right after a rental started once joined the host's tree there ("No such file or directory:
'/workspace'"). Judged from the process's root, not from timing."""

from __future__ import annotations

import subprocess
import time

import pytest

from danlu.backend import EnterError
from danlu.compute.backends.entering import _wait_built
from tests.conftest import require_sandbox


def test_a_process_still_on_the_hosts_root_is_not_joined() -> None:
    on_host = subprocess.Popen(["sleep", "30"])  # what bubblewrap's child is before it pivots
    try:
        with pytest.raises(EnterError, match="still being built"):
            _wait_built(on_host.pid, timeout_s=0.3)
    finally:
        on_host.kill()
        on_host.wait()


def _sandboxed(*extra: str) -> tuple[subprocess.Popen[bytes], int]:
    """A bubblewrap sandbox running ``sleep`` and its child (the sandbox's init, as a run's handle names it)."""
    require_sandbox()
    usr = ["--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib"]
    usr += ["--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev"]
    built = subprocess.Popen(["bwrap", "--unshare-all", *usr, *extra, "--", "sleep", "30"])
    for _ in range(500):  # its child pivots into the new root in milliseconds; the guard judges the root
        children = subprocess.run(["pgrep", "-P", str(built.pid)], capture_output=True, text=True).stdout.split()
        if children:
            break
        time.sleep(0.02)
    return built, int(children[0]) if children else built.pid


def test_a_process_in_its_own_root_is_joined_at_once() -> None:
    built, child = _sandboxed("--dir", "/workspace")
    try:
        _wait_built(child, timeout_s=10)  # returns: its root is the sandbox's
    finally:
        built.kill()
        built.wait()


def test_a_root_of_its_own_without_the_workspace_is_not_joined() -> None:
    """bubblewrap first moves into a staging root of its own, binds the sandbox's tree into it, then moves
    again: a root that is not the host's is not yet the sandbox's (an exec there exited 125)."""
    built, child = _sandboxed()
    try:
        with pytest.raises(EnterError, match="still being built"):
            _wait_built(child, timeout_s=0.3)
    finally:
        built.kill()
        built.wait()
