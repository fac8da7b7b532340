"""Snapshots (issue 26, item 4): a stopped workspace into its account's restic repository
(deduplicated, encrypted with the account's key), listed, restored into a new rental with owners
and links as they were, removed; another renter's snapshot is not there, another account's key
cannot read the repository. Real restic, real sandbox, SQLite and PostgreSQL."""

from __future__ import annotations

import os
import shutil
import subprocess

import httpx
import pytest

from tests.conftest import LiveServer, wait_for

# One database: restic is the work here, the database one row per snapshot (the tenant matrix takes a
# snapshot on both databases).
pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)

MAKE = "mkdir -p d; head -c 3000000 /dev/urandom > d/blob; echo v1 > note; ln -sf /etc/passwd link; echo made; sleep 60"


@pytest.fixture(autouse=True)
def _restic() -> None:
    if shutil.which("restic") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("restic is not installed (CI=true: `make test` installs it)")
        pytest.skip("restic is not installed (Debian package restic)")


def _stopped(c: httpx.Client, command: str) -> str:
    iid = str(c.post("/instances", json={"gpu_model": "T4", "command": ["sh", "-c", command]}).json()["id"])
    wait_for(lambda: "made" in c.get(f"/instances/{iid}/logs").json()["text"])
    assert c.post(f"/instances/{iid}/stop").status_code == 200
    wait_for(lambda: c.get(f"/instances/{iid}").json()["status"] == "stopped")
    return iid


def test_snapshot_restore_into_a_new_rental_dedup_and_remove(live: LiveServer) -> None:
    with live.new_user("ana", topup="500.00") as c, live.new_user("ben", topup="500.00") as other:
        iid = _stopped(c, MAKE)
        r = c.post(f"/instances/{iid}/snapshots", json={"name": "first"})
        assert r.status_code == 201, r.text
        first = r.json()
        assert (first["name"], first["instance_id"]) == ("first", iid) and first["size_bytes"] >= 3_000_000
        assert first["added_bytes"] >= 2_900_000  # random bytes: stored (compressed or not)
        second = c.post(f"/instances/{iid}/snapshots").json()
        assert second["added_bytes"] < first["added_bytes"] // 10  # unchanged workspace: nothing new stored
        assert [s["id"] for s in c.get("/snapshots").json()] == [first["id"], second["id"]]
        assert other.get("/snapshots").json() == []
        # another renter: the snapshot is not there, to list, restore or remove
        assert other.delete(f"/snapshots/{first['id']}").status_code == 404
        body = {"gpu_model": "T4", "command": ["sleep", "1"], "from_snapshot": first["id"]}
        assert other.post("/instances", json=body).json()["error"]["code"] == "snapshot_not_found"
        assert other.post(f"/instances/{iid}/snapshots").status_code == 404
        running = c.post("/instances", json={"gpu_model": "T4", "command": ["sleep", "60"]}).json()["id"]
        assert c.post(f"/instances/{running}/snapshots").json()["error"]["code"] == "source_running"
        bad = c.post("/instances", json={**body, "from_snapshot": "../x"})
        assert (bad.status_code, bad.json()["error"]["code"]) == (422, "invalid_snapshot_id")

        read = "md5sum d/blob; cat note; readlink link; echo made; sleep 60"
        r = c.post("/instances", json={"gpu_model": "T4", "command": ["sh", "-c", read], "from_snapshot": first["id"]})
        assert r.status_code == 201, r.text
        new = r.json()["id"]
        wait_for(lambda: "made" in c.get(f"/instances/{new}/logs").json()["text"])
        text = c.get(f"/instances/{new}/logs").json()["text"]
        src = live.platform.workspaces / iid
        digest = subprocess.run(["md5sum", str(src / "d" / "blob")], capture_output=True, text=True).stdout.split()[0]
        assert f"{digest}  d/blob\nv1\n/etc/passwd\n" in text, text
        restored = live.platform.workspaces / new
        assert (restored / "link").is_symlink() and (restored / "d" / "blob").stat().st_uid == (
            src / "note"
        ).stat().st_uid
        reasons = [e["reason"] for e in c.get(f"/instances/{new}/events").json()]
        assert f"rented with a copy of {first['id']}'s workspace" in reasons

        assert c.delete(f"/snapshots/{first['id']}").status_code == 204
        assert [s["id"] for s in c.get("/snapshots").json()] == [second["id"]]
        assert c.delete(f"/snapshots/{first['id']}").status_code == 404
        for x in (iid, running, new):
            c.delete(f"/instances/{x}")


def test_one_accounts_key_cannot_read_anothers_repository(live: LiveServer) -> None:
    with live.new_user("cat", topup="50.00") as c, live.new_user("dan", topup="50.00") as d:
        for client in (c, d):
            iid = _stopped(client, "echo secret > s; echo made; sleep 60")
            assert client.post(f"/instances/{iid}/snapshots").status_code == 201
    data = live.platform.settings.data_dir
    repos = sorted((data / "snapshots").glob("account-*"))
    keys = sorted((data / "snapshot-keys").glob("account-*"))
    assert len(repos) == len(keys) == 2 and all(k.stat().st_mode & 0o777 == 0o600 for k in keys)
    env = {"PATH": os.environ["PATH"], "RESTIC_CACHE_DIR": str(data / "rc"), "HOME": str(data)}

    def snapshots_with(repo: object, key: object) -> subprocess.CompletedProcess[str]:
        args = ["restic", "-r", str(repo), "--password-file", str(key), "snapshots", "--json"]
        return subprocess.run(args, env=env, capture_output=True, text=True)

    assert snapshots_with(repos[0], keys[0]).returncode == 0
    wrong = snapshots_with(repos[0], keys[1])
    assert wrong.returncode != 0 and "wrong password" in wrong.stderr
    assert not any(b"secret" in f.read_bytes() for f in repos[0].rglob("*") if f.is_file())  # encrypted at rest
