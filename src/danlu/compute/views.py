"""Read side of instances: what ``ps``, ``show``, ``events`` and ``logs`` see, with live cost.
Another tenant's instance, and a job's run, are indistinguishable from a missing one (404)."""

from __future__ import annotations

import copy
import json
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from sqlalchemy import Engine, Pool, Select, bindparam, event, select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from danlu.accounts import policies, teams
from danlu.accounts.payers import currency
from danlu.billing.metering import unbilled_minor
from danlu.billing.rating import MS_PER_SECOND, billable_seconds
from danlu.billing.storage import MIB as storage_mib
from danlu.billing.storage import PLAN as STORAGE_PLAN
from danlu.billing.storage import policy as storage_policy
from danlu.compute.lifecycle import Status
from danlu.compute.workspace_size import estimated_bytes
from danlu.context import Platform
from danlu.core.errors import Forbidden, NotFound
from danlu.db.models import AllocationRow, Gpu, Instance, InstanceEvent, Price, User

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------- read caches
#
# Hot reads (the current user of every request, offers, a listing's rows) are served from a cache
# that is exact within this process: every write statement a connection runs marks the table it
# wrote, and when the connection goes back to its pool (after its transaction committed or rolled
# back) each marked table's version is bumped. A cached value remembers the versions of the tables
# it was read from and is used only while they are unchanged -- so the next read after any commit
# that touched them (a revoked token, a claimed GPU, a new price) goes to the database again. A
# short TTL bounds what a write by another process on the same database could leave stale.
#
# A write no cached value reads may say so (``.execution_options(unseen_by_caches=True)``): the
# reconcile pass's heartbeat, ``instances.last_seen_alive_ms`` of every live instance every tick,
# which nothing cached shows, made every listing out of date once a tick (issue 29: the p99 of
# ``GET /instances``).
UNSEEN = {"unseen_by_caches": True}

