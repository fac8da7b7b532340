"""A real Prometheus (Debian's) scrapes a live danlu server, and its series carry the right labels (issue 28,
finding 9 and its "Done when": Prometheus' own target label ``instance`` is the server's address, not
renamed by a label of ours to ``exported_instance``; a rental's series name it ``instance_id``)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from danlu import __version__
from tests.conftest import LiveServer, free_port, live, wait_for  # noqa: F401 - the live-server fixture

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


@pytest.fixture
def prometheus(live: LiveServer, tmp_path: Path) -> Iterator[str]:  # noqa: F811
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed (make test installs Debian's package)")
    target = live.url.removeprefix("http://")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        f"scrape_configs:\n  - job_name: danlu\n    static_configs:\n      - targets: ['{target}']\n"
    )
    port = free_port()
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def series(prom: str, query: str) -> list[dict[str, Any]]:
    try:
        r = httpx.get(f"{prom}/api/v1/query", params={"query": query}, timeout=5)
    except httpx.HTTPError:
        return []  # not listening yet
    if r.status_code != 200:
        return []
    return r.json()["data"]["result"]  # type: ignore[no-any-return]


def test_prometheus_scrapes_the_server_with_its_own_instance_label_and_ours_named_instance_id(
    live: LiveServer,  # noqa: F811
    prometheus: str,
) -> None:
    with live.new_user("pia") as c:
        r = c.post("/instances", json={"gpu_model": "T4", "gpu_count": 1, "command": ["sleep", "300"]})
        assert r.status_code == 201, r.text
        inst = r.json()["id"]
        target = live.url.removeprefix("http://")
        [build] = wait_for(lambda: series(prometheus, "danlu_build_info"), timeout=120)
        assert build["metric"] == {
            "__name__": "danlu_build_info",
            "instance": target,  # Prometheus' target label, intact
            "job": "danlu",
            "python": build["metric"]["python"],
            "version": __version__,
        }
        [up] = wait_for(lambda: series(prometheus, 'up{job="danlu"}'), timeout=60)
        assert up["value"][1] == "1"
        mine = wait_for(lambda: series(prometheus, f'danlu_instance_memory_bytes{{instance_id="{inst}"}}'), 120)
        assert mine and all(s["metric"]["instance"] == target for s in mine)
        every = wait_for(lambda: series(prometheus, '{job="danlu"}'), timeout=60)
        assert every and not [s for s in every if "exported_instance" in s["metric"]]
        assert c.post(f"/instances/{inst}/stop").status_code == 200
