"""Issue 29: the console's templates are compiled once and never looked up on disk again while the server
runs (Jinja's auto-reload stat()ed every template file on every render)."""

from __future__ import annotations

import os

import pytest

from danlu.console.web import templates


def test_rendering_again_touches_no_template_file(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("error.html", "base.html"):
        templates.get_template(name)  # each compiled once
    looked: list[str] = []
    real = os.path.getmtime

    def counted(path: str | os.PathLike[str]) -> float:
        looked.append(str(path))
        return real(path)

    monkeypatch.setattr(os.path, "getmtime", counted)
    for _ in range(3):
        templates.get_template("error.html")
        templates.get_template("base.html")
    assert looked == []
