"""Entry point of the ``danlu`` command. Each capability registers its commands from its own module."""

from __future__ import annotations

import importlib
import platform

import typer

from danlu import __version__

app = typer.Typer(
    name="danlu",
    help="danlu: a self-hostable GPU rental platform. Pay only for useful GPU time.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

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


def _register_all() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)


_register_all()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"danlu {__version__} (Python {platform.python_version()})")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print danlu's version and exit."
    ),
) -> None:
    """danlu: a self-hostable GPU rental platform. Pay only for useful GPU time."""


def main() -> None:
    app()


if __name__ == "__main__":
    main()
