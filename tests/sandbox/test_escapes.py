"""Escape attempts, each a real rented command in the real sandbox, on SQLite and PostgreSQL.

A renter (mallory) tries to reach the operator's token, the database, another renter's (victor's)
workspace, log and processes, the server's environment, a GPU she was not given, the database
and control-plane ports, and to write outside her workspace. Every attempt must fail and leave
the platform and the neighbour unharmed. The hogs (fork bomb, memory, disk) are in test_limits.py.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import LiveServer, wait_for
from tests.sandbox.conftest import CANARY, attack, log_of, rent, tiny_rootfs

VICTIM_SECRET = "victor-secret-" + os.urandom(6).hex()
VICTIM_LOG_SECRET = "victor-log-" + os.urandom(6).hex()


@pytest.fixture
def victim(sbx: LiveServer) -> Iterator[tuple[httpx.Client, str]]:
    """victor: a running rental with a secret file in his workspace and a secret in his log."""
    with sbx.new_user("victor") as v:
        iid = rent(v, ["sh", "-c", f"echo {VICTIM_SECRET} > secret.txt; echo {VICTIM_LOG_SECRET}; exec sleep 120"])
        wait_for(lambda: VICTIM_LOG_SECRET in log_of(v, iid))
        yield v, iid
        v.delete(f"/instances/{iid}")


@pytest.fixture
def mallory(sbx: LiveServer) -> Iterator[httpx.Client]:
    with sbx.new_user("mallory") as m:
        yield m


def test_cannot_read_the_admin_token_the_database_or_another_renters_files(
    sbx: LiveServer, victim: tuple[httpx.Client, str], mallory: httpx.Client
) -> None:
    v, victim_id = victim
    data = sbx.platform.settings.data_dir
    ws = sbx.platform.workspaces
    targets = [
        data / "admin-token",
        data / "danlu.db",
        ws / victim_id / "secret.txt",
        sbx.platform.run_dirs / victim_id / "output.log",
    ]
    script = "; ".join(f"cat {t} 2>&1 || echo DENIED" for t in targets)
    script += "; cat ../../admin-token 2>&1 || echo DENIED; ls / ; ls /workspace/.. 2>&1"
    script += f"; for d in /*; do case $d in /usr|/proc|/sys|/dev) ;; *) grep -rl {VICTIM_SECRET} $d;; esac; done"
    script += "; find / -xdev \\( -name admin-token -o -name 'danlu.db*' \\) 2>/dev/null; echo end"
    view, out = attack(mallory, script)
    token = (data / "admin-token").read_text().strip()
    assert token not in out and VICTIM_SECRET not in out and VICTIM_LOG_SECRET not in out
    assert "SQLite format" not in out
    assert out.count("DENIED") == len(targets) + 1, out
    assert view["exit_code"] is not None  # it ran to its end; the platform is unharmed:
    with sbx.admin() as a:
        assert a.get("/admin/users").status_code == 200
    assert v.get(f"/instances/{victim_id}").json()["status"] == "running"


def test_the_servers_environment_never_reaches_a_rental(sbx: LiveServer, mallory: httpx.Client) -> None:
    assert os.environ.get("DANLU_CANARY_SECRET") == CANARY  # the server has it …
    _view, out = attack(mallory, "env; cat /proc/1/environ /proc/self/environ | tr '\\0' '\\n'")
    assert CANARY not in out  # … no rental sees it
    names = {line.split("=", 1)[0] for line in out.splitlines() if "=" in line}
    assert "CUDA_VISIBLE_DEVICES" in names and "DANLU_INSTANCE_ID" in names
    assert not names & {"DANLU_TEST_PG_URL", "PYTHONPATH", "VIRTUAL_ENV", "PWD_OF_SERVER", "SSH_AUTH_SOCK"}
    assert names <= {
        "PATH", "HOME", "LANG", "USER", "PWD", "SHLVL", "_", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER", "DANLU_INSTANCE_ID", "DANLU_GPU_MODEL", "DANLU_GPUS_SIMULATED", "DANLU_WORKSPACE",
        "DANLU_PREEMPT_FILE", "OLDPWD",
    }, names  # fmt: skip


def test_renter_env_reaches_only_the_renters_command(sbx: LiveServer, mallory: httpx.Client) -> None:
    _view, out = attack(mallory, "echo token=$WANDB_API_KEY", env={"WANDB_API_KEY": "k-123"})
    assert "token=k-123" in out
    r = mallory.post("/instances", json={"gpu_model": "T4", "command": ["true"], "env": {"DANLU_INSTANCE_ID": "x"}})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_env"


def test_cannot_see_or_signal_another_instances_processes(
    sbx: LiveServer, victim: tuple[httpx.Client, str], mallory: httpx.Client
) -> None:
    v, victim_id = victim
    host_pids = " ".join(str(pid) for pid in _host_pids_running("sleep 120"))
    assert host_pids
    script = "ls /proc | grep -E '^[0-9]+$' | tr '\\n' ' '; echo; ps -e 2>&1 | grep -c sleep; "
    script += f"for p in {host_pids} 1; do kill -9 $p 2>&1 && echo KILLED $p; done; kill -9 -1 2>&1; echo done"
    _view, out = attack(mallory, script)
    pids = out.splitlines()[0].split()
    assert len(pids) <= 6, pids  # its own few processes, in a PID namespace of its own
    assert "KILLED" not in out.replace("KILLED 1", "")  # pid 1 is its own sandbox's init at most
    assert v.get(f"/instances/{victim_id}").json()["status"] == "running"
    assert VICTIM_LOG_SECRET in log_of(v, victim_id)


def test_only_the_allocated_gpu_devices_are_there(sbx: LiveServer, mallory: httpx.Client) -> None:
    devices = sbx.platform.sandbox_root / "devices"
    others = sorted(devices.iterdir())
    script = "echo gpu=$CUDA_VISIBLE_DEVICES; ls /dev; echo ---; for d in /dev/nvidia*; do head -c 200 $d; echo; done; "
    script += "; ".join(f"cat {o} 2>&1 || echo DENIED" for o in others)
    _view, out = attack(mallory, script, gpu="A100-80GB", gpu_count=1)
    listing, _, rest = out.partition("---")
    visible = listing.split()[0].removeprefix("gpu=")
    nodes = sorted(n for n in listing.split() if n.startswith("nvidia"))
    assert nodes == [f"nvidia{visible}"], nodes  # exactly the one it rented
    assert rest.count("simulated GPU SIM-local-") == 1
    assert out.count("DENIED") == len(others)


@pytest.mark.parametrize("policy", ["none", "outbound"])
def test_no_route_to_the_database_or_the_control_plane(sbx: LiveServer, mallory: httpx.Client, policy: str) -> None:
    if policy == "outbound" and not sbx.platform.sandbox.outbound_ok:
        pytest.skip("outbound needs a root server with slirp4netns and nftables")
    with sbx.admin() as a:
        host = a.get("/admin/hosts").json()[0]["name"]
        assert a.put(f"/admin/hosts/{host}", json={"network_policy": policy}).status_code == 200
    from danlu.compute.sandbox.network import host_addresses

    targets = [("127.0.0.1", 5432), ("127.0.0.1", sbx.port), ("10.0.2.2", 5432), ("10.0.2.2", sbx.port)]
    targets += [(a, p) for a in host_addresses() if ":" not in a for p in (5432, sbx.port)]
    targets += [("169.254.169.254", 80), ("192.168.0.1", 80), ("172.17.0.1", 5432)]
    probe = (
        "import socket, json\n"
        f"out = {{}}\nfor h, p in {targets!r}:\n"
        "    s = socket.socket(); s.settimeout(3)\n"
        "    try:\n        s.connect((h, p)); out[f'{h}:{p}'] = 'CONNECTED'\n"
        "    except OSError as e:\n        out[f'{h}:{p}'] = type(e).__name__\n"
        "print(json.dumps(out))\n"
    )
    view, out = attack(mallory, 'ip -o -4 addr 2>&1; python3 -c "$P"', env={"P": probe})
    results = json.loads(out.strip().splitlines()[-1])
    assert "CONNECTED" not in results.values(), results
    assert view["sandbox"]["network"] == policy
    if policy == "none":
        assert "tap0" not in out
    else:
        assert "tap0" in out and "10.0.2.100" in out


def test_writes_outside_workspace_and_tmp_fail_and_the_image_is_unchanged(
    sbx: LiveServer, mallory: httpx.Client, tmp_path: Path
) -> None:
    root = tiny_rootfs(tmp_path / "tiny")
    with sbx.admin() as a:
        r = a.post("/admin/images", json={"name": "tiny", "source": str(root), "description": "busybox"})
        assert r.status_code == 201, r.text
    image_root = sbx.platform.sandbox_root / "images" / "tiny" / "rootfs"
    before = _tree_digest(image_root)
    targets = ["/bin/pwned", "/etc/passwd", "/pwned", "/run/danlu/pwned", "/dev/pwned", "/proc/pwned", "/sys/pwned"]
    script = "; ".join(f"(echo x > {t}) 2>/dev/null && echo WROTE {t}" for t in targets)
    script += "; rm -f /bin/sh 2>/dev/null && echo REMOVED; chmod 777 /etc 2>/dev/null && echo CHMOD"
    script += "; echo ok > /workspace/mine && echo ok > /tmp/mine && cat /workspace/mine /tmp/mine; id"
    view, out = attack(mallory, script, image="tiny")
    assert "WROTE" not in out and "REMOVED" not in out and "CHMOD" not in out, out
    assert out.count("ok") == 2
    uid = view["sandbox"]["uid"]
    assert f"uid={uid}" in out and uid >= sbx.platform.settings.sandbox_uid_first
    assert _tree_digest(image_root) == before  # byte for byte
    host_view = sbx.platform.workspaces / view["id"] / "mine"
    assert host_view.stat().st_uid == uid and oct(host_view.parent.stat().st_mode & 0o777) == "0o700"


def test_platform_files_are_private(sbx: LiveServer) -> None:
    data = sbx.platform.settings.data_dir
    for path in [data / "admin-token", *data.glob("danlu.db*")]:
        assert path.stat().st_mode & 0o077 == 0, path
    assert (data / "runs").stat().st_mode & 0o077 == 0


def _host_pids_running(needle: str) -> list[int]:
    import psutil

    return [p.pid for p in psutil.process_iter(["cmdline"]) if " ".join(p.info.get("cmdline") or []) == needle]


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for dirpath, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(dirs + files):
            p = Path(dirpath) / name
            st = p.lstat()
            h.update(f"{p.relative_to(root)}:{st.st_mode}:{st.st_uid}:{st.st_size}".encode())
            if p.is_symlink():
                h.update(os.readlink(p).encode())
            elif p.is_file():
                h.update(p.read_bytes())
    return h.hexdigest()


def test_the_servers_keyring_is_not_shared(sbx: LiveServer, mallory: httpx.Client) -> None:
    """Every run joins a session keyring of its own: a key in the server's session keyring (as a
    systemd service has) is invisible to renters, and one renter's keys never reach another's."""
    import ctypes
    import platform as host

    if host.machine() != "x86_64":
        pytest.skip("the test calls keyctl(2)/add_key(2) by their x86_64 syscall numbers")
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.syscall(250, 1, None) > 0  # KEYCTL_JOIN_SESSION_KEYRING: a fresh session, like systemd's
    payload = b"root-key-" + os.urandom(4).hex().encode()
    key = libc.syscall(248, b"user", b"danlu-canary", payload, len(payload), -3)  # into @s
    assert key > 0
    _view, out = attack(
        mallory, f"cat /proc/keys; keyctl print {key} 2>&1; keyctl add user planted x @s >/dev/null 2>&1; echo end"
    )
    assert payload.decode() not in out and "danlu-canary" not in out, out
    with sbx.new_user("nestor") as n:
        _view, out = attack(n, "cat /proc/keys; echo end")
        assert "planted" not in out and "danlu-canary" not in out, out


def test_the_host_images_etc_holds_no_service_configs(sbx: LiveServer, mallory: httpx.Client) -> None:
    """The host image shows a curated /etc: libraries, certificates, name service; not the host's
    service configs (which may hold secrets), and a passwd naming the renter, not the host's users."""
    # One file per test process: the SQLite and PostgreSQL variants may run at once in two workers.
    secret = Path(f"/etc/danlu-test-service-{os.getpid()}.conf")
    secret.write_text("password=hunter2\n")
    try:
        _view, out = attack(mallory, f"ls /etc; echo ---; cat {secret} 2>&1; id -un; cat /etc/passwd")
    finally:
        secret.unlink()
    listing = out.split("---")[0].split()
    assert secret.name not in listing and "hunter2" not in out
    assert not {"postgresql", "shadow", "sudoers", "ssh", "systemd", "mysql"} & set(listing), listing
    assert {"ssl", "ld.so.cache", "passwd"} <= set(listing)
    assert "renter" in out and "postgres:" not in out


