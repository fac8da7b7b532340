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


def test_a_process_in_its_own_root_is_joined_at_once() -> None:
    require_sandbox()
    built = subprocess.Popen(
        [
            "bwrap",
            "--unshare-all",
            "--ro-bind",
            "/usr",
            "/usr",
            "--symlink",
            "usr/bin",
            "/bin",
            "--symlink",
            "usr/lib",
            "/lib",
            "--symlink",
            "usr/lib64",
            "/lib64",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--dir",
            "/workspace",
            "--",
            "sleep",
            "30",
        ]
    )
    try:
        for _ in range(500):  # its child pivots into the new root in milliseconds; the guard judges the root
            children = subprocess.run(["pgrep", "-P", str(built.pid)], capture_output=True, text=True).stdout.split()
            if children:
                break
            time.sleep(0.02)
        child = int(children[0]) if children else built.pid
        _wait_built(child, timeout_s=10)  # returns: its root is the sandbox's
    finally:
        built.kill()
        built.wait()
