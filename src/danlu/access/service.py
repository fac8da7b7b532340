"""Who may open a session into what: the database side of a session, read at its start and again
every :data:`RECHECK_S` while it lasts (so a revoked token, a member removed from the team, a
suspension or a stop ends it)."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field, replace

from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from danlu.accounts import policies
from danlu.accounts.credentials import session_user
from danlu.accounts.service import authenticate, hash_token
from danlu.compute import views
from danlu.compute.lifecycle import KEEPS_WORKSPACE, Status
from danlu.compute.runs import session_env
from danlu.context import Platform
from danlu.core.errors import Conflict, DanluError, Forbidden, NotFound, Unauthorized
from danlu.db.models import Instance, Job, PortLink, SshKey, User

RECHECK_S = 15.0  # a lost right ends an open session within this (the issue asks for a minute)
# A proxied app's page makes many requests a second: each is checked, but a decision is reused for
# this long (per credential and object), so a revoked token or a removed member is refused within it.
DECISION_TTL_S = 2.0
_decisions: dict[tuple[str, str, str], tuple[float, Target]] = {}
_decisions_lock = threading.Lock()


@dataclass(frozen=True)
class Credentials:
    """How a session's client says who it is: an API token (``Authorization: Bearer``), or the
    web console's session cookie (a browser: the terminal tab, a proxied app's pages)."""

    bearer: str | None = None
    cookie: str | None = None
    ssh_key: str | None = None  # the SHA-256 fingerprint of the key an SSH client proved it holds
    link: str | None = None  # a port link's token (danlu.access.links): that one port of that instance
    port: int | None = None  # the port a link is presented for
    # The client's address: wrong credentials from it are counted as the API counts wrong tokens (past 20, each
    # try waits: 429), so the port proxy and sessions are no cheaper way to guess. Not part of the decision.
    addr: str | None = field(default=None, compare=False)

    def key(self) -> str:
        """What the cache of decisions knows these credentials by (a hash: no token kept in clear)."""
        return hash_token(f"{self.bearer}/{self.cookie}/{self.ssh_key}/{self.link}/{self.port}")


@dataclass(frozen=True)
class Target:
    """A running instance a user may open a session into."""

    instance_id: str
    run_handle: str
    env: dict[str, str]  # the renter's own variables and the platform's, as the run has them
    job_id: str | None = None  # a job's run: re-checked through the job
    transfer: bool = False  # a stopped rental's transfer sandbox (danlu.access.transfer): file commands only


def _check(inst_status: str, handle: str | None, instance_id: str) -> str:
    if inst_status != Status.RUNNING or handle is None:
        raise Conflict(
            "instance_not_running",
            f"instance {instance_id} is {inst_status}: sessions open into a running instance "
            f"(`danlu start {instance_id}`)",
        )
    return handle


def _user(s: Session, p: Platform, cred: Credentials, object_id: str) -> User:
    """Who ``cred`` is; wrong credentials are counted against the client's address (``cred.addr``)."""
    guess = [f"addr:{cred.addr}"] if cred.addr and (cred.bearer or cred.cookie or cred.link) else []
    p.token_throttle.check(guess, p.clock.now_ms())
    try:
        return _who(s, p, cred, object_id)
    except Unauthorized:
        p.token_throttle.failed(guess, p.clock.now_ms())
        raise


def _who(s: Session, p: Platform, cred: Credentials, object_id: str) -> User:
    if cred.link is not None:  # the person who made the link, for that instance and port only
        link = s.execute(select(PortLink).where(PortLink.token_hash == hash_token(cred.link))).scalar_one_or_none()
        if link is None or link.revoked_at_ms is not None or link.instance_id != object_id or link.port != cred.port:
            raise Unauthorized("invalid_link", "this link was revoked or is for another app; ask its owner for another")
        maker = s.get(User, link.created_by)
        assert maker is not None
        return maker
    if cred.ssh_key is not None:
        row = s.execute(select(SshKey.user_id).where(SshKey.fingerprint == cred.ssh_key)).first()
        user = s.get(User, row.user_id) if row is not None else None
        if user is None:
            raise Unauthorized("unknown_key", "this SSH key is not registered (or was removed): `danlu key add FILE`")
        return user
    if cred.bearer is None and cred.cookie is not None:
        found = session_user(s, cred.cookie, p.clock.now_ms())
        if found is None:
            raise Unauthorized("session_expired", "your console session has ended; sign in again")
        return found[0]
    return authenticate(s, cred.bearer)


def check_manager(s: Session, user: User, inst: Instance) -> None:
    """Sessions and files are the renter's, or the team's owners' and admins', and nobody's while suspended."""
    if not policies.may_manage(s, user, inst.user_id, inst.billing_account_id):
        raise Forbidden(
            "team_role_required", "only the renter or the team's owners and admins can open a session into it"
        )
    if user.suspended_reason is not None:
        raise Forbidden("user_suspended", f"your account is suspended ({user.suspended_reason}); ask the operator")


def user_of(p: Platform, cred: Credentials, object_id: str) -> User:
    with p.db.read() as s:
        user = _user(s, p, cred, object_id)
        s.expunge(user)
        return user


def enterable(s: Session, user: User, inst: Instance, what: str) -> Target:
    check_manager(s, user, inst)
    handle = _check(inst.status, inst.run_handle, what)  # check_manager said who; this, whether it runs
    return Target(inst.id, handle, session_env(s, inst))


