"""The architecture stays visible (issue 8): routers are thin (no SQL, no sessions), and jobs
build on instances, never the reverse (compute imports nothing from scheduling, not even inside a
function to hide the cycle)."""

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
