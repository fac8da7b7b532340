"""Idempotency of mutating money endpoints (docs/billing.md "Idempotency").

A request carrying ``Idempotency-Key`` runs at most once per (scope, key): the scope is the caller
and the endpoint (``user:7 POST /admin/users/ann/topup``). The first request *claims* the key by
inserting a row under UNIQUE (scope, key) whose response is a pending marker with a random lock
token, commits, runs, and replaces the marker with its response. Anyone else with the key:

* a different request hash → 409 ``idempotency_key_reused`` (whether the first is done or not);
* the first is done → its stored (status, body), unchanged, without running anything;
* the first is still running → waits for it (polling), then answers as above.

An error is never stored: when the request raises, its claim is deleted (guarded by the token), so
a retry with the same key runs afresh and can succeed. A claim left by a crashed server expires
after :data:`LEASE_MS` and the next request takes it over (a conditional UPDATE on the token);
the work itself stays guarded below this layer too (a top-up's ledger key, a voucher's per-account
limit), so a crash between the work's commit and the stored response never pays twice.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from danlu.context import Platform
from danlu.core.errors import Conflict, InvalidInput
from danlu.db.models import IdempotencyRecord

PENDING = "pending:"  # response_json of a claim still running: PENDING + its lock token
LEASE_MS = 10 * 60_000  # a claim older than this is a crashed request's; the next one takes it over
WAIT_S = 30.0  # how long a concurrent duplicate waits for the first request's answer
POLL_S = 0.02
MAX_KEY = 120

Response = tuple[int, Any]


@dataclass(frozen=True)
class _Claim:
    record_id: int
    token: str


def scope_of(caller_id: int, endpoint: str) -> str:
    """The scope of a caller's key on one endpoint (method and concrete path): the same key
    another caller, or another account's endpoint, uses is unrelated."""
    raw = f"user:{caller_id} {endpoint}"
    return raw if len(raw) <= 128 else f"user:{caller_id} sha256:{hashlib.sha256(endpoint.encode()).hexdigest()}"


def request_hash(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def run_once(p: Platform, scope: str, key: str | None, payload: Any, fn: Callable[[], Response]) -> Response:
    """Run ``fn`` (which returns ``(status, json_body)``) once per (``scope``, ``key``) and return
    its response; a replay with the same ``payload`` returns the first response unchanged. Without
    a key, ``fn`` just runs. Raises Conflict ``idempotency_key_reused`` for the same key with
    another payload, and ``idempotency_request_in_progress`` when the first request has not
    answered within :data:`WAIT_S`."""
    if key is None:
        return fn()
    if not 0 < len(key) <= MAX_KEY:
        raise InvalidInput("invalid_idempotency_key", f"idempotency keys are 1 to {MAX_KEY} characters")
    digest = request_hash(payload)
    deadline = time.monotonic() + WAIT_S
    while True:
        outcome = _claim_or_find(p, scope, key, digest)
        if isinstance(outcome, _Claim):
            break
        if outcome is not None:
            return outcome
        if time.monotonic() > deadline:
            raise Conflict(
                "idempotency_request_in_progress",
                "a request with this Idempotency-Key is still running; retry in a moment",
            )
        time.sleep(POLL_S)
    try:
        status, body = fn()
    except BaseException:
        _release(p, outcome)
        raise
    _store(p, outcome, status, body)
    return status, body


def _claim_or_find(p: Platform, scope: str, key: str, digest: str) -> _Claim | Response | None:
    """Our claim, the stored response, or None (another request holds the key now)."""
    token = uuid.uuid4().hex
    now = p.clock.now_ms()
    try:
        with p.db.write() as s:
            row = IdempotencyRecord(
                scope=scope, key=key, request_hash=digest, response_json=PENDING + token, created_at_ms=now
            )
            s.add(row)
            s.flush()
            return _Claim(row.id, token)
    except IntegrityError:
        pass  # the key is taken (on PostgreSQL the insert waited for its holder to commit)
    with p.db.write() as s:
        found = s.scalars(
            select(IdempotencyRecord).where(IdempotencyRecord.scope == scope, IdempotencyRecord.key == key)
        ).first()
        if found is None:
            return None  # its holder failed and released it: claim it on the next round
        if found.request_hash != digest:
            raise Conflict(
                "idempotency_key_reused",
                "this Idempotency-Key was already used for a different request here; use a new key",
            )
        if not found.response_json.startswith(PENDING):
            stored = json.loads(found.response_json)
            return int(stored["status"]), stored["body"]
        if found.created_at_ms > now - LEASE_MS:
            return None
        taken = s.execute(
            update(IdempotencyRecord)
            .where(IdempotencyRecord.id == found.id, IdempotencyRecord.response_json == found.response_json)
            .values(response_json=PENDING + token, created_at_ms=now)
            .execution_options(synchronize_session=False)
        )
        return _Claim(found.id, token) if taken.rowcount == 1 else None  # type: ignore[attr-defined]


def _store(p: Platform, claim: _Claim, status: int, body: Any) -> None:
    with p.db.write() as s:
        s.execute(
            update(IdempotencyRecord)
            .where(IdempotencyRecord.id == claim.record_id, IdempotencyRecord.response_json == PENDING + claim.token)
            .values(response_json=json.dumps({"status": status, "body": body}, separators=(",", ":")))
            .execution_options(synchronize_session=False)
        )


def _release(p: Platform, claim: _Claim) -> None:
    with p.db.write() as s:
        s.execute(
            delete(IdempotencyRecord)
            .where(IdempotencyRecord.id == claim.record_id, IdempotencyRecord.response_json == PENDING + claim.token)
            .execution_options(synchronize_session=False)
        )
