"""``danlu cp`` (issue 26, first part): a folder into a running rental and back, byte for byte and checked with
SHA-256 at both ends, as the renter's uid in its sandbox; an archive the rental's code made cannot write outside
the destination here; another renter's instance is not found; the disk limit refuses a copy before it starts."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.access.session_client import run
from tests.access.test_sessions import token_of
from tests.cli.test_contract import DANLU
from tests.conftest import LiveServer
from tests.sandbox.conftest import rent, sbx  # noqa: F401 - the sandboxed live server

pytestmark = pytest.mark.slow(seconds=60)


@pytest.fixture
def renter(sbx: LiveServer) -> Iterator[tuple[httpx.Client, str]]:  # noqa: F811
    with sbx.new_user("ana") as c:
        yield c, rent(c, ["sh", "-c", "exec sleep 3000"])


def cp(sbx: LiveServer, c: httpx.Client, *args: str) -> subprocess.CompletedProcess[str]:  # noqa: F811
    env = {"DANLU_URL": sbx.url, "DANLU_TOKEN": token_of(c), "PATH": "/usr/bin:/bin", "HOME": "/tmp"}
    return subprocess.run([*DANLU, "cp", *args], env=env, capture_output=True, text=True, timeout=300)


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_a_folder_goes_in_and_comes_back_byte_for_byte(
    sbx: LiveServer,  # noqa: F811
    renter: tuple[httpx.Client, str],
    tmp_path: Path,
) -> None:
    c, iid = renter
    data = tmp_path / "mine"  # not "data": the live server keeps its own folder there
    (data / "deep" / "er").mkdir(parents=True)
    (data / "weights.bin").write_bytes(os.urandom(3 << 20))  # several stdin chunks
    (data / "deep" / "er" / "notes with spaces.txt").write_text("epoch 1\n")
    (data / "empty").write_bytes(b"")
    up = cp(sbx, c, str(data), f"{iid}:inputs", "--json")
    assert up.returncode == 0, up.stderr
    assert json.loads(up.stdout) == {
        "files": 3, "bytes": (3 << 20) + 8, "to": f"{iid}:./inputs", "sha256_verified": True,
    }  # fmt: skip
    # In the rental: the renter's own files, as its uid, in /workspace.
    s = run(sbx, token_of(c), iid, ["sh", "-c", "id -u; stat -c %u inputs/weights.bin; sha256sum inputs/weights.bin"])
    uid, owner, digest = s.out.decode().split("\n")[:3]
    assert uid == owner and int(uid) >= sbx.platform.settings.sandbox_uid_first
    assert digest.split()[0] == hashlib.sha256((data / "weights.bin").read_bytes()).hexdigest()
    down = cp(sbx, c, f"{iid}:/workspace/inputs", str(tmp_path / "back"))
    assert down.returncode == 0, down.stderr
    assert "SHA-256 verified" in down.stdout
    assert tree(tmp_path / "back") == tree(data)
    into = tmp_path / "folder"
    into.mkdir()
    one = cp(sbx, c, f"{iid}:inputs/deep/er/notes with spaces.txt", str(into))  # into an existing folder
    assert one.returncode == 0, one.stderr
    assert (into / "notes with spaces.txt").read_text() == "epoch 1\n"


def test_what_the_rentals_code_puts_in_the_archive_cannot_land_outside(
    sbx: LiveServer,  # noqa: F811
    renter: tuple[httpx.Client, str],
    tmp_path: Path,
) -> None:
    """The rental's code is a stranger to the laptop too: links out of the destination are not made here."""
    c, iid = renter
    script = "mkdir -p out && echo fine > out/ok && ln -s /etc/passwd out/abs && ln -s ../../secret out/up"
    assert run(sbx, token_of(c), iid, ["sh", "-c", script]).status == {"exit_code": 0}
    (tmp_path / "secret").write_text("laptop secret")
    dest = tmp_path / "dl" / "got"
    dest.parent.mkdir()
    r = cp(sbx, c, f"{iid}:out", str(dest))
    assert r.returncode == 0, r.stderr
    assert (dest / "ok").read_text() == "fine\n"
    assert not (dest / "abs").exists() and not (dest / "abs").is_symlink()
    assert not (dest / "up").is_symlink()
    assert "skipped (would land outside" in r.stderr and "out/abs" in r.stderr and "out/up" in r.stderr


