"""``danlu server --config FILE``, ``DANLU_*`` and ``danlu config show`` (issue 28): every flag has
a key; the command line beats the environment, which beats the file, which beats the default; a
secret may come from a file; a wrong key or value is an error naming it and nothing starts."""

from __future__ import annotations

import json
import os
import subprocess
import typing
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer

from danlu.cli import server_config
from danlu.cli.main import app
from danlu.core.errors import InvalidInput
from danlu.server.options import ServerOptions
from tests.cli.test_contract import DANLU, end_server_runs
from tests.conftest import WORKER_UIDS, free_port, sandbox_folder, wait_for, worker_uid_first

HINTS = typing.get_type_hints(ServerOptions)


def settings(*argv: str, table: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    command = typer.main.get_command(app).commands["server"]  # type: ignore[attr-defined]
    ctx = command.make_context("server", list(argv))
    found = server_config.resolve(ctx, table or {}, env or {}, HINTS)
    return {k: (s.value, s.source) for k, s in found.items()}


def test_each_flag_has_a_key_and_the_command_line_beats_the_environment_beats_the_file(tmp_path: Path) -> None:
    table = {"port": 8100, "tick": 0.5, "data_dir": "/srv/danlu", "slurm_gpu_model": ["a100=A100-80GB"]}
    got = settings("--port", "9000", table=table, env={"DANLU_PORT": "8200", "DANLU_TICK": "0.25"})
    assert got["port"] == (9000, "command line")
    assert got["tick"] == (0.25, "env DANLU_TICK")
    assert got["data_dir"] == (Path("/srv/danlu"), "config file")
    assert got["slurm_gpu_model"] == (["a100=A100-80GB"], "config file")
    assert got["currency"] == ("CNY", "default")
    assert got["backend"] == ("local", "default")  # the flag is --backend (its function argument backend_name)
    assert got["no_sandbox"] == (False, "default")
    assert settings(env={"DANLU_NO_SANDBOX": "yes", "DANLU_SLURM_GPU_MODEL": "a=A100-80GB, t4=T4"})[
        "slurm_gpu_model"
    ] == (["a=A100-80GB", "t4=T4"], "env DANLU_SLURM_GPU_MODEL")
    assert settings(env={"DANLU_NO_SANDBOX": "yes"})["no_sandbox"] == (True, "env DANLU_NO_SANDBOX")
    # Every flag of `danlu server` is a key of the file.
    keys = set(settings())
    command = typer.main.get_command(app).commands["server"]  # type: ignore[attr-defined]
    flags = {o for p in command.params for o in p.opts if o.startswith("--") and o not in ("--config", "--help")}
    assert {f.removeprefix("--").replace("-", "_") for f in flags} == keys


def test_a_secret_comes_from_a_file_and_config_show_masks_it(tmp_path: Path) -> None:
    secret = tmp_path / "db-url"
    secret.write_text("postgresql+psycopg://danlu:s3cret-pw@127.0.0.1/test\n")
    got = settings(table={"db_file": str(secret)})
    assert got["db"] == ("postgresql+psycopg://danlu:s3cret-pw@127.0.0.1/test", f"config file (from {secret})")
    assert settings(env={"DANLU_DB_FILE": str(secret)})["db"][0].endswith("@127.0.0.1/test")
    conf = tmp_path / "danlu.toml"
    conf.write_text(f'port = 8123\ndb_file = "{secret}"\n')
    env = {**os.environ, "DANLU_TICK": "0.5"}
    r = subprocess.run([*DANLU, "config", "show", "--config", str(conf)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "s3cret" not in r.stdout
    assert 'db = "postgresql+psycopg://danlu:***@127.0.0.1/test"  # config file' in r.stdout
    assert "port = 8123  # config file" in r.stdout and "tick = 0.5  # env DANLU_TICK" in r.stdout
    r = subprocess.run([*DANLU, "config", "show", "--config", str(conf), "--json"], capture_output=True, text=True)
    shown = json.loads(r.stdout)
    assert shown["port"] == {"value": 8123, "source": "config file"} and "s3cret" not in r.stdout


@pytest.mark.parametrize(
    ("table", "env", "words"),
    [
        ({"prot": 8100}, {}, "'prot', not a setting"),
        ({"port": "eighty"}, {}, "port is a whole number"),
        ({"port": 80.5}, {}, "port is a whole number"),
        ({}, {"DANLU_PORT": "80x"}, "port is a whole number"),
        ({"no_sandbox": "maybe"}, {}, "no_sandbox is true or false"),
        ({"tick": [1, 2]}, {}, "tick is one value, not a list"),
        ({"slurm_gpu_model": [1]}, {}, "slurm_gpu_model is a list of strings"),
        ({"db_file": "/nonexistent/db-url"}, {}, "db_file: cannot read /nonexistent/db-url"),
        ({"db_file": 3}, {}, "db_file is the path of a file"),
    ],
)
def test_a_wrong_key_or_value_is_an_error_naming_it(table: dict[str, Any], env: dict[str, str], words: str) -> None:
    with pytest.raises(InvalidInput) as err:
        settings(table=table, env=env)
    assert err.value.code == "invalid_config" and words in err.value.message


def test_a_bad_config_file_starts_nothing(tmp_path: Path) -> None:
    conf = tmp_path / "danlu.toml"
    conf.write_text("port = [\n")
    r = subprocess.run([*DANLU, "server", "--config", str(conf)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "error [invalid_config]" in r.stderr and "not valid TOML" in r.stderr
    conf.write_text("port = 8100\nsimulate_gpu = 'T4:1'\n")
    r = subprocess.run([*DANLU, "server", "--config", str(conf)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "'simulate_gpu', not a setting of danlu server" in r.stderr


def test_a_server_started_from_a_config_file_keeps_its_secrets_off_the_command_line_and_its_log(
    db_url: str, tmp_path: Path
) -> None:
    port, data = free_port(), tmp_path / "data"
    secret = tmp_path / "db-url"
    secret.write_text(db_url + "\n")
    conf = tmp_path / "danlu.toml"
    first = worker_uid_first()
    conf.write_text(
        f'db_file = "{secret}"\nport = {port}\ndata_dir = "{data}"\nsandbox_dir = "{sandbox_folder()}"\n'
        f'simulate_gpus = "T4:1"\ntick = 0.2\nmeter_interval = 1\nsandbox_uids = "{first}-{first + WORKER_UIDS - 1}"\n'
    )
    log = tmp_path / "server.log"
    with open(log, "w") as out:  # not a terminal, as under systemd: the first start's secrets stay in their files
        proc = subprocess.Popen([*DANLU, "server", "--config", str(conf)], stdout=out, stderr=subprocess.STDOUT)
    try:

        def up() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
            except httpx.HTTPError:
                assert proc.poll() is None, log.read_text()
                return False

        wait_for(up, timeout=60)
        token = (data / "admin-token").read_text().strip()
        password = (data / "admin-password").read_text().strip()
        assert (data / "admin-token").stat().st_mode & 0o777 == 0o600
        text = log.read_text()
        assert token not in text and password not in text, text
        assert f"admin token: in {data / 'admin-token'} (mode 0600)" in text
        r = httpx.get(f"http://127.0.0.1:{port}/api/v1/offers", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200 and [o["gpu_model"] for o in r.json()] == ["T4"]
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        assert db_url not in cmdline and str(conf) in cmdline  # `ps` shows the file's name, not the database URL
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        end_server_runs(db_url, data)
