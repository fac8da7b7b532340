"""``GET /readyz`` (issue 28): whether this server can take rentals now, for a load balancer and
systemd. ``/healthz`` answers whether the process is alive (and its database reachable); this says
whether everything a rental needs answers:

* ``database`` — a round trip;
* ``backend`` — the compute backend (Slurm: ``scontrol ping``; the local backend always answers);
* ``control_loop`` — some server on this database holds the control loop's lease, so runs are
  reconciled, metered and scheduled (a lease lapses ``5 × --tick-interval`` after its holder stops);
* ``sandbox`` — renters' code can be sandboxed here (``--no-sandbox`` is the operator's choice and
  counts as ready; a sandbox that could not start does not).

Each check says in a few words what it found, nothing about the host's insides (anyone may ask,
as a load balancer does); the answer is 200 only when all pass, else 503."""

from __future__ import annotations

from dataclasses import dataclass

from danlu.context import Platform
from danlu.db.models import CONTROL_LOOP_LEASE, LeaseRow


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def checks(p: Platform) -> list[Check]:
    return [_database(p), _backend(p), _control_loop(p), _sandbox(p)]


def _database(p: Platform) -> Check:
    try:
        with p.db.read() as s:
            s.connection().exec_driver_sql("SELECT 1")
    except Exception as exc:  # any failure means not ready; its kind is the detail
        return Check("database", False, f"no answer: {type(exc).__name__}")
    return Check("database", True, p.db.engine.dialect.name)


def _backend(p: Platform) -> Check:
    down = p.backend.unavailable() is not None  # its reason names internal hosts: not for anyone who asks
    return Check("backend", not down, f"{p.backend.name}: {'does not answer' if down else 'answers'}")


def _control_loop(p: Platform) -> Check:
    try:
        with p.db.read() as s:
            lease = s.get(LeaseRow, CONTROL_LOOP_LEASE)
            expires = None if lease is None else lease.expires_at_ms
    except Exception as exc:  # the database check names the cause
        return Check("control_loop", False, f"unknown: {type(exc).__name__}")
    left_ms = (expires or 0) - p.clock.now_ms()
    if left_ms <= 0:
        return Check("control_loop", False, "no server holds the control loop's lease: nothing is metered")
    return Check("control_loop", True, f"lease held, renewed within {left_ms // 1000 + 1} s")


def _sandbox(p: Platform) -> Check:
    return Check("sandbox", p.sandbox.mode != "unavailable", p.sandbox.mode)
