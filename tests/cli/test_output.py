"""CLI tables on a narrow terminal: ids stay whole on one line (to be copied), other cells wrap."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from danlu.cli import output


@pytest.fixture
def narrow(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    buf = io.StringIO()
    monkeypatch.setattr(output, "console", Console(file=buf, width=60, color_system=None))
    return buf


def test_ids_are_never_wrapped_on_a_narrow_terminal(narrow: io.StringIO) -> None:
    row = {
        "id": "h-217f944041",
        "term": "package-week with a long description that must wrap somewhere",
        "instance_ids": "i-c3cf22baab",
        "rule": "cancel early: the unused part is refunded pro rata, less a 10% fee",
    }
    cols = [("id", "id"), ("term", "term"), ("instance_ids", "running on it"), ("rule", "early end")]
    output.print_table([row], cols)
    text = narrow.getvalue()
    assert "h-217f944041" in text and "i-c3cf22baab" in text
    assert "refunded" in text.replace("\n", "")  # the long cell is folded, not dropped
    assert max(len(line) for line in text.splitlines()) <= 60
