"""The renter's web apps through danlu (issue 25 item 4), in the real sandbox on both databases:
HTTP and WebSocket to a port *inside* the rental's network namespace (policy ``none``: the rental
has no network at all), authenticated like everything else, danlu's credentials never passed on,
and a tunnel for ``danlu forward``. Another tenant, and anyone without credentials, is refused."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tests.access.test_sessions import token_of
from tests.conftest import LiveServer, wait_for
from tests.sandbox.conftest import rent, sbx  # noqa: F401 - the sandboxed live server

pytestmark = pytest.mark.slow(seconds=40)
APP = (Path(__file__).parent / "echo_app.py").read_text()


@pytest.fixture
def app(sbx: LiveServer) -> Iterator[tuple[httpx.Client, str]]:  # noqa: F811
    with sbx.admin() as a:
        host = a.get("/admin/hosts").json()[0]["name"]
        assert a.put(f"/admin/hosts/{host}", json={"network_policy": "none"}).status_code == 200
    with sbx.new_user("ana") as c:
        iid = rent(c, ["python3", "-c", APP, "8888"])
        wait_for(lambda: c.get(f"/instances/{iid}/ports").json().get("listening"), timeout=60)
        yield c, iid


def test_http_reaches_the_app_inside_and_danlus_credentials_stay_out(
    sbx: LiveServer,  # noqa: F811
    app: tuple[httpx.Client, str],
) -> None:
    c, iid = app
    listed = c.get(f"/instances/{iid}/ports").json()
    assert listed["listening"] == [
        {"port": 8888, "url": f"{sbx.url}/p/{iid}/8888/", "absolute_url": f"{sbx.url}/pa/{iid}/8888/"}
    ]
    with httpx.Client(headers=c.headers, timeout=30) as h:
        r = h.get(f"{sbx.url}/p/{iid}/8888/lab/tree?x=1", headers={"Cookie": "danlu_session=secret; app=1"})
        assert r.status_code == 200, r.text
        seen = r.json()
        assert seen["target"] == "/lab/tree?x=1"  # /p/ takes our prefix off
        assert seen["headers"]["x-forwarded-prefix"] == f"/p/{iid}/8888"
        assert "authorization" not in seen["headers"] and seen["headers"]["cookie"] == "app=1"
        assert sbx.platform.activity.last(iid) is None  # a page's polling (GET) is not a person
        seen = h.get(f"{sbx.url}/pa/{iid}/8888/lab").json()
        assert seen["target"] == f"/pa/{iid}/8888/lab"  # /pa/ keeps the whole path (JupyterLab's base_url)
        big = b"x" * (3 << 20)  # over the API's 1 MiB body limit: an app's upload streams through
        seen = h.post(f"{sbx.url}/p/{iid}/8888/upload", content=big).json()
        assert seen["method"] == "POST" and seen["body_bytes"] == len(big)
        used = sbx.platform.activity.last(iid)
        assert used is not None and used.kind == "port traffic"
        seen = h.post(f"{sbx.url}/p/{iid}/8888/upload", content=iter([b"a" * 1000, b"b" * 5000])).json()
        assert seen["body_bytes"] == 6000  # chunked
        assert h.get(f"{sbx.url}/p/{iid}/8888", follow_redirects=False).headers["location"] == f"/p/{iid}/8888/"
        cookies = h.get(f"{sbx.url}/p/{iid}/8888/setcookie").headers.get_list("set-cookie")
        assert cookies == ["app=1; Path=/"]  # the app's own cookie passes; danlu's session cookie never


def test_websockets_reach_the_app_through_the_proxy(sbx: LiveServer, app: tuple[httpx.Client, str]) -> None:  # noqa: F811
    c, iid = app
    url = f"ws://127.0.0.1:{sbx.port}/p/{iid}/8888/api/kernels/k1/channels?session=s"
    with connect(url, additional_headers={"Authorization": f"Bearer {token_of(c)}"}) as ws:
        assert ws.recv(timeout=30) == "opened:/api/kernels/k1/channels?session=s"
        ws.send("你好")
        assert ws.recv(timeout=30) == "echo:你好"


def test_strangers_get_404_and_no_credentials_401(sbx: LiveServer, app: tuple[httpx.Client, str]) -> None:  # noqa: F811
    _, iid = app
    with sbx.new_user("mallory") as m:
        for path in (f"/p/{iid}/8888/", f"/pa/{iid}/8888/x", "/p/i-0000000000/8888/"):
            r = httpx.get(sbx.url + path, headers=m.headers)
            assert r.status_code == 404 and r.json()["error"]["code"] == "instance_not_found", path
        assert m.get(f"/instances/{iid}/ports").status_code == 404
        with pytest.raises(InvalidStatus) as refused:
            connect(f"ws://127.0.0.1:{sbx.port}/p/{iid}/8888/ws", additional_headers=dict(m.headers))
        assert refused.value.response.status_code == 404
        assert json.loads(refused.value.response.body or b"{}")["error"]["code"] == "instance_not_found"
    r = httpx.get(f"{sbx.url}/p/{iid}/8888/")
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_token"


def test_bad_ports_and_crafted_requests_stay_inside(sbx: LiveServer, app: tuple[httpx.Client, str]) -> None:  # noqa: F811
    c, iid = app
    with httpx.Client(headers=c.headers, timeout=30) as h:
        for bad in ("0", "65536", "-1", "http"):
            r = h.get(f"{sbx.url}/p/{iid}/{bad}/")
            assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_port", bad
        r = h.get(f"{sbx.url}/p/{iid}/{sbx.port}/api/v1/offers")  # danlu's own port, seen from inside: closed
        assert r.status_code == 409 and r.json()["error"]["code"] == "port_closed"
        seen = h.get(f"{sbx.url}/p/{iid}/8888/..%2F..%2F8889/x", headers={"Host": "127.0.0.1:5432"}).json()
        assert seen["target"] == "/..%2F..%2F8889/x"  # the app gets the path as it was; still this app
        r = h.post(f"{sbx.url}/p/{iid}/8888/x", headers={"Origin": "https://evil.example"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "bad_origin"


def test_a_tunnel_carries_a_tcp_connection(sbx: LiveServer, app: tuple[httpx.Client, str]) -> None:  # noqa: F811
    c, iid = app
    url = f"ws://127.0.0.1:{sbx.port}/api/v1/instances/{iid}/ports/8888/tunnel"
    with connect(url, additional_headers={"Authorization": f"Bearer {token_of(c)}"}) as ws:
        ws.send(b"GET /through-the-tunnel HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while b"}" not in got:
            message = ws.recv(timeout=30)
            assert isinstance(message, bytes)
            got += message
    assert json.loads(got.split(b"\r\n\r\n", 1)[1])["target"] == "/through-the-tunnel"


def test_danlu_forward_listens_here_and_reaches_the_app(sbx: LiveServer, app: tuple[httpx.Client, str]) -> None:  # noqa: F811
    import subprocess

    from tests.cli.test_contract import DANLU

    c, iid = app
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        local = s.getsockname()[1]
    env = {"DANLU_URL": sbx.url, "DANLU_TOKEN": token_of(c), "PATH": "/usr/bin:/bin", "HOME": "/tmp"}
    proc = subprocess.Popen([*DANLU, "forward", iid, f"{local}:8888"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert f"127.0.0.1:{local}" in line, line
        got: dict[str, object] = {}

        def fetch() -> None:
            got.update(httpx.get(f"http://127.0.0.1:{local}/from-the-laptop", timeout=30).json())

        t = threading.Thread(target=fetch)
        t.start()
        t.join(60)
        assert got.get("target") == "/from-the-laptop"
    finally:
        proc.terminate()
        proc.wait(30)


def test_one_dialer_thread_per_rental_and_it_ends_when_idle(
    sbx: LiveServer,  # noqa: F811
    app: tuple[httpx.Client, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Connections into the rental's namespace come from one thread of its own that stays there
    (danlu.compute.backends.netns._Dialer), not a new thread each (which was most of a proxied
    request's time); it ends when idle, and the next request starts another."""
    from danlu.compute.backends import netns

    c, iid = app
    earlier = set(threading.enumerate())  # earlier tests' rentals' dialers may not have ended yet
    old = set(netns._dialers.values())

    def dialers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "danlu-netns-dialer" and t not in earlier]

    with httpx.Client(headers=c.headers, timeout=30) as h:
        for n in range(40):
            assert h.get(f"{sbx.url}/p/{iid}/8888/n{n}").json()["target"] == f"/n{n}"
        assert len(dialers()) == 1
        ended = dialers()[0]
        (dialer,) = set(netns._dialers.values()) - old
        assert 0 < len(dialer.ready) <= netns.POOL  # sockets made ahead, at most the pool's size
        monkeypatch.setattr(netns, "IDLE_S", 0.2)
        assert h.get(f"{sbx.url}/p/{iid}/8888/wake").status_code == 200  # its next wait is the short one
        ended.join(timeout=60)
        assert not ended.is_alive() and dialer not in netns._dialers.values() and not dialer.ready
        assert h.get(f"{sbx.url}/p/{iid}/8888/again").json()["target"] == "/again"
        assert len(dialers()) == 1 and dialers()[0] is not ended