_WRITE = re.compile(
    r"\s*(?:INSERT\s+(?:OR\s+\w+\s+)?INTO|UPDATE(?:\s+OR\s+\w+)?|DELETE\s+FROM|REPLACE\s+INTO)"
    r"\s+(?:\"?\w+\"?\.)?\"?(\w+)",
    re.I,
)
_NOT_A_WRITE = ("SELECT", "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "PRAGMA", "SHOW", "SET ")
_ALL = "*"  # a write whose table could not be read (DDL, CTEs, raw SQL): every table changed
_INFO_KEY = "danlu_tables_written"


class _Versions:
    """Per-table write counters of one database (one connection pool) in this process."""

    def __init__(self) -> None:
        self.by_table: dict[str, int] = {}
        self.lock = threading.Lock()

    def of(self, tables: tuple[str, ...]) -> tuple[int, ...]:
        v = self.by_table
        return (v.get(_ALL, 0), *(v.get(t, 0) for t in tables))

    def bump(self, tables: Iterable[str]) -> None:
        with self.lock:
            for t in tables:
                self.by_table[t] = self.by_table.get(t, 0) + 1


_versions: weakref.WeakKeyDictionary[Pool, _Versions] = weakref.WeakKeyDictionary()
_versions_lock = threading.Lock()


def _versions_of(pool: Pool) -> _Versions:
    v = _versions.get(pool)
    if v is None:
        with _versions_lock:
            v = _versions.setdefault(pool, _Versions())
    return v


@event.listens_for(Engine, "after_cursor_execute")
def _note_write(conn: Connection, _cursor: Any, statement: str, _params: Any, context: Any, _many: bool) -> None:
    head = statement.lstrip()[:9].upper()
    if head.startswith(_NOT_A_WRITE):
        return
    if context is not None and context.execution_options.get("unseen_by_caches"):
        return
    m = _WRITE.match(statement)
    table = m.group(1).lower() if m else _ALL
    written: tuple[_Versions, set[str]] | None = conn.info.get(_INFO_KEY)
    if written is None:
        conn.info[_INFO_KEY] = written = (_versions_of(conn.engine.pool), set())
    written[1].add(table)


@event.listens_for(Pool, "checkin")
def _publish_writes(_dbapi_conn: Any, record: Any) -> None:
    written = record.info.pop(_INFO_KEY, None) if record is not None else None
    if written is not None:
        written[0].bump(written[1])


AGED_S = 5.0  # how long past its TTL or second a value may still be given to a reader while another rebuilds it
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ReadCache(Generic[K, V]):
    """Values read from ``tables``, each used until one of those tables is written in this
    process (see above) or ``ttl_s`` passes; at most ``max_entries`` kept."""

    def __init__(self, tables: tuple[str, ...], ttl_s: float, max_entries: int = 4096) -> None:
        self.tables = tables
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._by_pool: weakref.WeakKeyDictionary[Pool, dict[K, tuple[V, tuple[int, ...], float]]] = (
            weakref.WeakKeyDictionary()
        )

    def get(self, engine: Engine, key: K, load: Callable[[], V]) -> V:
        pool = engine.pool
        versions = _versions_of(pool)
        entries = self._by_pool.get(pool)
        if entries is None:
            entries = self._by_pool.setdefault(pool, {})
        before = versions.of(self.tables)
        now = time.monotonic()
        hit = entries.get(key)
        if hit is not None and hit[1] == before and hit[2] > now:
            return hit[0]
        # ``load`` must start its own transaction (after ``before`` was taken) and may raise: an
        # exception caches nothing. The value is kept under the versions from before the load: had
        # a write been published meanwhile (the load may have read the old rows), it is already out
        # of date and the next call reads again.
        value = load()
        if len(entries) >= self.max_entries:
            entries.clear()
        entries[key] = (value, before, now + self.ttl_s)
        return value

    def peek(self, engine: Engine, key: K, aged: bool = False) -> V | None:
        """The cached value if it is still good, else None (loads nothing). ``aged``: also one up to
        AGED_S past its TTL, as long as nothing in this process wrote its tables since (what a reader
        may be given while another rebuilds it: api/hot.once; a rebuild that hangs on a locked
        database does not stretch what another process's write leaves stale past that)."""
        entries = self._by_pool.get(engine.pool)
        hit = entries.get(key) if entries is not None else None
        if hit is None or hit[1] != _versions_of(engine.pool).of(self.tables):
            return None
        return hit[0] if hit[2] + (AGED_S if aged else 0.0) > time.monotonic() else None

    def clear(self) -> None:
        self._by_pool.clear()


# The API's current user by token digest (api/deps.py, api/hot.py): a revoked or rotated token, a
# suspension, any write to ``users`` in this process is seen by the very next request; one written
# by another process (another server on the same database) within a second (issue 29: "a revoked or
# rotated token fails within 1 s").
CURRENT_USERS: ReadCache[str, dict[str, Any]] = ReadCache(("users", "api_tokens"), ttl_s=1.0)


@dataclass
class InstanceView:
    """What the API and CLI show about an instance, with live cost."""

    id: str
    name: str
    status: str
    status_reason: str
    gpu_model: str
    gpu_count: int
    gpu_indices: list[int]
    simulated: bool
    interruptible: bool
    command: list[str]
    exit_code: int | None
    billed_seconds: int
    cost_minor: int
    price_per_hour_minor: int | None
    currency: str
    created_at_ms: int
    image: str = "host"
    sandbox: dict[str, object] | None = None  # what the current/last run was given (uid, limits, network)
    storage_cost_minor: int = 0  # the part of cost_minor that is stored workspace while stopped
    # What staying stopped costs per day (its workspace at the storage price), and when a stopped
    # instance's workspace will be released; shown by `show` (and so after `stop`), not by `ps`.
    stopped_storage_per_day_minor: int | None = None
    workspace_release_at_ms: int | None = None
    workspace_released_at_ms: int | None = None
    hold_id: str | None = None  # the package or reservation its current run is on (prepaid: 0 per second)
    # Its own limits (docs/telemetry.md) and why it last stopped (the measurement, for a policy stop).
    idle_stop_s: int | None = None
    idle_threshold_pm: int = 50
    max_duration_s: int | None = None
    stop_reason: str = ""
    stop_cause: str = ""  # lifecycle.StopCause, or "" if it never stopped
    backend_ref: str | None = None  # where its current or last run is (slurm:JOBID, local:PID); `show` only
    last_used_ms: int | None = None  # a person's last use (telemetry.activity); `show` only
    last_used_by: str | None = None


def get_owned(
    session: Session, user: User, instance_id: str, *, for_update: bool = False, removed_too: bool = False
) -> Instance:
    """The user's instance; ``for_update`` locks its row for the rest of the transaction (every
    write path does, so concurrent start/stop/rm of one instance are serialised on PostgreSQL).
    A removed instance is not found unless ``removed_too`` (reads of its record: show, cost)."""
    inst = session.get(Instance, instance_id, with_for_update=for_update, populate_existing=for_update)
    if (
        inst is None
        or (inst.status == Status.DESTROYED and not removed_too)
        or inst.job_id is not None
        or not policies.may_see(session, user, inst.user_id, inst.billing_account_id)
    ):
        # Another tenant's (or another team's) instance is indistinguishable from a missing one.
        raise NotFound("instance_not_found", f"no instance {instance_id!r}; list yours with `danlu ps`")
    if for_update and not policies.may_manage(session, user, inst.user_id, inst.billing_account_id):
        raise Forbidden(
            "team_role_required", "only the renter or the team's owners and admins can change this instance"
        )
    return inst


@dataclass(frozen=True)
class _Shared:
    """What every row of a listing shares: currency, simulated models, list prices."""

    currency: str
    simulated_models: frozenset[str]
    prices: dict[str, int]


_SHARED: ReadCache[str, _Shared] = ReadCache(("gpus", "prices", "settings"), ttl_s=1.0)


@dataclass(frozen=True)
class _Context:
    """What every row of a listing shares, read once per request."""

    currency: str
    now_ms: int
    simulated_models: frozenset[str]
    prices: dict[str, int]
    shared: _Shared | None = None  # what it was built from (views computed from another are stale)

    @classmethod
    def read(cls, p: Platform, now_ms: int) -> _Context:
        def load() -> _Shared:
            # A session of its own: its snapshot must start after the cache took the versions.
            with p.db.read() as s:
                conn = s.connection()
                simulated = frozenset(conn.scalars(select(Gpu.model).where(Gpu.simulated.is_(True)).distinct()))
                prices = {m: v for m, v in conn.execute(select(Price.gpu_model, Price.price_per_hour_minor)).all()}
                return _Shared(currency(s), simulated, prices)

        shared = _SHARED.get(p.db.engine, "shared", load)
        return cls(shared.currency, now_ms, shared.simulated_models, shared.prices, shared)


@dataclass(eq=False)
class _Listed:
    """What of one instance does not change with the clock (rows as read, JSON parsed), and the
    last view computed from it with the span of clock times over which that view holds."""

    inst: Any  # an Instance, or a Core row with its columns
    allocs: tuple[Any, ...]  # its Allocations (ORM objects or Core rows)
    current: Any | None  # the one that is the instance's current allocation
    command: tuple[str, ...]
    sandbox: dict[str, object] | None
    gpu_indices: tuple[int, ...]
    memo: tuple[InstanceView, _Shared | None, int, int] | None = None  # (view, shared, from_ms, until_ms)

    @classmethod
    def of(cls, inst: Any, allocs: Sequence[Any]) -> _Listed:
        current = next((a for a in allocs if a.id == inst.current_allocation_id), None)
        return cls(
            inst,
            tuple(allocs),
            current,
            tuple(json.loads(inst.command_json)),
            json.loads(inst.sandbox_json) if inst.sandbox_json else None,
            tuple(int(i) for i in current.gpu_indices.split(",") if i) if current else (),
        )


def _view(listed: _Listed, ctx: _Context) -> InstanceView:
    """The instance with its live cost at ``ctx.now_ms``."""
    now_ms = ctx.now_ms
    billed_seconds = 0
    cost = 0
    stored = 0
    for a in listed.allocs:
        amount = a.billed_minor + (0 if a.settled else unbilled_minor(a, now_ms))
        cost += amount
        if a.plan == STORAGE_PLAN:
            stored += amount
        else:
            billed_seconds += billable_seconds(a.started_at_ms, a.ended_at_ms if a.ended_at_ms is not None else now_ms)
    inst, current = listed.inst, listed.current
    return InstanceView(
        id=inst.id,
        name=inst.name,
        status=inst.status,
        status_reason=inst.status_reason,
        gpu_model=inst.gpu_model,
        gpu_count=inst.gpu_count,
        gpu_indices=list(listed.gpu_indices),
        simulated=inst.gpu_model in ctx.simulated_models,
        interruptible=inst.interruptible,
        command=list(listed.command),
        exit_code=inst.exit_code,
        billed_seconds=billed_seconds,
        cost_minor=cost,
        price_per_hour_minor=current.price_per_hour_minor if current else ctx.prices.get(inst.gpu_model),
        currency=ctx.currency,
        created_at_ms=inst.created_at_ms,
        image=inst.image,
        sandbox=dict(listed.sandbox) if listed.sandbox is not None else None,
        storage_cost_minor=stored,
        hold_id=getattr(current, "hold_id", None) if current else None,
        idle_stop_s=inst.idle_stop_s,
        idle_threshold_pm=inst.idle_threshold_pm,
        max_duration_s=inst.max_duration_s,
        stop_reason=inst.stop_reason,
        stop_cause=inst.stop_cause,
    )


def _holds_until(listed: _Listed, now_ms: int) -> int:
    """Until when (ms, exclusive) the view at ``now_ms`` stays the same: billed seconds and live
    cost change only when a running allocation completes another whole second (or ends)."""
    until = 2**63
    for a in listed.allocs:
        if a.ended_at_ms is None or now_ms < a.ended_at_ms:
            elapsed = max(0, now_ms - a.started_at_ms)
            until = min(until, a.started_at_ms + (elapsed // MS_PER_SECOND + 1) * MS_PER_SECOND)
            if a.ended_at_ms is not None:
                until = min(until, a.ended_at_ms)
    return until


def _listed_view(listed: _Listed, ctx: _Context) -> InstanceView:
    """``_view`` computed at most once per billed second of the instance; each caller gets its own
    copy of the view (its lists and dict are shared: read them, do not change them)."""
    now_ms = ctx.now_ms
    memo = listed.memo
    if memo is None or memo[1] is not ctx.shared or not memo[2] <= now_ms < memo[3]:
        memo = (_view(listed, ctx), ctx.shared, now_ms, _holds_until(listed, now_ms))
        listed.memo = memo
    return copy.copy(memo[0])


def show(p: Platform, user: User, instance_id: str) -> InstanceView:
    with p.db.read() as s:
        inst = get_owned(s, user, instance_id, removed_too=True)  # `danlu show` after `rm`: its record
        allocs = list(s.scalars(select(AllocationRow).where(AllocationRow.instance_id == inst.id)))
        view = _view(_Listed.of(inst, allocs), _Context.read(p, p.clock.now_ms()))
        view.backend_ref = p.backend.ref(inst.run_handle) if inst.run_handle else None
        if (seen := p.activity.last(inst.id)) is not None:
            view.last_used_ms, view.last_used_by = seen.at_ms, seen.kind
        if inst.job_id is None and inst.workspace_released_at_ms is None:
            pol = storage_policy(s)
            stored = next((a for a in allocs if a.id == inst.storage_allocation_id), None)
            size_mib = stored.gpu_count if stored is not None else None
            view.stopped_storage_per_day_minor = (
                pol.per_day_minor(size_mib * storage_mib)
                if size_mib is not None
                else pol.per_day_minor(estimated_bytes(p, inst.workspace))
            )
            if inst.stopped_at_ms is not None:
                since = inst.storage_warned_at_ms
                view.workspace_release_at_ms = (
                    since + pol.release_after_s * 1000
                    if since is not None
                    else inst.stopped_at_ms + (pol.warn_after_s + pol.release_after_s) * 1000
                )
        view.workspace_released_at_ms = inst.workspace_released_at_ms
        return view


_INSTANCE_COLUMNS = (
    Instance.id,
    Instance.name,
    Instance.status,
    Instance.status_reason,
    Instance.gpu_model,
    Instance.gpu_count,
    Instance.interruptible,
    Instance.command_json,
    Instance.exit_code,
    Instance.current_allocation_id,
    Instance.created_at_ms,
    Instance.image,
    Instance.sandbox_json,
    Instance.idle_stop_s,
    Instance.idle_threshold_pm,
    Instance.max_duration_s,
    Instance.stop_reason,
    Instance.stop_cause,
)
_ALLOCATION_COLUMNS = (
    AllocationRow.id,
    AllocationRow.instance_id,
    AllocationRow.gpu_count,
    AllocationRow.gpu_indices,
    AllocationRow.price_per_hour_minor,
    AllocationRow.plan,
    AllocationRow.discount_bp,
    AllocationRow.tariffs_json,
    AllocationRow.started_at_ms,
    AllocationRow.ended_at_ms,
    AllocationRow.billed_until_ms,
    AllocationRow.billed_minor,
    AllocationRow.settled,
    AllocationRow.hold_id,
)


def _listing_statements(include_destroyed: bool) -> tuple[Select[*tuple[Any, ...]], Select[*tuple[Any, ...]]]:
    """The user's listed instances, and all their allocations, as two Core selects with a bound
    ``user_id`` (built once: building a statement per request costs more than running it)."""
    listed = [Instance.user_id == bindparam("user_id"), Instance.job_id.is_(None)]
    if not include_destroyed:
        listed.append(Instance.status != Status.DESTROYED.value)
    insts = select(*_INSTANCE_COLUMNS).where(*listed).order_by(Instance.created_at_ms)
    allocs = (
        select(*_ALLOCATION_COLUMNS)
        .join(Instance, Instance.id == AllocationRow.instance_id)
        .where(*listed)
        .order_by(AllocationRow.id)
    )
    return insts, allocs


_LISTING = {flag: _listing_statements(flag) for flag in (False, True)}


# A user's listing as read (rows only: the live cost is computed per request from the clock).
_LISTINGS: ReadCache[tuple[int, bool], tuple[_Listed, ...]] = ReadCache(("instances", "allocations"), ttl_s=1.0)


def list_instances(p: Platform, user: User, include_destroyed: bool = False) -> list[InstanceView]:
    """Two Core selects (the user's instances, then all their allocations), no ORM objects; kept
    until an instance or allocation is written in this process (the control loop's reconcile pass
    does every tick while anything runs) or a second passes."""
    return _listing(p, user, include_destroyed, p.clock.now_ms())[0]


def _listing(
    p: Platform, user: User, include_destroyed: bool, now_ms: int
) -> tuple[list[InstanceView], tuple[object, object]]:
    """The views at ``now_ms``, and what they were computed from (the cached rows and shared
    context: the same objects until something changed)."""
    inst_stmt, alloc_stmt = _LISTING[include_destroyed]

    def load() -> tuple[_Listed, ...]:
        params = {"user_id": user.id}
        with p.db.read() as s:
            conn = s.connection()
            insts = conn.execute(inst_stmt, params).all()
            by_inst: dict[str, list[Any]] = {}
            if insts:
                for a in conn.execute(alloc_stmt, params):
                    by_inst.setdefault(a.instance_id, []).append(a)
        return tuple(_Listed.of(i, by_inst.get(i.id, [])) for i in insts)

    listed = _LISTINGS.get(p.db.engine, (user.id, include_destroyed), load)
    ctx = _Context.read(p, now_ms)
    return [_listed_view(li, ctx) for li in listed], (listed, ctx.shared)


def list_team_instances(p: Platform, user: User, team: str, include_destroyed: bool = False) -> list[InstanceView]:
    """The instances ``team`` pays for, whoever rented them, for any member (viewers too, as docs/billing.md
    says; until issue 11's last stop a member saw a teammate's instance only by typing its id). Not
    cached: a team's listing is read far less often than a person's."""
    with p.db.read() as s:
        payer = teams.payer_named(s, user, team)
        where = [Instance.billing_account_id == payer, Instance.job_id.is_(None)]
        if not include_destroyed:
            where.append(Instance.status != Status.DESTROYED.value)
        insts = list(s.scalars(select(Instance).where(*where).order_by(Instance.created_at_ms)))
        allocs: dict[str, list[AllocationRow]] = {i.id: [] for i in insts}
        if insts:
            for a in s.scalars(
                select(AllocationRow).where(AllocationRow.instance_id.in_(allocs)).order_by(AllocationRow.id)
            ):
                allocs[a.instance_id].append(a)
        ctx = _Context.read(p, p.clock.now_ms())
        return [_view(_Listed.of(i, allocs[i.id]), ctx) for i in insts]


R = TypeVar("R")
_RENDERED: weakref.WeakKeyDictionary[Pool, dict[Hashable, tuple[tuple[object, object], int, int, Any]]] = (
    weakref.WeakKeyDictionary()
)


def rendered_listing(
    p: Platform, user_id: int, include_destroyed: bool, kind: str = "", aged: bool = False
) -> object | None:
    """What :func:`render_listing` would answer from its memo without reading anything, else None
    (the API serves a hit on the event loop, or before routing: api/hot.py; a miss goes to the
    thread pool). ``aged``: also a rendering of an earlier second (up to AGED_S), or one whose rows
    outlived their TTL, as long as nothing in this process wrote what it shows since: what the other readers get
    while one rebuilds it (api/hot.once), so that no reader waits on the rebuild once a second."""
    memo = _RENDERED.get(p.db.engine.pool)
    hit = memo.get((user_id, include_destroyed, kind)) if memo is not None else None
    second = _whole_second(p.clock.now_ms())
    if hit is None or not hit[1] <= second < hit[2] + (int(AGED_S * MS_PER_SECOND) if aged else 0):
        return None
    # Still the same rows and context objects (the caches above hand out the same objects until
    # something changed; the memo holds them, so identity is safe): nothing changed.
    listed = _LISTINGS.peek(p.db.engine, (user_id, include_destroyed), aged)
    shared = _SHARED.peek(p.db.engine, "shared", aged)
    return hit[3] if listed is hit[0][0] and shared is hit[0][1] and listed is not None else None


def _whole_second(now_ms: int) -> int:
    return now_ms // MS_PER_SECOND * MS_PER_SECOND


def render_listing(
    p: Platform, user: User, include_destroyed: bool, render: Callable[[list[InstanceView]], R], kind: str = ""
) -> R:
    """``render(list_instances(...))`` (e.g. the response's JSON bytes), computed again only when
    the listing would change: an instance, allocation, GPU, price or setting was written in this
    process, or the clock entered another whole second. The live cost and billed seconds of every
    row are as of the first call in that second (each row's seconds and cost at the same instant),
    kept until the second ends: one rendering a second for the whole listing (with 100 running
    instances, holding it only while no row completed another second rendered it again about
    every 10 ms). ``kind`` names the rendering (one cached value per user, flag and kind); the
    value is shared by every caller until then, so it must be immutable (bytes)."""
    kept = rendered_listing(p, user.id, include_destroyed, kind)
    if kept is not None:
        return cast(R, kept)
    memo = _RENDERED.get(p.db.engine.pool)
    if memo is None:
        memo = _RENDERED.setdefault(p.db.engine.pool, {})
    now_ms = p.clock.now_ms()
    second = _whole_second(now_ms)
    views, source = _listing(p, user, include_destroyed, now_ms)
    value = render(views)
    if len(memo) >= 4096:
        memo.clear()
    memo[(user.id, include_destroyed, kind)] = (source, second, second + MS_PER_SECOND, value)
    return value


def events(p: Platform, user: User, instance_id: str) -> list[InstanceEvent]:
    with p.db.read() as s:
        inst = get_owned(s, user, instance_id)
        return list(
            s.scalars(select(InstanceEvent).where(InstanceEvent.instance_id == inst.id).order_by(InstanceEvent.id))
        )


def read_log(p: Platform, user: User, instance_id: str, offset: int) -> tuple[str, int]:
    """A chunk of the instance's captured stdout/stderr from byte ``offset``; returns (text, next)."""
    with p.db.read() as s:
        get_owned(s, user, instance_id)
    return p.backend.read_output(instance_id, offset)
