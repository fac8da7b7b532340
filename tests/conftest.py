"""Shared fixtures: every database test runs on SQLite and on PostgreSQL.

PostgreSQL is the server at 127.0.0.1:5432 (database ``test``, trust auth), or $DANLU_TEST_PG_URL.
Each test gets its own schema, dropped afterwards. When no server is reachable the PostgreSQL
variants are skipped with a message, except under CI=true, where they fail instead.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from danlu.compute.gpus import parse_simulated_spec
from danlu.compute.sandbox.probe import make_local_backend
from danlu.context import Platform, Settings
from danlu.core.clock import Clock, FakeClock, SystemClock
from danlu.db.engine import open_database
from danlu.server.app import create_app
from danlu.server.bootstrap import bootstrap

PG_URL = os.environ.get("DANLU_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def _pg_reachable() -> str | None:
    try:
        import psycopg

        with psycopg.connect(PG_URL.replace("postgresql+psycopg", "postgresql"), connect_timeout=3):
            return None
    except Exception as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


_PG_PROBLEM: str | None = _pg_reachable()


def _sandbox_problem() -> str | None:
    from danlu.compute.sandbox.probe import bwrap_works

    ok, why = bwrap_works(os.geteuid() == 0)
    return None if ok else why


_SANDBOX_PROBLEM: str | None = _sandbox_problem()


def require_sandbox() -> None:
    """Sandbox tests need bubblewrap (``make test`` installs it as root); mandatory under CI=true."""
    if _SANDBOX_PROBLEM is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"no sandbox: {_SANDBOX_PROBLEM} (CI=true: sandbox tests are mandatory)")
    pytest.skip(f"no sandbox here: {_SANDBOX_PROBLEM}")


def _pg_or_skip() -> None:
    if _PG_PROBLEM is None:
        return
    msg = f"PostgreSQL not reachable at {PG_URL}: {_PG_PROBLEM}"
    if os.environ.get("CI") == "true":
        pytest.fail(msg + " (CI=true: PostgreSQL tests are mandatory)")
    pytest.skip(msg + " — start PostgreSQL or set DANLU_TEST_PG_URL to run these")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'danlu.db'}"
        return
    with fresh_pg_schema() as url:
        yield url


@contextlib.contextmanager
def fresh_pg_schema() -> Iterator[str]:
    """A URL of a new, empty PostgreSQL schema, dropped afterwards (skips or fails as the suite's
    PostgreSQL rule says when no server is reachable)."""
    _pg_or_skip()
    import psycopg

    schema = "t_" + secrets.token_hex(6)
    raw = PG_URL.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(raw, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(raw, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


_SANDBOX_BASE = Path(tempfile.gettempdir()) / f"danlu-test-sandboxes-{os.getpid()}"


def sandbox_folder() -> Path:
    """A sandbox folder for one test platform. pytest's tmp_path lies under a 0700 folder, which a
    renter's uid cannot traverse (see danlu.compute.sandbox.probe.sandbox_dir_for)."""
    _SANDBOX_BASE.mkdir(mode=0o711, exist_ok=True)
    os.chmod(_SANDBOX_BASE, 0o711)
    folder = Path(tempfile.mkdtemp(dir=_SANDBOX_BASE))
    os.chmod(folder, 0o711)
    return folder


@pytest.fixture(scope="session", autouse=True)
def _remove_sandbox_folders() -> Iterator[None]:
    yield
    shutil.rmtree(_SANDBOX_BASE, ignore_errors=True)


# The host-wide registry of --sandbox-uids claims (danlu.server.uid_claims): the suite's `danlu server`s
# share uid ranges on purpose (per worker, or the default), so each test process has its own registry and
# each test its own, or two tests' servers would refuse each other. tests/server/test_uid_claims.py shares one.
# The suite's `danlu server`s keep the disk watcher: with a loop mount per workspace, the instances tests leave
# behind would leave mounts and loop devices behind. tests/sandbox/test_disk_image.py tests the kernel's limit
# (the production default where the server is root), releasing everything it mounts.
os.environ.setdefault("DANLU_DISK_LIMIT", "watch")
os.environ.setdefault("DANLU_UID_REGISTRY", str(_SANDBOX_BASE.with_name(f"danlu-test-uids-{os.getpid()}.json")))


