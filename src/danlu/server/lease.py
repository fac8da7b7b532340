"""Who may do the control loop's work: one live server per data folder, one server per database.

* :class:`DataDirLock` — an ``flock`` on ``DATA_DIR/server.lock``: a second server on the same
  data folder refuses to start (the kernel drops the lock when the holder dies, ``kill -9``
  included, so a restart never waits).
* :class:`Lease` — a row in ``leases`` naming the server that holds a kind of background work,
  with a random token and an expiry, as dstack leases its pipeline rows: taken when free or
  expired, renewed while held, both by one guarded UPDATE (compare-and-set on holder and token).
  Two servers on one database therefore never both reconcile, meter or schedule. The holder is
  ``host:data folder``, unique among live servers thanks to the lock above, so a server restarted
  after a crash takes its own lease back at once; another server waits for it to expire.
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import socket
from pathlib import Path
from typing import IO

from sqlalchemy import or_, update
from sqlalchemy.exc import IntegrityError

from danlu.core.clock import Clock
from danlu.core.errors import Conflict
from danlu.db.engine import Database
from danlu.db.models import LeaseRow

log = logging.getLogger(__name__)


class DataDirLock:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "server.lock"
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        if self._file is not None:
            return  # already held by this server
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        f = open(self.path, "a+")  # noqa: SIM115 - held open for the server's life
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            other = f.read().strip() or "another process"
            f.close()
            raise Conflict(
                "data_dir_in_use",
                f"another danlu server ({other}) is running on {self.path.parent}; stop it first, "
                "or give this one its own --data-dir",
            ) from None
        f.truncate(0)
        f.write(f"pid {os.getpid()}\n")
        f.flush()
        self._file = f

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None


def holder_for(data_dir: Path) -> str:
    return f"{socket.gethostname()}:{data_dir.resolve()}"[:256]


class Lease:
    def __init__(self, db: Database, clock: Clock, name: str, holder: str, ttl_ms: int) -> None:
        self.db, self.clock, self.name, self.holder, self.ttl_ms = db, clock, name, holder, ttl_ms
        self.token: str | None = None
        self._said_waiting = False

    def acquire(self) -> bool:
        """Take or renew the lease; False while another live server holds it."""
        now = self.clock.now_ms()
        token = self.token or secrets.token_hex(16)
        with self.db.write() as s:
            taken = s.execute(
                update(LeaseRow)
                .where(
                    LeaseRow.name == self.name,
                    or_(LeaseRow.holder == self.holder, LeaseRow.expires_at_ms <= now),
                )
                .values(holder=self.holder, token=token, expires_at_ms=now + self.ttl_ms)
                .execution_options(synchronize_session=False)
            ).rowcount  # type: ignore[attr-defined]
            if taken == 0 and s.get(LeaseRow, self.name) is None:
                try:
                    with s.begin_nested():  # a savepoint: losing the race leaves the transaction usable
                        row = LeaseRow(name=self.name, holder=self.holder, token=token, expires_at_ms=now + self.ttl_ms)
                        s.add(row)
                    taken = 1
                except IntegrityError:  # another server inserted it first
                    taken = 0
        if taken:
            self.token, self._said_waiting = token, False
            return True
        self.token = None
        if not self._said_waiting:
            log.warning("another server holds the %s lease; this one waits and does no background work", self.name)
            self._said_waiting = True
        return False

    def release(self) -> None:
        if self.token is None:
            return
        with self.db.write() as s:
            s.execute(
                update(LeaseRow)
                .where(LeaseRow.name == self.name, LeaseRow.token == self.token)
                .values(expires_at_ms=0)
                .execution_options(synchronize_session=False)
            )
        self.token = None
