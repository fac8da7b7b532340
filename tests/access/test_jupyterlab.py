"""Issue 25's "start JupyterLab, open it in a browser through danlu", for real: a renter's
JupyterLab runs in a rental's sandbox (bubblewrap, the renter's own uid, policy ``none``: no network
at all), and Debian's Chromium, signed in to the console, opens it at ``/pa/{id}/8888/lab`` through
danlu's port proxy, makes a notebook and runs ``print(6*7)`` in a kernel (whose messages go over a
WebSocket through the proxy). Without credentials the same URL is danlu's 401, never the app. On
both databases.

How JupyterLab gets into the sandbox. There is no JupyterLab image yet, and nothing may be fetched
from the network when tests run, so it comes from PyPI at setup time: it is in the ``dev`` extra, in
this test process's own environment. That environment is not visible inside the sandbox, and must
not be made so: the ``host`` image binds only the host's ``/usr``, ``/bin``, ``/lib*`` and a curated
``/etc`` (danlu.compute.sandbox.bwrap), so neither the venv (here under the repository) nor the
interpreter it points at (pyenv's, under ``/root``) can be reached by the renter's uid. So the test
does what a renter does with an image that lacks a package: a *user install in the workspace*. The
files of JupyterLab and its dependencies (what their installed metadata lists, each at its path
relative to site-packages) are copied into ``/workspace/.local`` — the very layout ``pip install
--user jupyterlab`` makes there in an earlier rental with network (``HOME`` is ``/workspace``) —
owned by the renter's uid, and the image's own ``python3`` (Debian's, in ``/usr/bin``) runs
``python3 -m jupyterlab``, finding it through its user site-packages and its assets, configuration
and kernel spec under ``~/.local``. The compiled extensions (pyzmq, tornado …) need the same CPython
minor version on both sides; where the host's ``python3`` has another, the test is skipped. The
rental's command waits for that folder before starting JupyterLab, since its workspace exists only
once it is rented; the copy is removed at the end. The host's per-GPU limits are raised to what
JupyterLab needs (about 220 MB in 16,000 files; a server and a kernel); the sandbox itself is
unchanged.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement

from danlu.compute.sandbox.bwrap import SANDBOX_PATH
from tests.conftest import LiveServer, wait_for
from tests.console.helpers import set_password
from tests.console.test_browser import _sign_in, chromium  # noqa: F401 - the browser
from tests.sandbox.conftest import log_of, rent, sbx  # noqa: F401 - the sandboxed live server

# One database: JupyterLab, the port proxy and the browser do not touch it beyond a rental and a sign-in, which
# tests/access/test_ports.py and the console's tests run on both (26 s saved of the suite's 20 minutes).
pytestmark = [
    pytest.mark.slow(seconds=90),
    pytest.mark.timeout(600),
    pytest.mark.parametrize("db_url", ["sqlite"], indirect=True),
]
PORT = 8888
USER_SITE = f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"
LIMITS = {"memory_per_gpu_mb": 2048, "disk_per_gpu_mb": 1024, "pids_per_gpu": 512, "cpus_per_gpu": 2}
# JupyterLab in the foreground once its user install is in place; no token: danlu authenticates.
COMMAND = (
    "until [ -d .local ]; do sleep 0.2; done; "
    f"exec python3 -m jupyterlab --no-browser --ip=127.0.0.1 --port={PORT} --ServerApp.port_retries=0 "
    f"--ServerApp.base_url=/pa/$DANLU_INSTANCE_ID/{PORT}/ --ServerApp.root_dir=/workspace "
    "--IdentityProvider.token= --ServerApp.password= --ServerApp.disable_check_xsrf=False"
)


def _sandbox_python_or_skip() -> None:
    """The sandbox's ``python3`` (the host image's) must be this CPython's minor version."""
    found = shutil.which("python3", path=SANDBOX_PATH)
    if found is None:
        pytest.skip("the host has no python3 in /usr/bin or /bin for the sandbox to run JupyterLab with")
    out = subprocess.run([found, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True)
    theirs, ours = out.stdout.split(), [str(n) for n in sys.version_info[:2]]
    if out.returncode != 0 or theirs != ours:
        pytest.skip(f"the host's {found} is Python {'.'.join(theirs)}, these tests' is {'.'.join(ours)}: "
                    "JupyterLab's compiled extensions would not load there")  # fmt: skip


def _distributions(name: str) -> list[importlib.metadata.Distribution]:
    """``name``'s installed distribution and, recursively, those it requires (with the extras
    asked for: nbconvert needs ``bleach[css]``)."""
    dists: dict[str, importlib.metadata.Distribution] = {}
    done: set[tuple[str, str]] = set()
    todo = [(name, "")]
    while todo:
        wanted, extra = todo.pop()
        key = re.sub(r"[-_.]+", "-", wanted).lower()
        if (key, extra) in done:
            continue
        done.add((key, extra))
        dist = dists.setdefault(key, importlib.metadata.distribution(wanted))
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                todo += [(req.name, e) for e in ("", *req.extras)]
    return list(dists.values())


def _user_install(workspace: Path) -> None:
    """JupyterLab as ``pip install --user`` lays it out under ``workspace/.local``, owned by the
    workspace's owner (the renter's uid); it appears there at once (a rename)."""
    st = workspace.stat()
    part = workspace / ".local.part"
    site = part / USER_SITE  # ~/.local/lib/pythonX.Y/site-packages
    for dist in _distributions("jupyterlab"):
        for file in dist.files or []:
            source = Path(str(dist.locate_file(file)))
            if not source.is_file():
                continue
            dest = Path(os.path.normpath(site / file))  # data files: ../../../share/jupyter/… under .local
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest)
    for root, dirs, files in os.walk(part):
        for entry in (root, *(os.path.join(root, n) for n in (*dirs, *files))):
            os.chown(entry, st.st_uid, st.st_gid)
    part.rename(workspace / ".local")