def test_a_revoked_token_ends_open_proxied_sockets_and_tunnels(
    sbx: LiveServer,  # noqa: F811
    app: tuple[httpx.Client, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A right checked once at the upgrade is not enough: a notebook's kernel socket or a `danlu
    forward` tunnel left open must end when its token is revoked (a member removed from the team:
    the same check, danlu.access.service.still_allowed), as a shell does."""
    from danlu.access import service

    monkeypatch.setattr(service, "RECHECK_S", 0.3)
    c, iid = app
    auth = {"Authorization": f"Bearer {token_of(c)}"}
    proxied = connect(f"ws://127.0.0.1:{sbx.port}/p/{iid}/8888/api/kernels/k1/channels", additional_headers=auth)
    assert proxied.recv(timeout=30) == "opened:/api/kernels/k1/channels"
    tunnel = connect(f"ws://127.0.0.1:{sbx.port}/api/v1/instances/{iid}/ports/8888/tunnel", additional_headers=auth)
    tunnel.send(b"GET /t HTTP/1.1\r\n")  # half a request: the app waits for the rest, the tunnel stays open
    with sbx.admin() as a:
        assert a.post("/admin/users/ana/token/rotate").status_code == 200
    for ws in (proxied, tunnel):
        with pytest.raises(ConnectionClosed):
            while True:
                ws.recv(timeout=60)
        assert ws.close_code == 4401, (ws is tunnel, ws.close_code)  # invalid_token, as the REST API says it


def test_a_link_opens_one_app_for_someone_without_an_account_until_revoked(
    sbx: LiveServer,  # noqa: F811
    app: tuple[httpx.Client, str],
) -> None:
    """`danlu port ID PORT --link`: whoever holds the URL reaches that app (a browser: the token
    becomes a cookie for the app's path, taken out of the URL), nothing else; revoked, it is refused."""
    c, iid = app
    r = c.post(f"/instances/{iid}/ports/8888/links")
    assert r.status_code == 201, r.text
    made = r.json()
    token = made["url"].split("danlu_link=", 1)[1]
    assert made["url"] == f"{sbx.url}/p/{iid}/8888/?danlu_link={token}" and made["created_by"] == "ana"
    assert c.get(f"/instances/{iid}/links").json() == [{k: made[k] for k in made if k != "url"}]
    with httpx.Client(timeout=30, follow_redirects=True) as guest:  # no danlu credentials at all
        page = guest.get(made["url"].replace("/?", "/lab?x=1&"))
        assert page.status_code == 200, page.text
        seen = page.json()
        assert seen["target"] == "/lab?x=1"  # the token left the URL before the app saw it ...
        assert "danlu_link" not in seen["headers"].get("cookie", "")  # ... and its cookie never reaches it
        assert page.history[0].status_code == 303
        kept = page.history[0].headers["set-cookie"]
        assert f"Path=/p/{iid}/8888/" in kept and "HttpOnly" in kept and "SameSite=lax" in kept
        assert guest.get(f"{sbx.url}/p/{iid}/8888/again").json()["target"] == "/again"  # by the cookie
        with connect(f"ws://127.0.0.1:{sbx.port}/p/{iid}/8888/ws",
                     additional_headers={"Cookie": f"danlu_link_{iid}_8888={token}"}) as ws:  # fmt: skip
            assert ws.recv(timeout=30) == "opened:/ws"
        # Nothing else: another port, the tunnel, the API, a shell.
        other = guest.get(f"{sbx.url}/p/{iid}/8889/?danlu_link={token}")
        assert other.status_code == 401 and other.json()["error"]["code"] == "invalid_link"
        api = guest.get(f"{sbx.url}/api/v1/instances/{iid}", headers={"Authorization": f"Bearer {token}"})
        assert api.status_code == 401
        tunnel_url = f"ws://127.0.0.1:{sbx.port}/api/v1/instances/{iid}/ports/8888/tunnel"
        with connect(tunnel_url, additional_headers={"Cookie": f"danlu_link_{iid}_8888={token}"}) as ws:
            with pytest.raises(ConnectionClosed):
                ws.recv(timeout=30)
            assert ws.close_code == 4401  # missing_token: a link is no credential for a tunnel
        # Another renter can neither list, make nor revoke links of ana's instance.
        with sbx.new_user("mallory") as m:
            assert m.post(f"/instances/{iid}/ports/8888/links").status_code == 404
            assert m.get(f"/instances/{iid}/links").status_code == 404
            assert m.delete(f"/instances/{iid}/links/{made['id']}").status_code == 404
        assert c.delete(f"/instances/{iid}/links/{made['id']}").status_code == 204
        assert c.get(f"/instances/{iid}/links").json() == []
        wait_for(lambda: guest.get(f"{sbx.url}/p/{iid}/8888/late").status_code == 401, timeout=60)  # 2 s decisions
        again = c.delete(f"/instances/{iid}/links/{made['id']}")
        assert again.status_code == 404 and again.json()["error"]["code"] == "link_not_found"


def test_danlu_port_makes_lists_and_revokes_links(sbx: LiveServer, app: tuple[httpx.Client, str]) -> None:  # noqa: F811
    import subprocess

    from tests.cli.test_contract import DANLU

    c, iid = app
    env = {"DANLU_URL": sbx.url, "DANLU_TOKEN": token_of(c), "PATH": "/usr/bin:/bin", "HOME": "/tmp"}

    def danlu(*args: str) -> str:
        done = subprocess.run([*DANLU, "port", iid, *args], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    made = json.loads(danlu("8888", "--link", "--json"))
    assert httpx.get(made["url"], follow_redirects=True, timeout=30).json()["target"] == "/"
    assert "port 8888   by ana" in danlu("--links")
    assert "revoked link" in danlu("--revoke", str(made["id"]))
    assert "no links" in danlu("--links")