def test_outbound_runs_resolve_names_through_slirp(sbx: LiveServer, mallory: httpx.Client) -> None:
    if not sbx.platform.sandbox.outbound_ok:
        pytest.skip("outbound needs a root server with slirp4netns and nftables")
    _view, out = attack(mallory, "cat /etc/resolv.conf")
    assert out.strip() == "nameserver 10.0.2.3"


def test_a_folder_nested_thousands_deep_neither_hides_disk_use_nor_survives_rm(sbx: LiveServer) -> None:
    """Walks that recursed (``os.fwalk``, ``os.walk``, ``shutil.rmtree``) raised on a 1,500-level folder: the
    disk limit was never measured, the run's end never recorded (its GPU stayed taken) and ``rm`` answered
    500 after committing, leaving the files on disk with nobody paying for them (found by an attacker's pass)."""
    nest = (
        "import os, time\nfd = os.open('/workspace', os.O_RDONLY)\n"
        "for _ in range(3000):\n"
        "    os.mkdir('a', dir_fd=fd); n = os.open('a', os.O_RDONLY, dir_fd=fd); os.close(fd); fd = n\n"
        "print('nested', flush=True)\n"
        "for i in range(100):\n"
        "    f = os.open(f'f{i}', os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)\n"
        "    os.write(f, b'x' * (1 << 20)); os.close(f)\n"
        "print('wrote 100 MiB', flush=True)\ntime.sleep(120)\n"
    )
    with sbx.new_user("nester") as c:
        iid = rent(c, ["sh", "-c", 'python3 -c "$P"'], env={"P": nest})
        view = wait_for(lambda: (v := c.get(f"/instances/{iid}").json())["status"] == "exited" and v, timeout=60)
        assert isinstance(view, dict) and "disk limit" in view["status_reason"], view
        assert "nested" in log_of(c, iid)
        assert c.delete(f"/instances/{iid}").status_code == 204
        assert not (sbx.platform.workspaces / iid).exists()
