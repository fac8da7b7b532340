"""The architecture stays visible (issues 8 and 27; docs/layers.md): every package has its floor in
``LAYERS`` and imports only from floors below its own or its own package — at the top of a module or
inside a function alike —, no modules import each other in a circle, routers are thin (no SQL, no
sessions), and the console runs no SQL of its own."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "danlu"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


# From the ground up: a package may import its own modules and those of any package before it.
LAYERS = [
    "core",  # money, clock, errors, units: pure; in-memory throttles and activity
    "db",  # models, engine, migrations
    "i18n",  # the console's and the CLI's languages
    "catalog",  # shipped GPU models and public prices
    "backend",  # the compute backend protocol a Platform carries
    "context",  # Platform and Settings, handed to every service
    "accounts",  # users, tokens, teams, who pays
    "billing",  # the ledger, rating, metering, vouchers, invoices
    "advisor",  # what to rent: pure but for its service
    "compute",  # instances, GPUs, runs, backends, sandbox
    "scheduling",  # jobs on instances
    "notify",  # the event feed, alerts, webhooks
    "telemetry",  # samples, idle auto-stop, metrics (reads jobs for Prometheus)
    "access",  # sessions, the port proxy, the SSH gateway
    "api",  # the HTTP API
    "console",  # the web console, on the API's schemas
    "server",  # wiring: the app, bootstrap, the control loop
    "cli",  # the command line, over HTTP (and `danlu server`)
]
TOP_MODULES = {"__init__": "core"}  # danlu/__init__.py: the version only


def _modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        parts = ("danlu", *path.relative_to(SRC).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _edges(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module → the modules of ours it imports (top-level or inside a function) → the line."""

    def ours(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        out: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                names = [f"{base}.{a.name}" for a in node.names]
            for name in names:
                target = ours(name) if name.startswith("danlu.") else None
                if target is not None and target not in (module, "danlu"):
                    out.setdefault(target, node.lineno)
        edges[module] = out
    return edges


def test_every_package_has_a_floor() -> None:
    packages = {_package(m) for m in _modules()}
    assert packages - set(LAYERS) - set(TOP_MODULES) == set(), "give the new package its floor in LAYERS"


def test_no_import_runs_back_up() -> None:
    floor = {name: i for i, name in enumerate(LAYERS)} | {k: LAYERS.index(v) for k, v in TOP_MODULES.items()}
    modules = _modules()
    upward = [
        f"{modules[a].relative_to(SRC)}:{line} imports {b}"
        for a, targets in _edges(modules).items()
        for b, line in targets.items()
        if floor[_package(b)] > floor[_package(a)]
    ]
    assert not upward, "imports that run back up (move the code down, or hand it a callable):\n" + "\n".join(upward)


def test_no_modules_import_each_other_in_a_circle() -> None:
    edges = _edges(_modules())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not circles, f"modules that import each other in a circle: {circles}"


def test_the_console_runs_no_sql_of_its_own() -> None:
    """It calls services (or, today, the API's route functions: issue 27 moves those to services too)."""
    offenders = {}
    for path in sorted((SRC / "console").glob("*.py")):
        text = path.read_text()
        bad = {m for m in _imports(path) if m.startswith(("sqlalchemy", "danlu.db.engine"))}
        if ".db.read()" in text or ".db.write()" in text:
            bad.add("opens a transaction")
        if bad:
            offenders[path.name] = sorted(bad)
    assert not offenders, f"move these into services: {offenders}"


def test_routers_run_no_sql_of_their_own() -> None:
    offenders = {}
    for path in sorted((SRC / "api" / "routers").glob("*.py")):
        bad = {m for m in _imports(path) if m.startswith(("sqlalchemy", "danlu.db"))}
        if ".db.read()" in path.read_text() or ".db.write()" in path.read_text():
            bad.add("opens a transaction")
        if bad:
            offenders[path.name] = sorted(bad)
    assert not offenders, f"move these into services: {offenders}"


def test_compute_never_calls_up_into_scheduling() -> None:
    offenders = {
        str(path.relative_to(SRC)): sorted(m for m in _imports(path) if m.startswith("danlu.scheduling"))
        for path in sorted((SRC / "compute").rglob("*.py"))
    }
    assert not {k: v for k, v in offenders.items() if v}


def test_sessions_build_on_compute_never_the_reverse() -> None:
    """access/ (exec, shell) calls the backends' ``enter``; compute never imports access."""
    offenders = {
        str(path.relative_to(SRC)): sorted(m for m in _imports(path) if m.startswith("danlu.access"))
        for path in sorted((SRC / "compute").rglob("*.py"))
    }
    assert not {k: v for k, v in offenders.items() if v}


def test_the_sandbox_entering_helper_imports_nothing_of_ours() -> None:
    """It runs as ``python3 -I -S enter.py`` and joins a sandbox's mount namespace: every module it
    uses must be loaded before that, so it imports only the standard library, at the top."""
    path = SRC / "compute" / "sandbox" / "enter.py"
    assert not {m for m in _imports(path) if m.startswith("danlu")}
    tree = ast.parse(path.read_text())
    nested = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom) and n not in tree.body]
    assert not nested, "imports inside functions would read the sandbox's files"