def target(p: Platform, cred: Credentials, instance_id: str) -> tuple[User, Target]:
    """The caller and the instance, if the caller may manage it (its renter, or the team's owners
    and admins) and it is running. Another tenant's instance is ``instance_not_found``."""
    with p.db.read() as s:
        user = _user(s, p, cred, instance_id)
        t = enterable(s, user, views.get_owned(s, user, instance_id), instance_id)
        s.expunge(user)
        return user, t


def job_target(p: Platform, cred: Credentials, job_id: str) -> tuple[User, Target]:
    """The caller and the job's current run, as :func:`target` (another tenant's job: ``job_not_found``;
    a job between runs: ``job_not_running``)."""
    with p.db.read() as s:
        user = _user(s, p, cred, job_id)
        job = s.get(Job, job_id) if len(job_id) <= 32 else None
        if job is None or not policies.may_see(s, user, job.user_id, job.billing_account_id):
            raise NotFound("job_not_found", f"no job {job_id!r}; list yours with `danlu jobs`")
        inst = s.get(Instance, job.current_instance_id) if job.current_instance_id else None
        if inst is not None and inst.status == Status.PENDING:  # placed, its run still starting
            raise Conflict("job_not_running", f"job {job_id}'s run {inst.id} is starting; try again in a few seconds")
        if inst is None or inst.status != Status.RUNNING:
            raise Conflict("job_not_running", f"job {job_id} is {job.status}: sessions open into a running job's run")
        t = enterable(s, user, inst, job_id)
        s.expunge(user)
        return user, replace(t, job_id=job.id)


def decided(cred: Credentials, kind: str, object_id: str) -> Target | None:
    """A decision of :func:`cached_target` still fresh, else None: no database, so the event loop
    asks it first and goes to a thread only to decide anew."""
    key = (cred.key(), kind, object_id)
    with _decisions_lock:
        hit = _decisions.get(key)
    return hit[1] if hit is not None and hit[0] > time.monotonic() else None


def cached_target(p: Platform, cred: Credentials, kind: str, object_id: str) -> Target:
    """:func:`target` (``kind`` "instance") or :func:`job_target` ("job"), a decision reused for
    :data:`DECISION_TTL_S` (the port proxy's per-request check)."""
    hit = decided(cred, kind, object_id)
    if hit is not None:
        return hit
    _, t = (job_target if kind == "job" else target)(p, cred, object_id)
    key = (cred.key(), kind, object_id)
    with _decisions_lock:
        if len(_decisions) > 10_000:
            _decisions.clear()
        _decisions[key] = (time.monotonic() + DECISION_TTL_S, t)
    return t


def still_allowed(p: Platform, cred: Credentials, t: Target) -> DanluError | None:
    """None while the caller may keep the session open, else why not (for its status frame). A re-check is
    not a guess: a token revoked under an open session is not counted against its address."""
    cred = replace(cred, addr=None)
    if t.transfer:  # a stopped rental's files: while it stays stopped and the caller may manage it
        try:
            with p.db.read() as s:
                user = _user(s, p, cred, t.instance_id)
                inst = views.get_owned(s, user, t.instance_id)
                check_manager(s, user, inst)
                if Status(inst.status) not in KEEPS_WORKSPACE:
                    return Conflict("instance_not_running", f"{t.instance_id} is {inst.status} now: open a new session")
        except DanluError as exc:
            return exc
        return None
    try:
        _, now = any_target(p, cred, t.job_id or t.instance_id)
    except DanluError as exc:
        return exc
    if now.run_handle != t.run_handle:
        return Conflict("instance_not_running", f"{t.job_id or t.instance_id} was restarted: open a new session")
    return None


async def lost(p: Platform, cred: Credentials, t: Target) -> DanluError:
    """Returns, with the reason, once the caller may no longer use ``t`` (checked every
    :data:`RECHECK_S`): what a connection held open through danlu (a proxied app's socket, a
    tunnel, ``ssh -L``) runs beside, so it ends as a shell does."""
    while True:
        await asyncio.sleep(RECHECK_S)
        why = await run_in_threadpool(still_allowed, p, cred, t)
        if why is not None:
            return why


def running_of(p: Platform, user: User, instance_id: str) -> Target:
    """:func:`target` for a caller already authenticated (a REST route's bearer token)."""
    with p.db.read() as s:
        return enterable(s, user, views.get_owned(s, user, instance_id), instance_id)


def ports_of(p: Platform, user: User, instance_id: str) -> list[int]:
    """The ports something listens on inside the user's running instance ([] when it is not running
    or the user may not open sessions into it): the console's links to the renter's web apps."""
    with p.db.read() as s:
        inst = views.get_owned(s, user, instance_id)
        if inst.status != Status.RUNNING or inst.run_handle is None:
            return []
        if not policies.may_manage(s, user, inst.user_id, inst.billing_account_id):
            return []
        handle: str = inst.run_handle
    return p.backend.listening(handle)


def any_target(p: Platform, cred: Credentials, object_id: str) -> tuple[User, Target]:
    """An instance (``i-…``) or a running job's run (``j-…``): what an SSH user name names."""
    return job_target(p, cred, object_id) if object_id.startswith("j-") else target(p, cred, object_id)
