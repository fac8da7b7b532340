"""Shared CLI output: a Rich table for people, ``--json`` for machines, errors on stderr."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn, TypeVar

import typer
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

T = TypeVar("T")

console = Console()
err_console = Console(stderr=True)

JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON instead of a table.")


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def human(value: Any) -> str:
    """A value as a person reads it, never as Python prints it: ``-`` for none (or empty),
    ``yes``/``no`` for booleans, lists comma-separated."""
    if value is None or value == "" or value == []:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(human(v) for v in value)
    return str(value)


def _cell(value: Any) -> str:
    return "" if value is None or value == "" else human(value)


def is_id_key(key: str) -> bool:
    return key == "id" or key.endswith(("_id", "_ids"))


WHOLE_KEYS = frozenset({"gpu_model"})  # GPU model names are copied into `--gpu`: never broken


def build_table(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[tuple[str, str]],
    title: str | None = None,
    *,
    whole: Iterable[str] = (),
    optional: Sequence[str] = (),
    width: int | None = None,
) -> tuple[Table, list[str]]:
    """The table of ``rows`` for a console ``width`` wide (default: the console's), and the headers
    of the columns left out to fit it.

    ``columns`` is a list of (key, header). Cells of ids (``id``, ``*_id``, ``*_ids``), of GPU
    model names and of the ``whole`` keys are never cut or wrapped (they are copied into other
    commands); other cells wrap. While the table cannot fit without breaking a word, the
    ``optional`` keys are left out, first to last."""
    columns = [(k, tr(h)) for k, h in columns]
    keep = {k for k, _ in columns if is_id_key(k) or k in WHOLE_KEYS} | set(whole)
    width = console.width if width is None else width
    texts = [{k: _cell(r.get(k)) for k, _ in columns} for r in rows]

    def least(key: str, header: str) -> int:
        """The narrowest the column can be: its longest cell if kept whole, else its longest word."""
        cells = [header, *(t[key] for t in texts)]
        if key in keep:
            return most(key, header)
        return max((cell_len(w) for c in cells for w in c.split()), default=0)

    def most(key: str, header: str) -> int:
        """The widest it needs: its longest line."""
        return max(cell_len(line) for c in [header, *(t[key] for t in texts)] for line in (c.splitlines() or [""]))

    def room(cols: list[tuple[str, str]]) -> int:
        return width - 3 * len(cols) - 1  # each column has 2 of padding and 1 of border, plus the last border

    cols = list(columns)
    dropped: list[str] = []
    for key in optional:
        if sum(least(k, h) for k, h in cols) <= room(cols):
            break
        dropped += [h for k, h in cols if k == key]
        cols = [(k, h) for k, h in cols if k != key]
    need = [least(k, h) for k, h in cols]
    want = [most(k, h) for k, h in cols]
    widths: list[int | None] = [None] * len(cols)
    if sum(need) <= room(cols) < sum(want):
        # Every word fits: share the room left over in proportion to what each column lacks, so no
        # word is broken (Rich alone would narrow the widest columns below their longest word).
        spare, lack = room(cols) - sum(need), [w - n for w, n in zip(want, need, strict=True)]
        extra = [spare * x // sum(lack) for x in lack]
        for i in sorted(range(len(cols)), key=lambda i: -lack[i])[: spare - sum(extra)]:
            extra[i] += 1
        widths = [n + e for n, e in zip(need, extra, strict=True)]
    table = Table(title=title)
    for (key, header), fixed in zip(cols, widths, strict=True):
        if key in keep:  # stays whole, on one line, to be copied
            table.add_column(header, no_wrap=True, min_width=least(key, header))
        else:
            table.add_column(header, overflow="fold", width=fixed)  # wraps rather than being cut
    for t in texts:
        table.add_row(*(Text(t[k]) for k, _ in cols))
    return table, dropped


def tr(message: str) -> str:
    """``message`` in the CLI's language (DANLU_LANG, else LC_ALL / LC_MESSAGES / LANG: zh… picks
    简体中文), through the console's gettext catalogs (danlu.i18n.catalogs). English, the source text,
    loads nothing."""
    if cli_language() == "en":
        return message
    from danlu.i18n.catalogs import translations  # Babel loads only for a translated CLI

    return translations(cli_language()).gettext(message)


def cli_language() -> str:
    """``zh_CN`` when DANLU_LANG, else the first of LC_ALL / LC_MESSAGES / LANG that is set, starts with zh."""
    for var in ("DANLU_LANG", "LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(var, "")
        if value:
            return "zh_CN" if value.lower().startswith("zh") else "en"
    return "en"


def print_table(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[tuple[str, str]],
    title: str | None = None,
    *,
    whole: Iterable[str] = (),
    optional: Sequence[str] = (),
) -> None:
    """Print :func:`build_table`'s table; None prints as an empty cell, booleans as yes/no. Columns
    left out to fit the terminal are named on stderr."""
    table, dropped = build_table(rows, columns, title, whole=whole, optional=optional)
    console.print(table)
    if dropped:
        err_console.print(
            f"(left out to fit {console.width} columns: {', '.join(dropped)}; a wider terminal or --json shows them)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


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
    """``error [code]: message`` on stderr (the message in the CLI's language, danlu.i18n.errors), then exit."""
    prefix = f"error [{code}]: " if code else "error: "
    if code and cli_language() != "en":
        from danlu.i18n.errors import localized  # Babel loads only for a translated CLI

        message = localized(code, message, cli_language())
    err_console.print(prefix + message, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(exit_code)


def or_fail(work: Callable[[], T]) -> T:
    """``work()``, or its DanluError as ``error [code]: message`` and exit 2: for the commands that
    work on this machine (the server, its configuration, backups) rather than through the API."""
    from danlu.core.errors import DanluError

    try:
        return work()
    except DanluError as exc:
        fail(exc.message, exc.code, exit_code=2)
