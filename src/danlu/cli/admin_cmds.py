"""Operator commands (``danlu admin ...``): users, top-ups, credit limits, prices."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from danlu.cli.account_cmds import StdinOpt, read_password
from danlu.cli.client import Client
from danlu.cli.output import JsonOpt, console, fail, print_json, print_table

T = TypeVar("T")

admin_app = typer.Typer(help="Operator commands (need the admin token).", no_args_is_help=True)
user_app = typer.Typer(help="Manage users.", no_args_is_help=True)
price_app = typer.Typer(help="Set prices.", no_args_is_help=True)
admin_app.add_typer(user_app, name="user")
admin_app.add_typer(price_app, name="price")


@user_app.command("create")
def user_create(name: str, as_json: bool = JsonOpt) -> None:
    """Create a renter and print their API token (shown once)."""
    data = Client().post("/admin/users", json={"name": name})
    if as_json:
        print_json({"name": data["name"], "token": data["token"]})
    else:
        console.print(f"user {data['name']} created; token (shown once): {data['token']}")


@user_app.command("password")
def user_password(name: str, from_stdin: bool = StdinOpt) -> None:
    """Set NAME's web console password (they may change it with `danlu password set --change`)."""
    Client().put(f"/admin/users/{name}/password", json={"password": read_password(from_stdin, f"password for {name}")})
    console.print(f"console password set for {name}", markup=False)


@user_app.command("list")
def user_list(as_json: bool = JsonOpt) -> None:
    rows = Client().get("/admin/users")
    if as_json:
        print_json(rows)
    else:
        print_table(rows, [("name", "name"), ("is_admin", "admin")])


@admin_app.command("topup")
def topup(
    name: str,
    amount: str,
    idempotency_key: str = typer.Option(None, "--idempotency-key", help="Retry-safe key (default: random)."),
    as_json: bool = JsonOpt,
) -> None:
    """Add AMOUNT (e.g. 100.00) to a user's balance."""
    post_topup(f"/admin/users/{name}/topup", name, amount, idempotency_key, as_json)


def post_topup(path: str, label: str, amount: str, idempotency_key: str | None, as_json: bool) -> None:
    """A top-up with a retry-safe key (a random one unless given), for a user or a team."""
    key = idempotency_key or str(uuid.uuid4())
    data = Client().post(path, json={"amount": amount}, headers={"Idempotency-Key": key})
    if as_json:
        print_json(data)
    else:
        note = "" if data["created"] else " (already recorded with this key; nothing changed)"
        console.print(f"{label}: balance {data['balance']} {data['currency']}{note}")


@admin_app.command("credit-limit")
def credit_limit(name: str, amount: str, as_json: bool = JsonOpt) -> None:
    """Let NAME's balance go down to -AMOUNT before their instances are stopped."""
    data = Client().put(f"/admin/users/{name}/credit-limit", json={"amount": amount})
    if as_json:
        print_json(data)
    else:
        console.print(f"{name}: credit limit {data['credit_limit']} {data['currency']}")


@admin_app.command("quota")
def quota(
    name: str, gpus: str = typer.Argument(..., help="GPUs NAME may hold at once, or 'none'."), as_json: bool = JsonOpt
) -> None:
    """Cap how many GPUs NAME may hold at once (rentals and job runs together)."""
    if gpus.lower() == "none":
        value = None
    elif gpus.isdigit():
        value = int(gpus)
    else:
        fail(f"GPUS must be a whole number or 'none', not {gpus!r}", "invalid_quota")
    data = Client().put(f"/admin/users/{name}/gpu-quota", json={"gpus": value})
    if as_json:
        print_json(data)
    else:
        console.print(f"{data['name']}: GPU quota {data['gpus'] if data['gpus'] is not None else 'none'}")


@admin_app.command("gpus")
def gpus(as_json: bool = JsonOpt) -> None:
    """Every GPU, real or SIMULATED, and which instance holds it."""
    rows = Client().get("/admin/gpus")
    if as_json:
        print_json(rows)
        return
    for r in rows:
        r["kind"] = "SIMULATED" if r["simulated"] else "real"
        r["vram"] = f"{r['vram_mb'] // 1024} GB"
    print_table(
        rows,
        [
            ("host", "host"),
            ("index", "idx"),
            ("model", "model"),
            ("vram", "VRAM"),
            ("kind", "kind"),
            ("uuid", "uuid"),
            ("instance_id", "instance"),
            ("hold_id", "held for"),
        ],
    )


