"""``danlu server --tls-cert/--tls-key`` (issue 28): HTTPS on the server's own port, the console's
session cookie then Secure; a missing or mismatched half is an error before anything listens."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.cli.test_contract import DANLU, end_server_runs
from tests.conftest import WORKER_UIDS, free_port, sandbox_folder, wait_for, worker_uid_first


def self_signed(folder: Path, name: str) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl here to make a test certificate")
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def test_https_with_a_certificate_and_a_secure_session_cookie(db_url: str, tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, "server")
    port, data = free_port(), tmp_path / "data"
    first = worker_uid_first()
    argv = [*DANLU, "server", "--db", db_url, "--port", str(port), "--data-dir", str(data)]
    argv += ["--sandbox-dir", str(sandbox_folder()), "--simulate-gpus", "T4:1", "--tick", "0.2"]
    argv += ["--sandbox-uids", f"{first}-{first + WORKER_UIDS - 1}", "--tls-cert", str(cert), "--tls-key", str(key)]
    log = tmp_path / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    url = f"https://127.0.0.1:{port}"
    trust = ssl.create_default_context(cafile=str(cert))
    try:

        def up() -> bool:
            try:
                return httpx.get(url + "/readyz", verify=trust, timeout=2).status_code == 200
            except httpx.HTTPError:
                assert proc.poll() is None, log.read_text()
                return False

        wait_for(up, timeout=60)
        assert f"platform on {url}" in log.read_text()
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)  # no plain HTTP on the TLS port
        with pytest.raises(httpx.ConnectError):
            httpx.get(url + "/healthz", timeout=5)  # an unknown certificate is refused by a client that checks
        password = (data / "admin-password").read_text().strip()
        with httpx.Client(base_url=url, verify=trust, timeout=30) as browser:
            r = browser.post("/login", data={"name": "admin", "password": password, "next": "/instances"})
            assert r.status_code == 303, r.text
            cookie = r.headers["set-cookie"].lower()
            assert "secure" in cookie and "httponly" in cookie, cookie
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        end_server_runs(db_url, data)


def test_a_missing_or_mismatched_half_starts_nothing(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path, "one")
    _, other_key = self_signed(tmp_path, "two")
    data = tmp_path / "data"
    base = [*DANLU, "server", "--data-dir", str(data), "--simulate-gpus", "T4:1", "--port", str(free_port())]
    for extra, words in (
        (["--tls-cert", str(cert)], "needs both --tls-cert and --tls-key"),
        (["--tls-cert", str(cert), "--tls-key", str(other_key)], "are not a PEM certificate and its key"),
        (["--tls-cert", str(tmp_path / "nope.crt"), "--tls-key", str(other_key)], "cannot read"),
    ):
        r = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "error [invalid_tls]" in r.stderr and words in r.stderr, r.stderr
