"""Entry point of the ``danlu`` command. Each capability registers its commands from its own module. A command
line imports only the modules its command needs (``COMMANDS``): ``danlu offers`` does not import the simulator,
the advisor and twenty other modules (issue 29; benchmarks/cli_start.py). ``app`` — what the tests drive, and
what ``danlu --help`` or a mistyped command gets — has every command."""

from __future__ import annotations

import importlib
import sys

import typer

from danlu import __version__

# Each module defines ``register(app: typer.Typer) -> None``. One line per capability.
COMMAND_MODULES = [
    "danlu.cli.server_cmd",
    "danlu.cli.account_cmds",
    "danlu.cli.admin_cmds",
    "danlu.cli.maintenance_cmds",
    "danlu.cli.operator_cmds",
    "danlu.cli.instance_cmds",
    "danlu.cli.job_cmds",
    "danlu.cli.simulate_cmds",
    "danlu.cli.advisor_cmds",
    "danlu.cli.team_cmds",
    "danlu.cli.voucher_cmds",
    "danlu.cli.billing_cmds",
    "danlu.cli.budget_cmds",
    "danlu.cli.student_cmds",
    "danlu.cli.tariff_cmds",
    "danlu.cli.storage_cmds",
    "danlu.cli.hold_cmds",
    "danlu.cli.telemetry_cmds",
    "danlu.cli.webhook_cmds",
    "danlu.cli.schedule_cmds",
    "danlu.cli.session_cmds",
    "danlu.cli.copy_cmds",
    "danlu.cli.snapshot_cmds",
    # -- capability command modules above this line --
]

# The modules each top-level command needs, in registering order (several add to one group: `admin`, `job`).
# tests/cli/test_lazy_commands.py rebuilds it from the modules and fails when it is not this.
COMMANDS: dict[str, tuple[str, ...]] = {
    "admin": (
        "admin_cmds",
        "maintenance_cmds",
        "operator_cmds",
        "voucher_cmds",
        "billing_cmds",
        "student_cmds",
        "tariff_cmds",
        "storage_cmds",
        "hold_cmds",
    ),
    "advise": ("advisor_cmds",),
    "balance": ("account_cmds",),
    "budget": ("budget_cmds",),
    "compare": ("advisor_cmds",),
    "config": ("server_cmd",),
    "cost": ("billing_cmds",),
    "cp": ("copy_cmds",),
    "events": ("instance_cmds",),
    "exec": ("session_cmds",),
    "forward": ("session_cmds",),
    "hold": ("hold_cmds",),
    "holds": ("hold_cmds",),
    "images": ("instance_cmds",),
    "invoice": ("billing_cmds",),
    "invoices": ("billing_cmds",),
    "job": (
        "job_cmds",
        "session_cmds",
    ),
    "jobs": ("job_cmds",),
    "key": ("session_cmds",),
    "ledger": ("account_cmds",),
    "login": ("account_cmds",),
    "logs": ("instance_cmds",),
    "offers": ("account_cmds",),
    "password": ("account_cmds",),
    "plans": ("hold_cmds",),
    "port": ("session_cmds",),
    "prices": ("advisor_cmds",),
    "ps": ("instance_cmds",),
    "rent": ("instance_cmds",),
    "rm": ("instance_cmds",),
    "run": ("job_cmds",),
    "schedule": ("schedule_cmds",),
    "server": ("server_cmd",),
    "shell": ("session_cmds",),
    "show": ("instance_cmds",),
    "simulate": ("simulate_cmds",),
    "snapshot": ("snapshot_cmds",),
    "snapshots": ("snapshot_cmds",),
    "ssh": ("session_cmds",),
    "start": ("instance_cmds",),
    "stop": ("instance_cmds",),
    "student": ("student_cmds",),
    "tariffs": ("tariff_cmds",),
    "team": ("team_cmds",),
    "token": ("account_cmds",),
    "top": ("telemetry_cmds",),
    "voucher": ("voucher_cmds",),
    "vouchers": ("voucher_cmds",),
    "webhook": ("webhook_cmds",),
    "webhooks": ("webhook_cmds",),
}

_app = typer.Typer(
    name="danlu",
    help="danlu: a self-hostable GPU rental platform. Pay only for useful GPU time.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
_registered: list[str] = []


def _register(modules: list[str] | tuple[str, ...]) -> typer.Typer:
    """Registers ``modules`` (short names or full) into the one app of this process, each once: modules add to
    sub-apps they share (``admin``), so a second registration would list their commands twice."""
    for short in modules:
        name = short if short.startswith("danlu.") else f"danlu.cli.{short}"
        if name not in _registered:
            _registered.append(name)
            importlib.import_module(name).register(_app)
    return _app


def __getattr__(name: str) -> typer.Typer:
    if name == "app":  # every command (the tests, the help)
        return _register(COMMAND_MODULES)
    raise AttributeError(name)


def _version(value: bool) -> None:
    if value:
        import platform

        typer.echo(f"danlu {__version__} (Python {platform.python_version()})")
        raise typer.Exit()


@_app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print danlu's version and exit."
    ),
) -> None:
    """danlu: a self-hostable GPU rental platform. Pay only for useful GPU time."""


def needed(argv: list[str]) -> tuple[str, ...] | list[str]:
    """The command modules a command line needs: its command's, or all of them (an option first — --help,
    --version — no command, or one that does not exist: typer then lists every command, or suggests one)."""
    if argv and not argv[0].startswith("-") and argv[0] in COMMANDS:
        return COMMANDS[argv[0]]
    return COMMAND_MODULES


def main() -> None:
    _register(needed(sys.argv[1:]))()


if __name__ == "__main__":
    main()