def test_another_renters_instance_bad_specs_and_the_disk_limit(
    sbx: LiveServer,  # noqa: F811
    renter: tuple[httpx.Client, str],
    tmp_path: Path,
) -> None:
    c, iid = renter
    (tmp_path / "f").write_text("x")
    with sbx.new_user("bob") as other:
        r = cp(sbx, other, str(tmp_path / "f"), f"{iid}:f")
        assert r.returncode != 0 and "instance_not_found" in r.stderr, r.stderr
    r = cp(sbx, c, str(tmp_path / "f"), str(tmp_path / "g"))
    assert r.returncode != 0 and "error [invalid_copy]" in r.stderr
    limit_mb = int(c.get(f"/instances/{iid}").json()["sandbox"]["disk_mb"])
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate((limit_mb + 1) << 20)  # sparse here, one MiB over the limit there
    r = cp(sbx, c, str(big), f"{iid}:big")
    assert r.returncode != 0 and "error [disk_limit]" in r.stderr, r.stderr
    ls = run(sbx, token_of(c), iid, ["sh", "-c", "ls big 2>&1; true"])
    assert b"No such file" in ls.out  # refused before anything was sent


def test_a_large_file_resumes_where_a_broken_copy_stopped_both_ways(
    sbx: LiveServer,  # noqa: F811
    renter: tuple[httpx.Client, str],
    tmp_path: Path,
) -> None:
    """Issue 26, item 1: ``danlu cp`` of one large file resumes (``--resumable``; automatic from 64 MiB): up, from
    what the server kept of a broken copy; down, from the partial file here. A partial that is not a prefix of the
    file fails the check, is removed, and the next run copies it whole."""
    c, iid = renter
    data = os.urandom(3 << 20)
    sha = hashlib.sha256(data).hexdigest()
    (tmp_path / "big.bin").write_bytes(data)
    params = {"path": "in/big.bin", "sha256": sha, "length": len(data)}
    kept = c.put(f"/instances/{iid}/files/resumable", params={**params, "offset": 0}, content=data[:1_000_000])
    assert kept.status_code == 200 and kept.json()["received"] == 1_000_000  # a copy that broke there
    up = cp(sbx, c, "--resumable", "--json", str(tmp_path / "big.bin"), f"{iid}:in/")
    assert up.returncode == 0, up.stderr
    assert json.loads(up.stdout) == {"files": 1, "bytes": len(data), "to": f"{iid}:in/big.bin",
                                     "sha256_verified": True, "resumed_from": 1_000_000}  # fmt: skip
    assert "resuming" in up.stderr
    assert c.get(f"/instances/{iid}/files", params={"path": "in/big.bin"}).content == data
    out = tmp_path / "out.bin"
    (tmp_path / "out.bin.danlu-part").write_bytes(data[:700_000])  # a download that broke there
    down = cp(sbx, c, "--json", f"{iid}:in/big.bin", str(out))  # a partial copy waits: resumed without the flag
    assert down.returncode == 0, down.stderr
    assert json.loads(down.stdout)["resumed_from"] == 700_000
    assert out.read_bytes() == data and not (tmp_path / "out.bin.danlu-part").exists()
    out.unlink()
    (tmp_path / "out.bin.danlu-part").write_bytes(b"\0" * 700_000)  # not what the file starts with
    bad = cp(sbx, c, f"{iid}:in/big.bin", str(out))
    assert bad.returncode != 0 and "error [copy_corrupted]" in bad.stderr, bad.stderr
    assert not out.exists() and not (tmp_path / "out.bin.danlu-part").exists()
    again = cp(sbx, c, "--resumable", f"{iid}:in/big.bin", str(out))
    assert again.returncode == 0 and out.read_bytes() == data, again.stderr
