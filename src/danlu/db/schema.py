"""``danlu admin db current|upgrade|downgrade`` (issue 28): which schema revision a database is at,
and moving it, with no server on it.

A server migrates its database to its own newest revision at every start; these commands are for
an operator who wants that step on its own (before starting a new version, in a maintenance
window) or wants to go back (a new version misbehaves: stop it, downgrade, start the old one). A
downgrade can drop what the newer schema added, so it always takes a backup first
(danlu.db.backup). The oldest revision reachable is 0008: 0008 moved money into billing accounts and
cannot be undone (restore a backup from before it instead)."""

from __future__ import annotations

from dataclasses import dataclass

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect

from danlu.core.errors import Conflict, InvalidInput
from danlu.db.engine import Database, alembic_config, migrate
from danlu.db.models import CONTROL_LOOP_LEASE, LeaseRow

OLDEST_REACHABLE = "0008"


@dataclass(frozen=True)
class SchemaState:
    current: str | None  # None: an empty database
    head: str  # this danlu's newest
    revisions: list[str]  # every revision this danlu knows, oldest first


def revisions(db_url: str) -> list[str]:
    script = ScriptDirectory.from_config(alembic_config(db_url))
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def head_revision(db_url: str) -> str:
    return revisions(db_url)[-1]


def current_revision(conn: Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


def state(db: Database) -> SchemaState:
    with db.engine.connect() as conn:
        current = current_revision(conn)
    known = revisions(db.url)
    return SchemaState(current, known[-1], known)


def no_server(db: Database, now_ms: int) -> None:
    """Refuse while a server works on this database (it holds the control loop's lease)."""
    with db.read() as s:
        lease = s.get(LeaseRow, CONTROL_LOOP_LEASE) if _has_leases(s.connection()) else None
        if lease is not None and lease.expires_at_ms > now_ms:
            raise Conflict(
                "server_running",
                f"a danlu server ({lease.holder}) is running on this database; stop it first "
                f"(its lease lapses {max(0, lease.expires_at_ms - now_ms) // 1000 + 1} s after it stops)",
            )


def _has_leases(conn: Connection) -> bool:
    return bool(inspect(conn).has_table(LeaseRow.__tablename__))


def upgrade(db: Database, now_ms: int, revision: str = "head") -> SchemaState:
    before = state(db)
    target = before.head if revision == "head" else revision
    _known(before, target)
    if before.current is not None and before.revisions.index(target) < before.revisions.index(before.current):
        raise InvalidInput("not_an_upgrade", f"{target} is older than {before.current}: that is a downgrade")
    no_server(db, now_ms)
    migrate(db, target)
    return state(db)


def downgrade(db: Database, now_ms: int, revision: str) -> SchemaState:
    """To ``revision``, older than the current one (the caller has taken a backup)."""
    check_downgrade(db, revision)
    no_server(db, now_ms)
    migrate(db, revision, down=True)
    return state(db)


def check_downgrade(db: Database, revision: str) -> None:
    """Refuse a downgrade to ``revision`` that cannot be done, before anything is written."""
    before = state(db)
    _known(before, revision)
    if before.current is None:
        raise InvalidInput("not_a_downgrade", "the database is empty: nothing to downgrade")
    if before.current != before.head:
        raise InvalidInput(
            "downgrade_needs_head",
            f"the database is at {before.current}, not this danlu's {before.head}: downgrade with the danlu "
            "version whose schema it is at (it backs up first, and a backup is of that version's schema)",
        )
    if before.revisions.index(revision) >= before.revisions.index(before.current):
        raise InvalidInput("not_a_downgrade", f"{revision} is not older than {before.current}: that is no downgrade")
    if before.revisions.index(revision) < before.revisions.index(OLDEST_REACHABLE):
        raise InvalidInput(
            "downgrade_not_possible",
            f"{OLDEST_REACHABLE} moved money into billing accounts and cannot be undone: the oldest revision "
            f"a downgrade reaches is {OLDEST_REACHABLE}; restore a backup from before it instead",
        )


def _known(st: SchemaState, revision: str) -> None:
    if revision not in st.revisions:
        raise InvalidInput(
            "unknown_revision", f"no schema revision {revision!r}; this danlu knows {st.revisions[0]} … {st.head}"
        )
