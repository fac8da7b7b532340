"""``danlu admin systemd-unit``: a systemd service for ``danlu server --config FILE`` (issue 28).

The choices, each for a reason an operator would otherwise find out the hard way:

* ``KillMode=process``: a stop or restart signals the server alone. Renters' runs are the server's
  children and live in cgroups below its own (danlu.compute.sandbox.cgroups); the default
  ``control-group`` would kill every rental on ``systemctl restart danlu``, while a restarted server
  adopts its runs (docs/architecture.md, "restart"). Stopping rentals is ``danlu stop``'s job.
* ``Delegate=yes``: the server creates those cgroups (memory, pids, cpu limits) below its own.
* ``User=root``: renters get uids of their own and network namespaces (docs/security.md); the
  server's own files are private (umask 077), and a renter's code never runs as root.
* ``ExecStartPost`` (``danlu admin wait-ready``) waits for ``/readyz``, so ``systemctl start``
  returns once rentals can start and units ordered after it see a ready server;
  ``Restart=on-failure`` brings it back after a crash.
* The config file's settings stay in the file (``db_file`` for the database password): nothing
  secret is on the command line or in the unit. ``StandardOutput=journal``: the first start names
  the admin token's file, not the token (stdout is not a terminal).

Pure: the text only; ``systemd-analyze verify`` checks it in the tests."""

from __future__ import annotations

import shlex
from pathlib import Path

UNIT = """\
[Unit]
Description=danlu GPU rental platform
Documentation=file://{docs}
After=network-online.target postgresql.service
Wants=network-online.target

[Service]
Type=exec
User=root
Environment=PYTHONUNBUFFERED=1
ExecStart={exec_start}
ExecStartPost={wait_ready}
TimeoutStartSec=180
Restart=on-failure
RestartSec=5
KillMode=process
Delegate=yes
TimeoutStopSec=30
LimitNOFILE=1048576
StandardOutput=journal
StandardError=journal

[Install]
WantedBy=multi-user.target
"""


def unit(danlu: Path, config: Path, url: str, docs: Path) -> str:
    """The unit's text. ``danlu``: the command's path (the virtual environment's); ``url``: where
    the server answers on this machine (its readiness is waited for there)."""
    wait = [str(danlu), "admin", "wait-ready", "--url", url.rstrip("/"), "--timeout", "170"]
    return UNIT.format(
        docs=docs, exec_start=_exec(str(danlu), "server", "--config", str(config)), wait_ready=_exec(*wait)
    )


def _exec(*argv: str) -> str:
    """An ``Exec*=`` line's command: each argument in double quotes where it needs them, ``%`` and
    ``$`` doubled (systemd's specifiers and variables)."""
    out = []
    for arg in argv:
        quoted = shlex.quote(arg)
        quoted = '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"' if quoted != arg else arg
        out.append(quoted.replace("%", "%%").replace("$", "$$"))
    return " ".join(out)
