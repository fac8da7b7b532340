"""Issue 29: the console's templates are compiled once and never looked up on disk again while the server
runs (Jinja's auto-reload stat()ed every template file on every render)."""

from __future__ import annotations

import os

import pytest

from danlu.console.web import templates
from tests.conftest import LiveServer
from tests.console.helpers import csrf_of, set_password, sign_in


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


def test_the_instances_page_reads_its_person_once_and_a_sign_out_ends_it_at_once(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29, target 2: the signed-in person of a cookie comes from a cache (console/web.py
    SIGNED_IN) that a sign-out or a password change clears at once; the page's rows are rendered
    once per change of the listing (and language), and say what the API's listing says."""
    from danlu.console import web

    reads: list[object] = []
    real = web.signed_in

    def counted(p: object, cookie: str | None) -> object:
        reads.append(cookie)
        return real(p, cookie)  # type: ignore[arg-type]

    monkeypatch.setattr(web, "signed_in", counted)
    with live.new_user("pia") as api:
        r = api.post("/instances", json={"gpu_model": "T4", "command": ["sleep", "600"], "name": "pia-box"})
        assert r.status_code == 201, r.text
        iid = r.json()["id"]
    set_password(live, "pia", "pia-password-123")
    c = sign_in(live, "pia", "pia-password-123")
    pages = [c.get("/instances") for _ in range(5)]
    assert all(p.status_code == 200 and f'id="row-{iid}"' in p.text and "pia-box" in p.text for p in pages)
    # Five pages, at most one database read of the person per second the cache lived (1 s each):
    # a loaded machine may take longer than a second for five pages, never five reads in a row.
    assert 1 <= len(reads) < 5, reads
    in_chinese = c.get("/instances", headers={"Accept-Language": "zh-CN"}).text
    assert "实例" in in_chinese and "pia-box" in in_chinese  # its own rendering, not the English rows
    csrf = csrf_of(c)
    assert c.post("/logout", data={"csrf": csrf}).status_code == 303
    after = c.get("/instances")
    assert after.status_code == 303 and after.headers["location"].startswith("/login"), after.status_code
