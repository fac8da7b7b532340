"""The sandbox's helpers are looked up where launches run them.

A launch runs ``prlimit → setpriv → keyctl → bwrap`` (and the network's ``slirp4netns``, ``nft`` …)
with a fixed PATH (``spawn.SAFE_PATH``), never the server's own. The start-up probe must find them
on that same PATH: on the first real-GPU machine the probe found a ``bwrap`` in a folder of the
server's PATH that launches do not search, reported the sandbox working, and every rental then
failed with ``setpriv: failed to execute bwrap: No such file or directory``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from danlu.compute.backends import spawn
from danlu.compute.sandbox import helpers, network, probe
from tests.conftest import require_sandbox


def _shim(folder: Path, name: str, exit_code: int) -> None:
    f = folder / name
    f.write_text(f"#!/bin/sh\nexit {exit_code}\n")
    f.chmod(0o755)


def test_probe_and_launch_use_the_same_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_sandbox()
    # The server's PATH holds only a broken bwrap and no keyctl; launches never look there.
    _shim(tmp_path, "bwrap", 1)
    monkeypatch.setenv("PATH", str(tmp_path))
    ok, detail = probe.bwrap_works(as_root=False)
    assert ok, f"the probe judged a bwrap that launches never run: {detail}"
    real_keyctl = shutil.which("keyctl", path=spawn.SAFE_PATH) is not None
    assert spawn.SandboxOptions(cgroups=None, as_root=False).keyring == real_keyctl
    assert helpers.helper("bwrap") == shutil.which("bwrap", path=spawn.SAFE_PATH)
    assert network._ENV["PATH"] == spawn.SAFE_PATH


def test_a_helper_installed_under_usr_local_is_found_and_run(tmp_path: Path) -> None:
    """Operators install tools under /usr/local (root-owned, as /usr): launches search it too."""
    assert spawn.SAFE_PATH.split(":")[:2] == ["/usr/local/sbin", "/usr/local/bin"]