@pytest.fixture(autouse=True)
def _own_uid_registry(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DANLU_UID_REGISTRY", str(tmp_path_factory.mktemp("uids") / "sandbox-uids.json"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules with long tests (marked ``slow``, longest first by the mark's ``seconds``: the
    drills) first, so that under pytest-xdist (which `make test` runs by module, --dist loadscope)
    they start at once beside the many short ones instead of running alone at the end of the suite;
    the order is otherwise the collection's."""
    weight: dict[str, float] = {}
    for item in items:
        mark = item.get_closest_marker("slow")
        if mark is not None:
            module = item.nodeid.split("::")[0]
            weight[module] = max(weight.get(module, 0.0), float(mark.kwargs.get("seconds", 60)))
    items.sort(key=lambda item: -weight.get(item.nodeid.split("::")[0], 0.0))


WORKER_UIDS = 100_000


def worker_uid_first() -> int:
    """Renters' uids for this test process: apart per pytest-xdist worker (gw0, gw1 …), so two
    tests running at once never give two renters the same uid (one could signal the other's
    processes), and apart from a default server's range (2,000,000) and the kill drill's."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) + 1 if worker.startswith("gw") and worker[2:].isdigit() else 0
    return 2_000_000 + index * WORKER_UIDS


_TEMPLATE_LOCK = threading.Lock()
_TEMPLATE: list[Path] = []


_PG_TEMPLATE: list[tuple[str, str]] = []  # (the template schema's name, its pg_dump with rows as INSERTs)


def _pg_from_migrated_template(db_url: str) -> None:
    """A new, empty PostgreSQL schema gets the tables, triggers, functions and rows of one migrated once per test
    process, replayed from its ``pg_dump`` (0.11 s; the 25 migrations took 0.49 s, several hundred times a run).
    Where pg_dump is missing or fails, bootstrap migrates as before: this only saves time."""
    marker = "search_path%3D"
    if marker not in db_url or shutil.which("pg_dump") is None:
        return
    import psycopg

    schema = db_url.rsplit(marker, 1)[1]
    raw = PG_URL.replace("postgresql+psycopg", "postgresql")
    with _TEMPLATE_LOCK:
        if not _PG_TEMPLATE:
            from danlu.db.engine import migrate

            with fresh_pg_schema() as url:
                db = open_database(url)
                migrate(db)
                db.engine.dispose()
                name = url.rsplit(marker, 1)[1]
                dump = subprocess.run(
                    ["pg_dump", "--no-owner", "--no-privileges", "--inserts", "-n", name, raw],
                    capture_output=True,
                    text=True,
                )
            if dump.returncode != 0:
                return
            lines = dump.stdout.splitlines()  # psql's own commands (\restrict) and the schema's creation left out
            script = "\n".join(x for x in lines if not x.startswith("\\") and x != f"CREATE SCHEMA {name};")
            _PG_TEMPLATE.append((name, script))
    name, script = _PG_TEMPLATE[0]
    with psycopg.connect(raw, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s", (schema,)).fetchone():
            return  # not a new schema
        conn.execute(script.replace(name, schema).encode())


def _from_migrated_template(db_url: str) -> None:
    """A new SQLite file starts as a copy of one migrated once per test process (bootstrap's
    migrate then finds it at head): 12 migrations cost about 0.3 s, several hundred times a run.
    A new PostgreSQL schema, likewise (:func:`_pg_from_migrated_template`).
    Migrating from empty is still tested (tests/db, and every `danlu server` the CLI tests start)."""
    if db_url.startswith("postgresql"):
        _pg_from_migrated_template(db_url)
        return
    prefix = "sqlite:///"
    if not db_url.startswith(prefix) or Path(db_url.removeprefix(prefix)).exists():
        return
    with _TEMPLATE_LOCK:
        if not _TEMPLATE:
            from danlu.db.engine import migrate

            path = Path(tempfile.mkdtemp(prefix="danlu-test-template-")) / "template.db"
            db = open_database(prefix + str(path))
            migrate(db)
            db.engine.dispose()
            _TEMPLATE.append(path)
    shutil.copyfile(_TEMPLATE[0], db_url.removeprefix(prefix))


def make_platform(
    db_url: str,
    data_dir: Path,
    clock: Clock,
    spec: str = "A100-80GB:2,T4:2",
    *,
    network: str = "auto",
    cgroups: str = "auto",
    disk: str = "watch",
    encrypt: bool = False,
    host_settings: dict[str, int | str] | None = None,
    **settings: object,
) -> tuple[Platform, str]:
    """A bootstrapped platform on the real local backend (sandboxed wherever bubblewrap works,
    as in production); returns it and the admin token."""
    _from_migrated_template(db_url)
    db = open_database(db_url)
    backend, sandbox = make_local_backend(data_dir, network=network, cgroups=cgroups, disk=disk, encrypt=encrypt)
    sandbox_dir = sandbox_folder() if sandbox.identity == "per-renter uid" else None
    boot = bootstrap(
        db,
        data_dir,
        "CNY",
        parse_simulated_spec(spec, "local"),
        clock.now_ms(),
        host_settings={"network_policy": sandbox.network, **(host_settings or {})},
        sandbox=sandbox,
        sandbox_dir=sandbox_dir,
    )
    settings.setdefault("sandbox_uid_first", worker_uid_first())
    settings.setdefault("sandbox_uid_count", WORKER_UIDS)
    st = Settings(data_dir=data_dir, sandbox_dir=sandbox_dir, **settings)  # type: ignore[arg-type]
    p = Platform(db=db, clock=clock, backend=backend, settings=st, sandbox=sandbox)
    return p, boot.admin_token or (data_dir / "admin-token").read_text().strip()


def end_runs(p: Platform) -> None:
    """A test's runs must not outlive it (a server's runs outlive the server by design, so the
    fixtures end them): kill and release every run the database says has a process."""
    from sqlalchemy import select

    from danlu.compute.lifecycle import HAS_PROCESS
    from danlu.db.models import Instance

    with p.db.read() as s:
        rows = s.execute(
            select(Instance.id, Instance.run_handle).where(Instance.status.in_([st.value for st in HAS_PROCESS]))
        ).all()
    for inst_id, handle in rows:
        if handle is None:
            p.backend.discard(inst_id)
        else:
            p.backend.kill(handle)
            p.backend.release(handle)


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def platform(db_url: str, tmp_path: Path, fake_clock: FakeClock) -> Iterator[Platform]:
    p, _ = make_platform(db_url, tmp_path / "data", fake_clock)
    yield p
    end_runs(p)
    p.db.engine.dispose()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveServer:
    """The real app on a real port (uvicorn in a thread) with the control loop running."""

    def __init__(self, platform: Platform, admin_token: str, with_loop: bool = True) -> None:
        from danlu.server.loop import ControlLoop

        self.platform = platform
        self.admin_token = admin_token
        self.loop = ControlLoop(platform) if with_loop else None
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(create_app(platform, self.loop), host="127.0.0.1", port=self.port, log_level="error")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        # Generous: on a loaded machine (CI, three workers, PostgreSQL) uvicorn once took over 15 s to
        # bind and start (test_concurrent_topups_with_one_key_pay_once[postgresql], "did not start").
        deadline = time.monotonic() + 120
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("test server did not start")
            time.sleep(0.02)
        if self.loop is not None:
            self.loop.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.loop is not None:
            self.loop.stop()
        self.server.should_exit = True
        self.thread.join(timeout=10)
        end_runs(self.platform)

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url + "/api/v1", headers=headers, timeout=30)

    def admin(self) -> httpx.Client:
        return self.client(self.admin_token)

    def new_user(self, name: str, topup: str | None = "100.00") -> httpx.Client:
        with self.admin() as a:
            r = a.post("/admin/users", json={"name": name})
            assert r.status_code == 201, r.text
            token = r.json()["token"]
            if topup:
                assert a.post(f"/admin/users/{name}/topup", json={"amount": topup}).status_code == 200
        return self.client(token)


@pytest.fixture
def live(db_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    """A live server on the real clock, fast loop, short grace; prices set for both models."""
    p, token = make_platform(
        db_url, tmp_path / "data", SystemClock(), stop_grace_s=2, tick_interval_s=0.2, meter_interval_s=1.0
    )
    with LiveServer(p, token) as srv:
        with srv.admin() as a:
            assert a.put("/admin/prices/A100-80GB", json={"price_per_hour": "36.00"}).status_code == 200
            assert a.put("/admin/prices/T4", json={"price_per_hour": "3.60"}).status_code == 200
        yield srv
    p.db.engine.dispose()


def wait_for(predicate: object, timeout: float = 30.0, interval: float = 0.1) -> object:
    """Poll ``predicate()`` until truthy; returns its value or fails the test."""
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout}s (last value {value!r})")
        time.sleep(interval)
