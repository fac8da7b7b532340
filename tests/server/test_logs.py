"""``--log-format json`` and the access log (issue 28): every line is one JSON object; a request's
lines and its response carry one request id (the caller's when it is a safe token); the access log
names the route and never the query string (a port link's token travels there)."""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path

import httpx
import pytest

from danlu.telemetry import logs
from tests.cli.test_contract import DANLU, end_server_runs
from tests.conftest import WORKER_UIDS, free_port, sandbox_folder, wait_for, worker_uid_first


def test_json_lines_with_request_ids_and_an_access_log_without_query_strings(db_url: str, tmp_path: Path) -> None:
    port, data, first = free_port(), tmp_path / "data", worker_uid_first()
    argv = [*DANLU, "server", "--db", db_url, "--port", str(port), "--data-dir", str(data), "--log-format", "json"]
    argv += ["--sandbox-dir", str(sandbox_folder()), "--simulate-gpus", "T4:1", "--tick", "0.2"]
    argv += ["--sandbox-uids", f"{first}-{first + WORKER_UIDS - 1}"]
    log = tmp_path / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=out)  # logs go to stderr
    url = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            try:
                return httpx.get(url + "/readyz", timeout=2).status_code == 200
            except httpx.HTTPError:
                assert proc.poll() is None, log.read_text()
                return False

        wait_for(up, timeout=60)
        r = httpx.get(url + "/api/v1/offers?danlu_link=s3cret-link", headers={"X-Request-Id": "lb-42.a_b"})
        assert r.status_code == 401 and r.headers["x-request-id"] == "lb-42.a_b"
        r = httpx.get(url + "/api/v1/offers", headers={"X-Request-Id": "bad id <script>" + "x" * 80})
        mine = r.headers["x-request-id"]
        assert len(mine) == 16 and "script" not in mine  # not a safe token: replaced, never echoed
        token = (data / "admin-token").read_text().strip()
        r = httpx.get(url + "/api/v1/instances/i-0000000000", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 404

        def lines() -> list[dict[str, object]]:
            return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]  # each one JSON

        wait_for(lambda: any(e.get("route") == "/api/v1/instances/{instance_id}" for e in lines()), timeout=30)
        entries = lines()
        assert all({"time", "level", "logger", "message"} <= set(e) for e in entries)
        [first_req] = [e for e in entries if e.get("request_id") == "lb-42.a_b"]
        assert first_req["logger"] == "danlu.access" and first_req["status"] == 401
        assert first_req["route"] == "/api/v1/offers" and first_req["path"] == "/api/v1/offers"
        assert first_req["client"] == "127.0.0.1" and isinstance(first_req["duration_ms"], float)
        assert "s3cret-link" not in log.read_text()
        [missing] = [e for e in entries if e.get("route") == "/api/v1/instances/{instance_id}"]
        assert missing["status"] == 404 and missing["path"] == "/api/v1/instances/i-0000000000"
        assert any(e["logger"] != "danlu.access" for e in entries)  # the server's own lines are JSON too
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        end_server_runs(db_url, data)


def test_a_line_logged_while_handling_a_request_names_it(caplog: pytest.LogCaptureFixture) -> None:
    handler_filter = logs.RequestIdFilter()
    token = logs.REQUEST_ID.set("r-1")
    try:
        record = logging.LogRecord("danlu.x", logging.WARNING, __file__, 1, "boom %s", ("here",), None)
        assert handler_filter.filter(record)
        line = json.loads(logs.JsonFormatter().format(record))
    finally:
        logs.REQUEST_ID.reset(token)
    assert line["request_id"] == "r-1" and line["message"] == "boom here" and line["level"] == "WARNING"
    with pytest.raises(Exception) as err:
        logs.configure("xml")
    assert getattr(err.value, "code", None) == "invalid_log_format"
