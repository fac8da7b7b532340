"""Files of a stopped rental (issue 26, item 1: ``danlu cp``, the files API and the console's Files page work on
stopped instances too). A stopped rental has no sandbox to enter, so for the platform's own file commands
(danlu.access.filescripts: never a renter's command, or a stopped rental would be free compute) the server makes
a **transfer sandbox**: the same bubblewrap sandbox as a run — the rental's image, the renter's uid, its workspace
at /workspace under its disk limit — with no GPU, no network, one CPU, 1 GiB and 64 processes. Its only process
waits while the server keeps a lease file in its /run/danlu fresh.

It ends when no transfer used it for :data:`IDLE_S`, before the rental starts or goes (``Platform.end_transfers``,
so a resize never checks a file system still mounted in it), or — the server gone — by itself once the lease is
older than :data:`LEASE_S`. It is not billed: the workspace's storage is, as while it is stopped."""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from danlu.access import service
from danlu.access.service import Target
from danlu.access.sessions import Registry
from danlu.backend import EnterError, Limits, RunSpec
from danlu.compute import fstree, hosts, identity, images, views
from danlu.compute.lifecycle import KEEPS_WORKSPACE, Status
from danlu.compute.runs import prepare_control_dir
from danlu.context import Platform
from danlu.core.errors import Conflict
from danlu.db.models import HostRow, Instance, User

log = logging.getLogger(__name__)
IDLE_S = 60.0
LEASE_S = 120
TICK_S = 5.0
LEASE = "lease"
# The transfer sandbox's one process: waits while the lease is fresh (date and stat: coreutils, in every image).
WAIT = (
    f"while sleep {int(TICK_S)}; do t=$(stat -c %Y /run/danlu/{LEASE} 2>/dev/null) || exit 0; "
    f"[ $(($(date +%s) - t)) -lt {LEASE_S} ] || exit 0; done"
)
LIMITS = {"cpus_milli": 1000, "memory_bytes": 1 << 30, "pids": 64}


@dataclass
class _Box:
    handle: str
    used: float  # monotonic time of its last use
    control: Path


def run_id(instance_id: str) -> str:
    return f"{instance_id}-files"


class Transfers:
    """This server's transfer sandboxes, one per stopped rental at most."""

    def __init__(self, p: Platform, registry: Registry) -> None:
        self.p, self.registry = p, registry
        self._lock = threading.Lock()
        self._boxes: dict[str, _Box] = {}
        self._making: dict[str, threading.Lock] = {}
        self._thread: threading.Thread | None = None

    def handle_for(self, inst: Instance) -> str:
        """The transfer sandbox of ``inst`` (stopped, its workspace kept; the caller checked the rights), made
        if it has none; counts as a use."""
        if Status(inst.status) not in KEEPS_WORKSPACE or inst.workspace_released_at_ms is not None:
            raise Conflict(
                "instance_not_running",
                f"instance {inst.id} is {inst.status}: files move in and out of a running or stopped instance",
            )
        if inst.job_id is not None:
            raise Conflict("instance_not_running", f"{inst.id} is a job's run: its job's files move while it runs")
        with self._lock:
            making = self._making.setdefault(inst.id, threading.Lock())
        with making:  # one sandbox per rental, however many requests arrive at once
            with self._lock:
                box = self._boxes.get(inst.id)
                if box is not None:
                    box.used = time.monotonic()
                    return box.handle
            box = self._make(inst)
            with self.p.db.read() as s:
                status = s.scalar(select(Instance.status).where(Instance.id == inst.id))
            if status is None or Status(status) not in KEEPS_WORKSPACE:  # it started (or went) meanwhile
                self._kill(inst.id, box)
                raise Conflict("instance_not_running", f"{inst.id} is {status} now: try again")
            with self._lock:
                self._boxes[inst.id] = box
                if self._thread is None:
                    self._thread = threading.Thread(target=self._keep, name="danlu-transfers", daemon=True)
                    self._thread.start()
            return box.handle

    def _make(self, inst: Instance) -> _Box:
        p = self.p
        rid = run_id(inst.id)
        with p.db.read() as s:
            host = s.get(HostRow, inst.host_id) if inst.host_id is not None else None
            if host is None:
                host = s.query(HostRow).order_by(HostRow.id).first()
            assert host is not None
            disk = hosts.limits_for(host, inst.gpu_count).disk_bytes
            uid = None
            if p.sandbox.sandboxed and p.sandbox.identity == "per-renter uid":
                uid = identity.sandbox_uid(s, inst.user_id, p.settings.sandbox_uid_first, p.settings.sandbox_uid_count)
            image = images.resolve(s, inst.image)
        prepare_control_dir(p, rid)
        control = p.control_dir(rid)
        (control / LEASE).touch(mode=0o644)
        spec = RunSpec(
            run_id=rid,
            log_key=rid,
            command=["sh", "-c", WAIT],
            env={},
            workspace=Path(inst.workspace),
            control_dir=control,
            limits=Limits(disk_bytes=disk, **LIMITS),
            image=image,
            network="none",
            uid=uid,
            host=host.name,
        )
        try:
            handle = p.backend.launch(spec)
            p.backend.start(handle)
        except Exception as exc:
            raise Conflict("session_unavailable", f"cannot open {inst.id}'s workspace for files: {exc}") from exc
        return _Box(handle, time.monotonic(), control)

    def end(self, instance_id: str) -> None:
        """Ends the rental's transfer sandbox, if it has one (it starts, or goes)."""
        with self._lock:
            box = self._boxes.pop(instance_id, None)
        if box is not None:
            self._kill(instance_id, box)

    def _kill(self, instance_id: str, box: _Box) -> None:
        try:
            self.p.backend.kill(box.handle)
            self.p.backend.release(box.handle)
        except (OSError, EnterError) as exc:
            log.warning("could not end the transfer sandbox of %s: %s", instance_id, exc)
        for folder in (box.control, self.p.run_dirs / run_id(instance_id)):
            fstree.remove_tree(folder)

    def count(self) -> int:
        with self._lock:
            return len(self._boxes)

    def _keep(self) -> None:
        while True:
            time.sleep(TICK_S)
            now = time.monotonic()
            with self._lock:
                boxes = dict(self._boxes)
            for iid, box in boxes.items():
                if self.registry.open_count(iid) > 0:
                    box.used = now  # a session or a files request is open in it
                if now - box.used > IDLE_S:
                    with self._lock:
                        if self._boxes.get(iid) is box:
                            del self._boxes[iid]
                    self._kill(iid, box)
                    continue
                try:
                    os.utime(box.control / LEASE)
                except OSError:
                    pass


def files_target(p: Platform, user: User, instance_id: str, transfers: Transfers) -> Target:
    """Where a file command of ``user`` runs: the rental's own sandbox while it runs, else (stopped, its
    workspace kept) its transfer sandbox. Another tenant's instance is ``instance_not_found``."""
    with p.db.read() as s:
        inst = views.get_owned(s, user, instance_id)
        if inst.status == Status.RUNNING:
            return service.enterable(s, user, inst, instance_id)
        service.check_manager(s, user, inst)
        s.expunge(inst)
    return Target(inst.id, transfers.handle_for(inst), {}, transfer=True)


def files_target_of(p: Platform, cred: service.Credentials, instance_id: str, transfers: Transfers) -> Target:
    """:func:`files_target` for a session's credentials (``danlu cp`` over an exec session)."""
    return files_target(p, service.user_of(p, cred, instance_id), instance_id, transfers)
