"""``danlu --version`` (issue 28): what an operator pastes into a bug report, the same string the
server reports in ``/healthz`` and ``danlu_build_info``."""

from __future__ import annotations

import platform
import subprocess
import sys

from danlu import __version__


def test_version_prints_the_package_version_and_python() -> None:
    argv = [sys.executable, "-m", "danlu.cli.main", "--version"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"danlu {__version__} (Python {platform.python_version()})\n"
