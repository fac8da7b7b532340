"""Engine and session set-up for SQLite and PostgreSQL, and migrations on start.

SQLite runs in WAL mode with a busy timeout. Write transactions start with ``BEGIN IMMEDIATE``
so two writers never deadlock on a lock upgrade; reads start with a plain ``BEGIN``. PostgreSQL
runs at READ COMMITTED with custom plans for prepared statements (``plan_cache_mode``); every
contended write there is a conditional UPDATE with a row-count check (see docs/locking.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def make_engine(url: str) -> Engine:
    if is_sqlite(url):
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            pool_size=40,
            max_overflow=10,
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # we emit BEGIN ourselves
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            immediate = conn.get_execution_options().get("sqlite_immediate", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return engine
    engine = create_engine(url, pool_size=40, max_overflow=10, pool_pre_ping=True)

    @event.listens_for(engine, "connect")
    def _on_pg_connect(dbapi_conn: Any, _record: Any) -> None:
        # psycopg prepares a statement on the server after five runs, and PostgreSQL then switches to
        # a generic plan that ignores the parameters' values: invoice finalisation's per-payer UPDATE
        # (executemany) went from ~1 ms to a scan per payer, 180 s for 10,000 payers instead of ~30.
        # A custom plan per execution costs a fraction of a millisecond of planning.
        with dbapi_conn.cursor() as cur:
            cur.execute("SET plan_cache_mode = force_custom_plan")
        dbapi_conn.commit()

    return engine


@dataclass
class Database:
    """The engine plus two session factories: ``read()`` and ``write()``."""

    url: str
    engine: Engine

    def __post_init__(self) -> None:
        write_bind = self.engine.execution_options(sqlite_immediate=True) if is_sqlite(self.url) else self.engine
        self._read = sessionmaker(self.engine, expire_on_commit=False)
        self._write = sessionmaker(write_bind, expire_on_commit=False)

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self._read() as session, session.begin():
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A write transaction: commits on success, rolls back on any exception."""
        with self._write() as session, session.begin():
            yield session

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name


def open_database(url: str) -> Database:
    return Database(url=url, engine=make_engine(url))


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("danlu.db").joinpath("migrations")))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def migrate(db: Database, revision: str = "head", *, down: bool = False) -> None:
    """Bring the schema to ``revision`` (the server calls this on every start, to the newest);
    ``down``: back to an older one (``danlu admin db downgrade``).

    On SQLite, foreign keys are not enforced while migrating: a batch migration rebuilds a table
    (create, copy, drop, rename), and dropping a table other rows still reference would fail on a
    database that holds data. ``PRAGMA foreign_key_check`` then proves nothing was left dangling."""
    cfg = alembic_config(db.url)
    sqlite = is_sqlite(db.url)
    with db.engine.connect() as conn:
        raw: Any = conn.connection.driver_connection
        if sqlite:  # must run outside a transaction to take effect
            raw.execute("PRAGMA foreign_keys=OFF")
        try:
            with conn.begin():
                cfg.attributes["connection"] = conn
                (command.downgrade if down else command.upgrade)(cfg, revision)
                if sqlite:
                    dangling = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if dangling:
                        raise RuntimeError(f"migration left rows pointing at nothing: {dangling[:5]}")
        finally:
            if sqlite:
                raw.execute("PRAGMA foreign_keys=ON")
