"""A console client over real HTTP: signs in with the form and reads each page's CSRF token."""

from __future__ import annotations

import re

import httpx

from tests.conftest import LiveServer

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def set_password(live: LiveServer, name: str, password: str) -> None:
    with live.admin() as a:
        r = a.put(f"/admin/users/{name}/password", json={"password": password})
        assert r.status_code == 204, r.text


def browser(live: LiveServer, lang: str = "en") -> httpx.Client:
    return httpx.Client(base_url=live.url, headers={"Accept-Language": lang}, timeout=30)


def sign_in(live: LiveServer, name: str, password: str, lang: str = "en") -> httpx.Client:
    c = browser(live, lang)
    r = c.post("/login", data={"name": name, "password": password})
    assert r.status_code == 303, r.text
    return c


def csrf_of(c: httpx.Client, path: str = "/account") -> str:
    m = CSRF.search(c.get(path).text)
    assert m is not None, f"no CSRF token on {path}"
    return m.group(1)


def flash(html: str) -> list[str]:
    return re.findall(r'class="flash (?:ok|error)"[^>]*>(.*?)</p>', html, re.S)
