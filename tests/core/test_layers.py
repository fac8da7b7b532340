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
