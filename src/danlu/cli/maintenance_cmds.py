"""The operator's commands that run on the server's machine rather than through its API, with the
server's own configuration (`--config`, `DANLU_*`, `--db`, `--data-dir`) and no admin token:
``danlu admin backup|restore``, ``danlu admin db current|upgrade|downgrade``, ``danlu admin
systemd-unit`` and ``danlu admin wait-ready`` (issue 28; docs/operations.md)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from danlu.cli.admin_cmds import admin_app
from danlu.cli.output import JsonOpt, console, fail, or_fail, print_json

if TYPE_CHECKING:
    from danlu.db.engine import Database

DbOpt = typer.Option(None, "--db", help="The server's database URL (default: as `danlu server` finds it).")
DataDirOpt = typer.Option(None, "--data-dir", help="The server's data folder (default: as `danlu server` finds it).")
ServerConfigOpt = typer.Option(None, "--config", help="The server's config file (`danlu server --config`).")

db_app = typer.Typer(
    help="The database's schema revision, on the server's machine with no server running (no admin token).",
    no_args_is_help=True,
)


@contextmanager
def _server_database(
    config: Path | None, db: str | None, data_dir: Path | None, *, new: bool = False
) -> Iterator[tuple[Database, Path]]:
    """The database and data folder of the server configured so (as `danlu server` finds them).
    Unless ``new`` (a restore's target), the database must exist and answer: a wrong folder is an
    error naming it, never an empty SQLite file made there or a traceback."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import OperationalError

    from danlu.cli.server_cmd import database_and_data_dir
    from danlu.db.engine import is_sqlite, open_database

    url, folder = or_fail(lambda: database_and_data_dir(config, db, data_dir))
    where = "give --db, --data-dir or --config as the server gets them (`make run` keeps its data in .danlu)"
    sqlite_file = Path(url.removeprefix("sqlite:///")) if is_sqlite(url) else None
    if not new and sqlite_file is not None and not sqlite_file.is_file():
        fail(f"no danlu database at {sqlite_file}: {where}", "no_database", exit_code=2)
    database = open_database(url)
    try:
        try:
            database.engine.connect().close()
        except OperationalError as exc:
            shown = make_url(url).render_as_string(hide_password=True)
            reason = str(exc.orig or exc).strip().splitlines()[0]
            fail(f"cannot open {shown}: {reason}; {where}", "database_unreachable", exit_code=2)
        yield database, folder
    finally:
        database.engine.dispose()


def _now_ms() -> int:
    from danlu.core.clock import SystemClock

    return SystemClock().now_ms()


@admin_app.command("backup")
def backup_cmd(
    file: Path = typer.Argument(..., help="A new file to write (never overwritten)."),
    config: Path = ServerConfigOpt,
    db: str = DbOpt,
    data_dir: Path = DataDirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Back up the platform's database (one consistent snapshot, safe while the server runs) and
    its admin token, password and SSH host key into FILE (0600). Workspaces are not included.
    Runs on the server's machine with its configuration; no admin token needed (docs/operations.md)."""
    from danlu.db.backup import backup

    with _server_database(config, db, data_dir) as (database, folder):
        made = or_fail(lambda: backup(database, folder, file.resolve(), _now_ms()))
    if as_json:
        print_json({"file": str(file.resolve()), **made.__dict__})
    else:
        console.print(f"backed up {sum(made.rows.values())} rows of {made.dialect} schema {made.revision} to {file}")


@admin_app.command("restore")
def restore_cmd(
    file: Path = typer.Argument(..., help="A file `danlu admin backup` wrote."),
    config: Path = ServerConfigOpt,
    db: str = DbOpt,
    data_dir: Path = DataDirOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Restore FILE into an empty database and a new data folder, with no server running there;
    then start `danlu server` on them. Renters' runs of the backup are judged lost (billed to their
    last known moment) by that server."""
    from danlu.db.backup import restore
    from danlu.server.lease import DataDirLock

    os.umask(0o077)  # the restored database and files are the platform's own, private (as the server's)
    with _server_database(config, db, data_dir, new=True) as (database, folder):
        lock = DataDirLock(folder)
        or_fail(lock.acquire)  # no server on that folder while it is filled
        try:
            made = or_fail(lambda: restore(database, folder, file.resolve()))
        finally:
            lock.release()
    if as_json:
        print_json({"file": str(file.resolve()), **made.__dict__})
    else:
        console.print(f"restored {sum(made.rows.values())} rows (schema {made.revision}) into {folder}")


@db_app.command("current")
def db_current(
    config: Path = ServerConfigOpt, db: str = DbOpt, data_dir: Path = DataDirOpt, as_json: bool = JsonOpt
) -> None:
    """The database's schema revision and this danlu's newest."""
    from danlu.db import schema

    with _server_database(config, db, data_dir) as (database, _):
        st = schema.state(database)
    found: dict[str, Any] = {"current": st.current, "head": st.head, "up_to_date": st.current == st.head}
    if as_json:
        print_json(found)
    else:
        when = "up to date" if found["up_to_date"] else f"this danlu's newest is {found['head']}"
        console.print(f"schema {found['current'] or '(empty database)'}: {when}")


@db_app.command("upgrade")
def db_upgrade(
    revision: str = typer.Argument("head", help="The revision to reach (default: this danlu's newest)."),
    config: Path = ServerConfigOpt,
    db: str = DbOpt,
    data_dir: Path = DataDirOpt,
) -> None:
    """Migrate the database to REVISION (a server does this itself when it starts)."""
    from danlu.db import schema

    with _server_database(config, db, data_dir) as (database, _):
        before = schema.state(database).current
        after = or_fail(lambda: schema.upgrade(database, _now_ms(), revision)).current
    console.print(f"schema {before or '(empty)'} → {after}")


@db_app.command("downgrade")
def db_downgrade(
    revision: str = typer.Argument(..., help="The older revision to go back to (0008 at the oldest)."),
    backup_file: Path = typer.Option(..., "--backup", help="First back the database up to this new file."),
    config: Path = ServerConfigOpt,
    db: str = DbOpt,
    data_dir: Path = DataDirOpt,
) -> None:
    """Take the schema back to REVISION, after backing the database up to --backup (a downgrade can
    drop what newer versions added). Then start the danlu version of that revision."""
    from danlu.db import schema
    from danlu.db.backup import backup

    now = _now_ms()
    with _server_database(config, db, data_dir) as (database, folder):
        or_fail(lambda: schema.no_server(database, now))
        before = schema.state(database).current
        or_fail(lambda: schema.check_downgrade(database, revision))  # before the backup: a refusal writes nothing
        or_fail(lambda: backup(database, folder, backup_file.resolve(), now))
        after = or_fail(lambda: schema.downgrade(database, now, revision)).current
    console.print(f"backed up to {backup_file}; schema {before} → {after}")


@admin_app.command("systemd-unit")
def systemd_unit(
    config: Path = typer.Option(Path("/etc/danlu/danlu.toml"), "--config", help="The config file it starts with."),
    url: str = typer.Option("http://127.0.0.1:8000", "--url", help="Where it answers on this machine."),
) -> None:
    """Print a systemd unit for `danlu server --config FILE` (docs/operations.md): save it as
    /etc/systemd/system/danlu.service, then `systemctl enable --now danlu`. No admin token needed."""
    from danlu.server.systemd import unit

    danlu = Path(sys.argv[0]).resolve() if Path(sys.argv[0]).name == "danlu" else Path(sys.executable).parent / "danlu"
    docs = Path(__file__).resolve().parents[3] / "docs" / "operations.md"
    typer.echo(unit(danlu, config.resolve(), url, docs), nl=False)


@admin_app.command("wait-ready")
def wait_ready(
    url: str = typer.Option("http://127.0.0.1:8000", "--url", help="The server's address."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds to wait at most."),
) -> None:
    """Wait until the server's /readyz answers 200 (exit 0), or say what is not ready and exit 1 after
    --timeout seconds. No admin token needed; systemd's ExecStartPost uses it."""
    import time

    import httpx

    deadline, said = time.monotonic() + timeout, "no answer"
    while True:
        try:
            r = httpx.get(url.rstrip("/") + "/readyz", timeout=5)
            if r.status_code == 200:
                return
            said = ", ".join(f"{k}: {v['detail']}" for k, v in r.json().get("checks", {}).items() if not v["ok"])
        except (httpx.HTTPError, ValueError) as exc:
            said = f"no answer ({type(exc).__name__})"
        if time.monotonic() >= deadline:
            fail(f"{url} is not ready after {timeout:g} s: {said}")
        time.sleep(1)


def register(app: typer.Typer) -> None:
    """Adds to ``danlu admin`` (registered by danlu.cli.admin_cmds, listed before this module)."""
    admin_app.add_typer(db_app, name="db")
