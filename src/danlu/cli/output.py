"""Shared CLI output: a Rich table for people, ``--json`` for machines, errors on stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

console = Console()
err_console = Console(stderr=True)

JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON instead of a table.")


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]], title: str | None = None) -> None:
    """``columns`` is a list of (key, header). Missing keys print as empty cells; long cells wrap;
    ids (``id``, ``*_id``, ``*_ids``) are never cut or wrapped."""
    table = Table(title=title)
    for key, header in columns:
        if key == "id" or key.endswith(("_id", "_ids")):  # an id stays whole, on one line, to be copied
            width = max((len(str(r.get(key) or "")) for r in rows), default=0)
            table.add_column(header, no_wrap=True, min_width=max(width, len(header)))
        else:
            table.add_column(header, overflow="fold")  # other cells wrap rather than being cut
    for row in rows:
        table.add_row(*("" if row.get(k) is None else str(row.get(k)) for k, _ in columns))
    console.print(table)


def parse_env(pairs: Sequence[str] | None, env_file: str | None) -> dict[str, str]:
    """``--env K=V`` (repeatable) and ``--env-file FILE`` (K=V lines, # comments) → a dict; the
    server validates names and sizes."""
    env: dict[str, str] = {}
    lines: list[str] = []
    if env_file:
        try:
            with open(env_file, encoding="utf-8") as f:
                lines = [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
        except OSError as exc:
            fail(f"cannot read --env-file {env_file}: {exc.strerror}", "invalid_env")
    for item in [*lines, *(pairs or [])]:
        key, sep, value = item.partition("=")
        if not sep:
            fail(f"--env takes NAME=VALUE, not {item!r}", "invalid_env")
        env[key.strip()] = value
    return env


def fail(message: str, code: str | None = None, exit_code: int = 1) -> NoReturn:
    prefix = f"error [{code}]: " if code else "error: "
    err_console.print(prefix + message, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(exit_code)
