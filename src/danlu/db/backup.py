"""``danlu admin backup FILE`` and ``danlu admin restore FILE`` (issue 28): the platform's books and
state, from a running server's database, into one file, and back into a fresh one.

**What a backup is.** One consistent snapshot of every table — taken in a single read transaction
(PostgreSQL: ``REPEATABLE READ, READ ONLY``; SQLite in WAL mode: one read transaction), so a backup
taken while the server meters holds every ledger transaction whole or not at all — written as a
SQLite file: the same tables, plus ``danlu_backup`` (format, schema revision, source dialect, when,
the danlu version, rows per table) and ``danlu_files`` (the data folder's ``admin-token``,
``admin-password`` and SSH host key, so clients keep trusting the gateway). The file is 0600: it
holds password and token hashes. It is portable: a SQLite deployment's backup restores into
PostgreSQL and back. **Not in it:** renters' workspaces and images (their data, not the books;
snapshots are issue 26), run logs.

**Restoring** needs a database with no tables (a new SQLite file, an empty PostgreSQL database or
schema) and a data folder without a server or a database in it; it creates the schema at the
backup's revision (which must be this danlu's: restore with the version that made the backup,
then upgrade), inserts every row in one transaction in foreign-key order, and moves PostgreSQL's
id sequences past the restored ids. The database's own guards stay on: a final invoice's lines
are inserted while it is still a draft, and it is made final again (draft → final, the one change
the guard allows). Runs that were running when the backup was taken are, to the restored server,
runs it cannot find: it judges them lost and bills to their last known moment, as after any crash.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    func,
    select,
    update,
)
from sqlalchemy import inspect as sa_inspect

from danlu import __version__
from danlu.core.errors import InvalidInput
from danlu.db.engine import Database, is_sqlite, migrate
from danlu.db.models import Base
from danlu.db.schema import current_revision, head_revision

FORMAT = "danlu-backup/1"
BATCH = 2000
FILES = ("admin-token", "admin-password", "ssh_host_ed25519_key")  # in the data folder, all 0600

_extra = MetaData()
MANIFEST = Table("danlu_backup", _extra, Column("key", String(64), primary_key=True), Column("value", Text))
FILE_ROWS = Table(
    "danlu_files",
    _extra,
    Column("name", String(64), primary_key=True),
    Column("mode", Integer),
    Column("content", LargeBinary),
)


@dataclass(frozen=True)
class Manifest:
    format: str
    revision: str
    dialect: str
    created_at_ms: int
    version: str
    rows: dict[str, int]


def backup(db: Database, data_dir: Path, out: Path, now_ms: int) -> Manifest:
    """Write a backup of ``db`` (and ``data_dir``'s small secret files) to the new file ``out``."""
    if out.exists():
        raise InvalidInput("backup_exists", f"{out} exists; name a new file (a backup never overwrites one)")
    partial = out.with_name(out.name + ".partial")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # hashes of passwords and tokens
    os.close(fd)
    dest = create_engine(f"sqlite:///{partial}")
    try:
        Base.metadata.create_all(dest)
        _extra.create_all(dest)
        rows: dict[str, int] = {}
        with db.engine.connect() as src, dest.begin() as out_conn:
            with src.begin():
                if not is_sqlite(db.url):  # one snapshot for every table, taken at the first read
                    src.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                revision = current_revision(src)
                if revision != head_revision(db.url):
                    raise InvalidInput(
                        "backup_schema_mismatch",
                        f"the database is at schema {revision}, this danlu's is {head_revision(db.url)}: "
                        "back it up with the danlu version that runs it (or start this one once to upgrade it)",
                    )
                for table in Base.metadata.sorted_tables:
                    rows[table.name] = 0
                    for batch in _batches(src, table):
                        out_conn.execute(table.insert(), batch)
                        rows[table.name] += len(batch)
            assert revision is not None
            manifest = Manifest(FORMAT, revision, db.dialect, now_ms, __version__, rows)
            out_conn.execute(
                MANIFEST.insert(), [{"key": k, "value": json.dumps(v)} for k, v in asdict(manifest).items()]
            )
            for name in FILES:
                path = data_dir / name
                if path.is_file():
                    out_conn.execute(
                        FILE_ROWS.insert(),
                        {"name": name, "mode": path.stat().st_mode & 0o777, "content": path.read_bytes()},
                    )
    except BaseException:
        dest.dispose()
        partial.unlink(missing_ok=True)
        raise
    dest.dispose()
    os.replace(partial, out)
    return manifest


def read_manifest(path: Path) -> Manifest:
    if not path.is_file():
        raise InvalidInput("backup_not_found", f"no backup file at {path}")
    engine = create_engine(f"sqlite:///file:{path}?mode=ro&uri=true")
    try:
        with engine.connect() as conn:
            found = {k: json.loads(v) for k, v in conn.execute(select(MANIFEST.c.key, MANIFEST.c.value))}
    except Exception:  # not SQLite, or not one of ours
        raise InvalidInput("invalid_backup", f"{path} is not a danlu backup") from None
    finally:
        engine.dispose()
    if found.get("format") != FORMAT:
        raise InvalidInput("invalid_backup", f"{path} is not a {FORMAT} backup (format {found.get('format')!r})")
    return Manifest(**found)


def restore(db: Database, data_dir: Path, src: Path) -> Manifest:
    """Restore the backup ``src`` into the empty ``db`` and the new ``data_dir``."""
    manifest = read_manifest(src)
    head = head_revision(db.url)
    if manifest.revision != head:
        raise InvalidInput(
            "backup_schema_mismatch",
            f"the backup is of schema {manifest.revision}, this danlu's is {head}: restore it with the danlu "
            f"version that made it ({manifest.version}), then upgrade by starting this one",
        )
    tables = sa_inspect(db.engine).get_table_names()
    if tables:
        raise InvalidInput(
            "restore_target_not_empty",
            f"the database already has tables ({', '.join(sorted(tables)[:5])} …): restore into a new, empty one",
        )
    for name in FILES:
        if (data_dir / name).exists():
            raise InvalidInput("restore_target_not_empty", f"{data_dir} already has {name}: restore into a new folder")
    migrate(db)
    source = create_engine(f"sqlite:///file:{src}?mode=ro&uri=true")
    try:
        with source.connect() as inp, db.engine.begin() as conn:
            finals: list[int] = []
            for table in Base.metadata.sorted_tables:
                for batch in _batches(inp, table):
                    if table.name == "invoices":  # lines go into a draft; it is made final after (migration 0008)
                        finals += [r["id"] for r in batch if r["status"] == "final"]
                        batch = [{**r, "status": "draft"} if r["status"] == "final" else r for r in batch]
                    conn.execute(table.insert(), batch)
            if finals:
                invoices = Base.metadata.tables["invoices"]
                for i in range(0, len(finals), BATCH):
                    part = finals[i : i + BATCH]
                    conn.execute(update(invoices).where(invoices.c.id.in_(part)).values(status="final"))
            if not is_sqlite(db.url):
                _advance_sequences(conn)
            files = list(inp.execute(select(FILE_ROWS)).mappings())
    finally:
        source.dispose()
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for f in files:
        fd = os.open(data_dir / f["name"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, f["mode"] & 0o700)
        with os.fdopen(fd, "wb") as out:
            out.write(f["content"])
    return manifest


def _batches(conn: Connection, table: Table) -> Iterator[list[dict[str, Any]]]:
    result = conn.execution_options(yield_per=BATCH).execute(select(table).order_by(*table.primary_key.columns))
    for part in result.partitions():
        yield [dict(row._mapping) for row in part]


def _advance_sequences(conn: Connection) -> None:
    """PostgreSQL: each serial id's sequence continues after the restored rows' largest id."""
    for table in Base.metadata.sorted_tables:
        for column in table.primary_key.columns:
            if column.autoincrement is True or (column.autoincrement == "auto" and isinstance(column.type, Integer)):
                seq = conn.exec_driver_sql(
                    "SELECT pg_get_serial_sequence(%s, %s)", (table.name, column.name)
                ).scalar_one_or_none()
                if seq is None:
                    continue
                top = conn.execute(select(func.max(column))).scalar_one()
                if top is not None:
                    conn.exec_driver_sql("SELECT setval(%s, %s)", (seq, int(top)))
