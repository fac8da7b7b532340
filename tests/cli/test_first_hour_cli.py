"""Issue 12's "first hour at the command line": ids and GPU model names are never cut at 80 columns
or in a pipe, no Python values in human output, `job cancel` prints the new status, `jobs` marks
simulated GPUs, ledger lines name what was used, and `rm`, `logs`, `job logs`, `login` take --json.
The CLI runs as real processes against `danlu server` as a real process (tests/cli/test_contract.py)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from danlu.cli import instance_cmds, output
from tests.cli.test_contract import Cli, server  # noqa: F401 - the real-server fixture
from tests.conftest import wait_for

LONG_NAME = "llama-finetune-run-42"
PYTHON_VALUES = re.compile(r"\b(None|True|False)\b")


def _narrow(monkeypatch: pytest.MonkeyPatch, width: int) -> tuple[io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(output, "console", Console(file=out, width=width, color_system=None))
    monkeypatch.setattr(output, "err_console", Console(file=err, width=width, color_system=None))
    return out, err


def _lines_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_ps_at_80_columns_drops_columns_instead_of_cutting_names(monkeypatch: pytest.MonkeyPatch) -> None:
    out, err = _narrow(monkeypatch, 80)
    v = {
        "id": "i-9705f848ab",
        "name": LONG_NAME,
        "status": "running",
        "gpu_count": 2,
        "gpu_model": "A100-80GB",
        "simulated": True,
        "billed_seconds": 1234,
        "cost": "12.34",
        "currency": "CNY",
        "command": ["python", "examples/train.py", "--checkpoint-dir", "/workspace/checkpoints"],
    }
    output.print_table(
        [instance_cmds._row(v)], instance_cmds.COLUMNS, whole=instance_cmds.WHOLE, optional=instance_cmds.OPTIONAL
    )
    text = out.getvalue()
    assert "i-9705f848ab" in text and LONG_NAME in text and "A100-80GB" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "command" not in text and "command" in err.getvalue()  # left out, and said so on stderr


def test_a_wide_terminal_keeps_every_column(monkeypatch: pytest.MonkeyPatch) -> None:
    out, err = _narrow(monkeypatch, 200)
    v = {"id": "i-1", "name": "", "status": "running", "gpu_count": 1, "gpu_model": "T4", "simulated": False}
    v |= {"billed_seconds": 3, "cost": "0.01", "currency": "CNY", "command": ["sleep", "60"]}
    output.print_table(
        [instance_cmds._row(v)], instance_cmds.COLUMNS, whole=instance_cmds.WHOLE, optional=instance_cmds.OPTIONAL
    )
    assert "sleep 60" in out.getvalue() and err.getvalue() == ""


def test_human_values_are_not_python_values() -> None:
    assert [output.human(x) for x in (None, True, False, "", [0, 1], 4)] == ["-", "yes", "no", "-", "0, 1", "4"]


def test_usage_memo_names_instances_seconds_and_period() -> None:
    from danlu.billing.metering import UsagePart, usage_memo

    t0 = 1_767_291_316_000  # 2026-01-01 18:15:16 UTC
    one = UsagePart("i-abc123", 2, "A100-80GB", t0, t0 + 14_000)
    assert usage_memo([one]) == "GPU usage of i-abc123 (2× A100-80GB, 14 s, 2026-01-01 18:15:16–18:15:30 UTC)"
    night = UsagePart("i-n", 1, "T4", t0 + 20_683_000, t0 + 20_684_500)  # crosses midnight
    assert usage_memo([night]).endswith("(1× T4, 1.5 s, 2026-01-01 23:59:59–2026-01-02 00:00:00 UTC)")
    many = [UsagePart(f"i-{n}", 1, "T4", t0, t0 + 1000) for n in range(5)]
    memo = usage_memo(many)
    assert memo.startswith("GPU usage of i-0 (") and "i-2 (" in memo and "i-3" not in memo
    assert memo.endswith(" and 2 more") and memo == usage_memo(many)  # deterministic
    kept = UsagePart("i-s", 191, "workspace", t0, t0 + 27_000)  # a stopped workspace is not "191× workspace"
    assert usage_memo([kept]).endswith("(191 MiB stored workspace, 27 s, 2026-01-01 18:15:16–18:15:43 UTC)")


def _json(cli: Cli, *args: str, token: str | None = None) -> Any:
    return cli.json(*args, token=token)


def _show_lines(text: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines()) if v}


def test_narrow_tables_sim_marks_values_cancel_and_ledger(
    server: tuple[str, Path],  # noqa: F811
    subtests: pytest.Subtests,
) -> None:
    """One server, one running instance and one running job; each item of the issue is a subtest."""
    url, data = server
    cli = Cli(url, (data / "admin-token").read_text().strip())
    cli.env["COLUMNS"] = "80"  # and stdout is a pipe: as in a script, or `danlu ps | cat`
    ann = _json(cli, "admin", "user", "create", "ann")["token"]
    cli("admin", "topup", "ann", "50.00")
    cli("admin", "price", "set", "A100-80GB", "36.00")
    cli("admin", "price", "set", "T4", "3.60")

    rented = cli(
        "rent", "--gpu", "A100-80GB", "--count", "2", "--name", LONG_NAME, "--json", "--", "sleep", "120", token=ann
    )
    iid = json.loads(rented.stdout)["id"]
    ran = cli("run", "--gpu", "T4", "--json", "--", "sh", "-c", "echo started; sleep 120", token=ann)
    jid = json.loads(ran.stdout)["id"]
    wait_for(lambda: _json(cli, "job", "show", jid, token=ann)["status"] == "running")

    with subtests.test("1. ids, instance names and GPU model names whole; nothing wider than the terminal"):
        for args, must in [
            (("ps",), [iid, LONG_NAME, "A100-80GB"]),
            (("offers",), ["A100-80GB", "T4", "SIMULATED"]),
            (("jobs",), [jid, "T4"]),
            (("top", "--once"), [iid, "A100-80GB"]),
        ]:
            shown = cli(*args, token=ann)
            lines = _lines_of(shown.stdout)
            assert all(len(line) <= 80 for line in lines), (args, shown.stdout)
            for word in must:
                assert any(word in line for line in lines), (args, word, shown.stdout)

    with subtests.test("4. `danlu jobs` marks simulated GPUs as `danlu ps` does"):
        assert "(sim)" in cli("ps", token=ann).stdout
        assert "(sim)" in cli("jobs", token=ann).stdout

    with subtests.test("2. no Python values: `exit code: -`, not `exit code: None`"):
        for args in [("show", iid), ("job", "show", jid)]:
            text = cli(*args, token=ann).stdout
            assert not PYTHON_VALUES.search(text), text
            assert _show_lines(text)["exit code"] == "-", text

    with subtests.test("3. `job cancel` prints the status after the cancel, not the one before"):
        cancelled = cli("job", "cancel", jid, token=ann)
        assert f"{jid} cancelled" in cancelled.stdout and "running" not in cancelled.stdout, cancelled.stdout
        assert _json(cli, "job", "show", jid, token=ann)["status"] == "cancelled"

    with subtests.test("5. ledger lines name the instance, its GPUs, the seconds and the period"):
        wait_for(lambda: any(e["kind"] == "usage" for e in _json(cli, "ledger", token=ann)))
        usage = [e for e in _json(cli, "ledger", token=ann) if e["kind"] == "usage"]
        part = r"i-[\w-]+ \(\d× [\w-]+, [\d.]+ s, \d{4}-\d\d-\d\d \d\d:\d\d:\d\d–[\d: -]+ UTC\)"
        memo = re.compile(rf"^GPU usage of {part}(, {part})*( and \d+ more)?$")
        assert usage and all(memo.match(e["memo"]) for e in usage), usage
        assert any(iid in e["memo"] and "(2× A100-80GB, " in e["memo"] for e in usage), usage
        assert "allocation(s)" not in cli("ledger", token=ann).stdout


def test_json_for_rm_logs_job_logs_and_login(
    server: tuple[str, Path],  # noqa: F811
    tmp_path: Path,
    subtests: pytest.Subtests,
) -> None:
    """6. `rm`, `logs`, `job logs` and `login` take --json, as the README says every command does."""
    url, data = server
    admin = (data / "admin-token").read_text().strip()
    cli = Cli(url, admin)
    cli("admin", "topup", "admin", "10.00")
    cli("admin", "price", "set", "T4", "3.60")
    quick = json.loads(cli("rent", "--gpu", "T4", "--json", "--", "sh", "-c", "echo one; echo two").stdout)
    iid = quick["id"]
    wait_for(lambda: _json(cli, "show", iid)["status"] == "exited")
    jid = json.loads(cli("run", "--gpu", "T4", "--json", "--", "sh", "-c", "echo job-out").stdout)["id"]
    wait_for(lambda: _json(cli, "job", "show", jid)["status"] == "succeeded")

    with subtests.test("logs --json: the API's {text, next_offset}; --offset reads on from there"):
        assert _json(cli, "logs", iid) == {"text": "one\ntwo\n", "next_offset": 8}
        assert _json(cli, "logs", iid, "--offset", "4") == {"text": "two\n", "next_offset": 8}

    with subtests.test("job logs --json"):
        assert _json(cli, "job", "logs", jid) == {"text": "job-out\n", "next_offset": 8}

    with subtests.test("rm --json: the instance's final status and cost"):
        removed = _json(cli, "rm", iid)
        assert isinstance(removed, dict) and removed["id"] == iid and removed["status"] == "destroyed"
        assert {"cost", "currency"} <= removed.keys()
        assert cli("rm", iid, "--json", ok=False).returncode != 0  # already gone: an error

    with subtests.test("login --json: the saved URL and user, never the token"):
        cli.env["DANLU_CONFIG"] = str(tmp_path / "danlu.json")
        del cli.env["DANLU_URL"], cli.env["DANLU_TOKEN"]
        shown = cli("login", "--url", url, "--token", admin, "--json")
        assert admin not in shown.stdout + shown.stderr
        assert json.loads(shown.stdout) == {
            "url": url,
            "user": "admin",
            "is_admin": True,
            "config": str(tmp_path / "danlu.json"),
        }
        assert json.loads((tmp_path / "danlu.json").read_text())["token"] == admin  # saved, only not printed


def test_ps_watch_redraws_live_until_interrupted(server: tuple[str, Path]) -> None:  # noqa: F811
    import os
    import pty
    import signal
    import subprocess
    import time

    from tests.cli.test_contract import DANLU

    url, data = server
    cli = Cli(url, (data / "admin-token").read_text().strip())
    cli("admin", "price", "set", "T4", "3.60")
    cli("admin", "topup", "admin", "10.00")
    iid = json.loads(cli("rent", "--gpu", "T4", "--json", "--", "sleep", "120").stdout)["id"]
    master, slave = pty.openpty()
    env = {**cli.env, "COLUMNS": "160", "NO_COLOR": "1"}
    proc = subprocess.Popen([*DANLU, "ps", "--watch", "--interval", "0.5"], env=env, stdout=slave, stderr=slave)
    os.close(slave)
    os.set_blocking(master, False)
    shown = b""

    def drain() -> bool:  # reads what the watch drew so far; False once the terminal is closed
        nonlocal shown
        try:
            shown += os.read(master, 65536)
        except BlockingIOError:
            time.sleep(0.05)
        except OSError:
            return False
        return True

    def stamps() -> set[str]:
        return set(re.findall(r"danlu ps — (\d\d:\d\d:\d\d)", shown.decode(errors="replace")))

    # Evidence, not a time window: wait (generously) until two redraws with different times are on
    # the terminal, then interrupt, and keep reading so the watch never blocks on a full terminal.
    deadline = time.monotonic() + 90
    while len(stamps()) < 2 and time.monotonic() < deadline and proc.poll() is None and drain():
        pass
    assert len(stamps()) >= 2, shown.decode(errors="replace")  # redrawn, with the time moving on
    proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline and drain():
        pass
    assert proc.wait(timeout=30) == 0
    os.close(master)
    text = shown.decode(errors="replace")
    assert iid in text and "running" in text


def test_run_wait_shows_the_queue_position_until_the_job_runs(server: tuple[str, Path]) -> None:  # noqa: F811
    """A wait for a GPU is a live line (the queue position, why it waits), not silence; the API's
    job carries the position while queued."""
    import subprocess

    from tests.cli.test_contract import DANLU

    url, data = server
    cli = Cli(url, (data / "admin-token").read_text().strip())
    cli("admin", "price", "set", "A100-80GB", "36.00")
    cli("admin", "topup", "admin", "100.00")
    blocker = json.loads(cli("rent", "--gpu", "A100-80GB", "--count", "2", "--json", "--", "sleep", "120").stdout)
    proc = subprocess.Popen(
        [*DANLU, "run", "--gpus", "2", "--gpu", "A100-80GB", "--wait", "--", "sleep", "30"],
        env={**cli.env, "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    job = wait_for(lambda: next(iter(cli.json("jobs")), None))  # type: ignore[call-overload]
    assert job["status"] == "queued" and (job["queue_position"], job["queued_jobs"]) == (1, 1)
    assert proc.poll() is None  # still waiting
    cli("stop", blocker["id"])
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert re.search(rf"{job['id']} running", out), out
    assert cli.json("job", "show", job["id"])["queue_position"] is None  # type: ignore[index]


def test_the_cli_speaks_chinese_when_asked() -> None:
    """The CLI's table headers go through the console's catalogs: LANG=zh_CN.UTF-8 or DANLU_LANG."""
    import os
    import subprocess
    import sys

    code = (
        "from danlu.cli import output\n"
        "output.print_table([{'id': 'i-1', 'status': 'running'}], [('id', 'id'), ('status', 'status')])\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG", "DANLU_LANG"))}
    zh = subprocess.run(
        [sys.executable, "-c", code], env={**env, "LANG": "zh_CN.UTF-8"}, capture_output=True, text=True
    )
    en = subprocess.run([sys.executable, "-c", code], env={**env, "LANG": "C.UTF-8"}, capture_output=True, text=True)
    assert "状态" in zh.stdout and "status" not in zh.stdout, zh.stdout + zh.stderr
    assert "status" in en.stdout and "状态" not in en.stdout