def _workspace_of(srv: LiveServer, iid: str) -> Path:
    from danlu.db.models import Instance

    with srv.platform.db.read() as s:
        inst = s.get(Instance, iid)
        assert inst is not None
        return Path(inst.workspace)


def _listening(c: httpx.Client, iid: str) -> bool:
    view = c.get(f"/instances/{iid}").json()
    assert view["status"] == "running", f"{view['status']}: {log_of(c, iid)[-3000:]}"
    return PORT in [p["port"] for p in c.get(f"/instances/{iid}/ports").json()["listening"]]


def test_jupyterlab_in_a_rental_opens_in_the_browser_and_runs_code(sbx: LiveServer, chromium: object) -> None:  # noqa: F811
    _sandbox_python_or_skip()
    with sbx.admin() as a:
        host = a.get("/admin/hosts").json()[0]["name"]
        r = a.put(f"/admin/hosts/{host}", json={"network_policy": "none", **LIMITS})
        assert r.status_code == 200, r.text
    with sbx.new_user("ana", topup="500.00") as c:
        iid = rent(c, ["sh", "-c", COMMAND])
        workspace = _workspace_of(sbx, iid)
        try:
            _user_install(workspace)
            wait_for(lambda: _listening(c, iid), timeout=120, interval=0.5)
            _open_in_the_browser(sbx, iid, chromium)
            assert (workspace / "Untitled.ipynb").is_file()  # the notebook, made in the workspace by the app
        finally:
            shutil.rmtree(workspace / ".local", ignore_errors=True)


def _open_in_the_browser(srv: LiveServer, iid: str, browser: object) -> None:
    from playwright.sync_api import expect

    lab = f"{srv.url}/pa/{iid}/{PORT}/lab"
    r = httpx.get(lab, timeout=30)  # no credentials: danlu answers, the app is never reached
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_token", r.text
    with srv.new_user("mallory") as m:  # another tenant: as if there were no such instance
        r = httpx.get(lab, headers=m.headers, timeout=30)
        assert r.status_code == 404 and r.json()["error"]["code"] == "instance_not_found", r.text

    set_password(srv, "ana", "ana-password-1")
    page = browser.new_context(locale="en-US", viewport={"width": 1280, "height": 900}).new_page()  # type: ignore[attr-defined]
    _sign_in(page, srv.url, "ana", "ana-password-1")
    broken: list[str] = []  # the app's answers through the proxy: none may be a server error
    page.on("response", lambda resp: broken.append(f"{resp.status} {resp.url}") if resp.status >= 500 else None)
    page.goto(lab)
    card = page.locator('.jp-LauncherCard[data-category="Notebook"]').first
    expect(card).to_be_visible(timeout=120_000)  # JupyterLab's launcher, its assets all through the proxy
    card.click()
    # The kernel started and answered over its socket through danlu: "Initializing" until then, and
    # a cell run before that is not sent at all.
    expect(page.locator("#jp-main-statusbar")).to_contain_text("Python 3 (ipykernel) | Idle", timeout=120_000)
    editor = page.locator(".jp-NotebookPanel .jp-Cell .jp-InputArea-editor .cm-content").first
    editor.click()
    page.keyboard.type("print(6*7)")
    expect(editor).to_have_text("print(6*7)")
    page.keyboard.press("Shift+Enter")
    output = page.locator(".jp-NotebookPanel .jp-OutputArea-output").first
    expect(output).to_have_text("42", timeout=120_000)  # the kernel's answer, back over the socket
    assert broken == []