@price_app.command("set")
def price_set(
    model: str,
    price_per_hour: str,
    interruptible: str = typer.Option(None, "--interruptible", help="Also offer preemptible capacity at this price."),
    as_json: bool = JsonOpt,
) -> None:
    """Set the on-demand price per GPU-hour of MODEL (running rentals keep their price)."""
    body = {"price_per_hour": price_per_hour}
    if interruptible is not None:
        body["interruptible_price_per_hour"] = interruptible
    data = Client().put(f"/admin/prices/{model}", json=body)
    if as_json:
        print_json(data)
    else:
        spot = data["interruptible_price_per_hour"]
        extra = f", interruptible {spot}" if spot else ""
        console.print(f"{data['gpu_model']}: {data['price_per_hour']}{extra} {data['currency']} per GPU-hour")


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


DbOpt = typer.Option(None, "--db", help="The server's database URL (default: as `danlu server` finds it).")
DataDirOpt = typer.Option(None, "--data-dir", help="The server's data folder (default: as `danlu server` finds it).")
ServerConfigOpt = typer.Option(None, "--config", help="The server's config file (`danlu server --config`).")


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
    from danlu.cli.server_cmd import database_and_data_dir
    from danlu.core.clock import SystemClock
    from danlu.db.backup import backup
    from danlu.db.engine import open_database

    url, folder = _or_fail(lambda: database_and_data_dir(config, db, data_dir))
    database = open_database(url)
    try:
        made = _or_fail(lambda: backup(database, folder, file.resolve(), SystemClock().now_ms()))
    finally:
        database.engine.dispose()
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
    from danlu.cli.server_cmd import database_and_data_dir
    from danlu.db.backup import restore
    from danlu.db.engine import open_database
    from danlu.server.lease import DataDirLock

    os.umask(0o077)  # the restored database and files are the platform's own, private (as the server's)
    url, folder = _or_fail(lambda: database_and_data_dir(config, db, data_dir))
    lock = DataDirLock(folder)
    _or_fail(lock.acquire)  # no server on that folder while it is filled
    database = open_database(url)
    try:
        made = _or_fail(lambda: restore(database, folder, file.resolve()))
    finally:
        database.engine.dispose()
        lock.release()
    if as_json:
        print_json({"file": str(file.resolve()), **made.__dict__})
    else:
        console.print(f"restored {sum(made.rows.values())} rows (schema {made.revision}) into {folder}")


db_app = typer.Typer(
    help="The database's schema revision, on the server's machine with no server running (no admin token).",
    no_args_is_help=True,
)
admin_app.add_typer(db_app, name="db")


def _schema_state(made: Any) -> dict[str, Any]:
    return {"current": made.current, "head": made.head, "up_to_date": made.current == made.head}


@db_app.command("current")
def db_current(
    config: Path = ServerConfigOpt, db: str = DbOpt, data_dir: Path = DataDirOpt, as_json: bool = JsonOpt
) -> None:
    """The database's schema revision and this danlu's newest."""
    from danlu.cli.server_cmd import database_and_data_dir
    from danlu.db import schema
    from danlu.db.engine import open_database

    url, _ = _or_fail(lambda: database_and_data_dir(config, db, data_dir))
    database = open_database(url)
    try:
        found = _schema_state(schema.state(database))
    finally:
        database.engine.dispose()
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
    from danlu.cli.server_cmd import database_and_data_dir
    from danlu.core.clock import SystemClock
    from danlu.db import schema
    from danlu.db.engine import open_database

    url, _ = _or_fail(lambda: database_and_data_dir(config, db, data_dir))
    database = open_database(url)
    try:
        before = schema.state(database).current
        after = _or_fail(lambda: schema.upgrade(database, SystemClock().now_ms(), revision)).current
    finally:
        database.engine.dispose()
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
    from danlu.cli.server_cmd import database_and_data_dir
    from danlu.core.clock import SystemClock
    from danlu.db import schema
    from danlu.db.backup import backup
    from danlu.db.engine import open_database

    url, folder = _or_fail(lambda: database_and_data_dir(config, db, data_dir))
    database = open_database(url)
    now = SystemClock().now_ms()
    try:
        _or_fail(lambda: schema.no_server(database, now))
        before = schema.state(database).current
        _or_fail(lambda: schema.check_downgrade(database, revision))  # before the backup: a refusal writes nothing
        _or_fail(lambda: backup(database, folder, backup_file.resolve(), now))
        after = _or_fail(lambda: schema.downgrade(database, now, revision)).current
    finally:
        database.engine.dispose()
    console.print(f"backed up to {backup_file}; schema {before} → {after}")


def _or_fail(work: Callable[[], T]) -> T:
    from danlu.core.errors import DanluError

    try:
        return work()
    except DanluError as exc:
        fail(exc.message, exc.code, exit_code=2)


def register(app: typer.Typer) -> None:
    app.add_typer(admin_app, name="admin")
