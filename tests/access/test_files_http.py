"""Files over HTTP (issue 26, item 1; danlu.access.files): ``PUT``/``GET /instances/{id}/files`` and
``GET /instances/{id}/entries``, each a command in the rental's sandbox as the renter's uid. A file goes in and
comes back byte for byte; a folder comes back as tar; a checksum that does not match replaces nothing; a size
over the free space is refused before a byte is written; a symlink the renter made leads nowhere outside the
sandbox; another renter's instance is not found."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from collections.abc import Iterator

import httpx
import psutil
import pytest

from tests.access.session_client import run
from tests.access.test_sessions import token_of
from tests.conftest import LiveServer, wait_for
from tests.sandbox.conftest import rent, sbx  # noqa: F401 - the sandboxed live server

pytestmark = pytest.mark.slow(seconds=60)


@pytest.fixture
def renter(sbx: LiveServer) -> Iterator[tuple[httpx.Client, str]]:  # noqa: F811
    with sbx.new_user("ana") as c:
        yield c, rent(c, ["sh", "-c", "exec sleep 3000"])


def test_a_file_goes_in_and_comes_back_and_a_folder_comes_back_as_tar(
    sbx: LiveServer,  # noqa: F811
    renter: tuple[httpx.Client, str],
) -> None:
    c, iid = renter
    data = os.urandom(3 << 20) + b"end"
    digest = hashlib.sha256(data).hexdigest()
    r = c.put(f"/instances/{iid}/files", params={"path": "in/deep/w.bin"}, content=data)
    assert r.status_code == 200, r.text
    assert r.json() == {"path": "in/deep/w.bin", "bytes": len(data), "sha256": digest}
    # as the renter, in its workspace, nothing left behind under a temporary name
    s = run(sbx, token_of(c), iid, ["sh", "-c", "id -u; stat -c %u in/deep/w.bin; ls -A in/deep"])
    uid, owner, listing = s.out.decode().split("\n")[:3]
    assert uid == owner and int(uid) >= sbx.platform.settings.sandbox_uid_first and listing == "w.bin"
    got = c.get(f"/instances/{iid}/files", params={"path": "/workspace/in/deep/w.bin"})
    assert got.status_code == 200 and got.content == data
    assert got.headers["x-danlu-kind"] == "file" and 'filename="w.bin"' in got.headers["content-disposition"]
    folder = c.get(f"/instances/{iid}/files", params={"path": "in"})
    assert folder.status_code == 200 and folder.headers["content-type"] == "application/x-tar"
    with tarfile.open(fileobj=io.BytesIO(folder.content)) as tar:
        member = tar.extractfile("./deep/w.bin")
        assert member is not None and member.read() == data
    listed = c.get(f"/instances/{iid}/entries", params={"path": "in/deep"})
    assert listed.status_code == 200, listed.text
    assert [(e["name"], e["kind"], e["bytes"]) for e in listed.json()] == [("w.bin", "file", len(data))]
    top = c.get(f"/instances/{iid}/entries").json()  # the workspace by default
    assert {"name": "in", "kind": "folder"}.items() <= next(e for e in top if e["name"] == "in").items()


def test_a_bad_checksum_replaces_nothing_and_the_disk_limit_refuses_first(
    sbx: LiveServer,  # noqa: F811
    renter: tuple[httpx.Client, str],
) -> None:
    c, iid = renter
    assert c.put(f"/instances/{iid}/files", params={"path": "keep.txt"}, content=b"v1").status_code == 200
    wrong = c.put(
        f"/instances/{iid}/files",
        params={"path": "keep.txt"},
        content=b"v2",
        headers={"X-Content-SHA256": hashlib.sha256(b"something else").hexdigest()},
    )
    assert wrong.status_code == 422 and wrong.json()["error"]["code"] == "checksum_mismatch", wrong.text
    assert c.get(f"/instances/{iid}/files", params={"path": "keep.txt"}).content == b"v1"
    s = run(sbx, token_of(c), iid, ["sh", "-c", "ls -A"])
    assert b".danlu-upload" not in s.out  # the temporary file went too
    limit_mb = int(c.get(f"/instances/{iid}").json()["sandbox"]["disk_mb"])
    over = c.put(f"/instances/{iid}/files", params={"path": "big"}, content=b"\0" * ((limit_mb + 1) << 20))
    assert over.status_code == 409 and over.json()["error"]["code"] == "disk_limit", over.text
    ls = run(sbx, token_of(c), iid, ["sh", "-c", "ls -A"])
    assert b"big" not in ls.out and b".danlu-upload" not in ls.out


def test_links_lead_nowhere_outside_and_strangers_see_nothing(
    sbx: LiveServer,  # noqa: F811
    renter: tuple[httpx.Client, str],
) -> None:
    c, iid = renter
    assert run(sbx, token_of(c), iid, ["sh", "-c", "ln -s /etc/shadow shadow && ln -s / root"]).status == {
        "exit_code": 0
    }
    shadow = c.get(f"/instances/{iid}/files", params={"path": "shadow"})
    assert shadow.status_code == 404 or b"root:" not in shadow.content  # the sandbox's /etc/shadow, if any
    host_secret = sbx.platform.settings.data_dir / "admin-token"
    via_link = c.get(f"/instances/{iid}/files", params={"path": f"root{host_secret}"})
    assert via_link.status_code == 404, via_link.text  # the host's data folder is not in the sandbox
    with sbx.new_user("bob") as other:
        for r in (
            other.get(f"/instances/{iid}/files", params={"path": "x"}),
            other.put(f"/instances/{iid}/files", params={"path": "x"}, content=b"x"),
            other.get(f"/instances/{iid}/entries"),
        ):
            assert r.status_code == 404 and r.json()["error"]["code"] == "instance_not_found", r.text
    bad = c.put(f"/instances/{iid}/files", params={"path": ""}, content=b"x")
    assert bad.status_code in (400, 422), bad.text


def test_a_download_its_client_abandons_leaves_nothing_running(
    sbx: LiveServer,  # noqa: F811
    renter: tuple[httpx.Client, str],
) -> None:
    c, iid = renter
    assert run(sbx, token_of(c), iid, ["sh", "-c", "head -c 40000000 /dev/urandom > big"]).status == {"exit_code": 0}
    registry = sbx.server.config.app.state.sessions
    with c.stream("GET", f"/instances/{iid}/files", params={"path": "big"}) as r:
        assert r.status_code == 200
        next(r.iter_bytes())  # then the client goes away with most of it unread

    def readers() -> list[psutil.Process]:
        return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["cat", "--", "big"]]

    wait_for(lambda: readers() == [] and registry.open_count(iid) == 0, timeout=60)


def test_a_broken_download_resumes_from_where_it_stopped(
    sbx: LiveServer,  # noqa: F811
    renter: tuple[httpx.Client, str],
) -> None:
    c, iid = renter
    data = os.urandom(1 << 20)
    assert c.put(f"/instances/{iid}/files", params={"path": "ckpt.pt"}, content=data).status_code == 200
    whole = c.get(f"/instances/{iid}/files", params={"path": "ckpt.pt"})
    assert whole.headers["content-length"] == str(len(data)) and whole.headers["accept-ranges"] == "bytes"
    got = data[:300_000]  # what arrived before the connection dropped
    rest = c.get(f"/instances/{iid}/files", params={"path": "ckpt.pt"}, headers={"Range": f"bytes={len(got)}-"})
    assert rest.status_code == 206, rest.text
    assert rest.headers["content-range"] == f"bytes {len(got)}-{len(data) - 1}/{len(data)}"
    assert got + rest.content == data
    middle = c.get(f"/instances/{iid}/files", params={"path": "ckpt.pt"}, headers={"Range": "bytes=10-19"})
    assert middle.status_code == 206 and middle.content == data[10:20]
    past = c.get(f"/instances/{iid}/files", params={"path": "ckpt.pt"}, headers={"Range": f"bytes={len(data)}-"})
    assert past.status_code == 416 and past.json()["error"]["details"] == {"size": len(data)}
    several = c.get(f"/instances/{iid}/files", params={"path": "ckpt.pt"}, headers={"Range": "bytes=0-1,5-9"})
    assert several.status_code == 200 and several.content == data  # another form: the whole file


def _state(c: httpx.Client, iid: str, params: dict[str, object]) -> dict[str, object]:
    r = c.get(f"/instances/{iid}/files/resumable", params=params)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_a_resumable_upload_keeps_what_arrived_and_renames_only_a_whole_checked_file(
    sbx: LiveServer,  # noqa: F811
    renter: tuple[httpx.Client, str],
) -> None:
    """Issue 26, item 1: a large upload resumes after a dropped connection. What arrived stays in a partial file
    beside the target; the rest is sent from exactly there; the file appears only whole and checked."""
    c, iid = renter
    data = os.urandom(3 << 20)
    sha = hashlib.sha256(data).hexdigest()
    params: dict[str, object] = {"path": "models/big.bin", "sha256": sha, "length": len(data)}
    url = f"/instances/{iid}/files/resumable"
    assert _state(c, iid, params)["received"] == 0
    first = c.put(url, params={**params, "offset": 0}, content=data[: 1 << 20])  # then the connection "dropped"
    assert first.status_code == 200 and first.json()["received"] == 1 << 20 and not first.json()["done"]
    assert c.get(f"/instances/{iid}/files/stat", params={"path": "models/big.bin"}).status_code == 404  # not yet
    assert _state(c, iid, params)["received"] == 1 << 20
    wrong = c.put(url, params={**params, "offset": 5}, content=data[5:])
    assert wrong.status_code == 409 and wrong.json()["error"]["code"] == "upload_offset_mismatch"
    assert f"send from byte {1 << 20}" in wrong.json()["error"]["message"]

    def drops() -> Iterator[bytes]:  # a real drop: half a MiB goes out, then the client is gone
        yield data[1 << 20 : (1 << 20) + (1 << 19)]
        raise ConnectionResetError("the train's Wi-Fi")

    with pytest.raises((ConnectionResetError, httpx.TransportError)):
        c.put(url, params={**params, "offset": 1 << 20}, content=drops())
    # The server may still be writing what it received of the dropped request: the next attempt waits for that
    # writer (the partial's lock), and an offset it overtook answers 409 with where to send from, as in a client.
    for _ in range(10):
        got = int(_state(c, iid, params)["received"])
        assert (1 << 20) <= got <= (1 << 20) + (1 << 19)  # a prefix of what was sent, never more
        done = c.put(url, params={**params, "offset": got}, content=data[got:])
        if done.status_code != 409 or done.json()["error"]["code"] != "upload_offset_mismatch":
            break
    assert done.status_code == 200 and done.json() == {**params, "received": len(data), "done": True}, done.text
    assert c.get(f"/instances/{iid}/files", params={"path": "models/big.bin"}).content == data
    st = c.get(f"/instances/{iid}/files/stat", params={"path": "models/big.bin", "sha256": "true"}).json()
    assert (st["kind"], st["bytes"], st["sha256"]) == ("file", len(data), sha)
    assert st["free_bytes"] is None or st["free_bytes"] > 0
    listing = [e["name"] for e in c.get(f"/instances/{iid}/entries", params={"path": "models"}).json()]
    assert listing == ["big.bin"]  # no partial file left behind


def test_a_resumable_upload_refuses_a_bad_checksum_too_many_bytes_no_room_and_strangers(
    sbx: LiveServer,  # noqa: F811
    renter: tuple[httpx.Client, str],
) -> None:
    c, iid = renter
    url = f"/instances/{iid}/files/resumable"
    data = b"checkpoint" * 1000
    lie = {"path": "a.bin", "sha256": hashlib.sha256(b"other").hexdigest(), "length": len(data)}
    bad = c.put(url, params={**lie, "offset": 0}, content=data)
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "checksum_mismatch", bad.text
    assert _state(c, iid, lie)["received"] == 0  # the partial was removed
    assert c.get(f"/instances/{iid}/files/stat", params={"path": "a.bin"}).status_code == 404  # nothing replaced
    short = {"path": "b.bin", "sha256": hashlib.sha256(data[:10]).hexdigest(), "length": 10}
    long = c.put(url, params={**short, "offset": 0}, content=data)
    assert long.status_code == 422 and long.json()["error"]["code"] == "upload_too_long"
    assert _state(c, iid, short)["received"] == 0
    past = c.put(url, params={**short, "offset": 11}, content=b"")
    assert past.status_code == 422 and past.json()["error"]["code"] == "invalid_offset"
    free = c.get(f"/instances/{iid}/files/stat", params={"path": "."}).json()["free_bytes"]
    huge = {"path": "c.bin", "sha256": "0" * 64, "length": (free or 1 << 40) + (1 << 20)}
    full = c.put(url, params={**huge, "offset": 0}, content=b"x")
    assert full.status_code == 409 and full.json()["error"]["code"] == "disk_limit"
    with sbx.new_user("eve") as eve:
        for r in (
            eve.get(url, params=short),
            eve.put(url, params={**short, "offset": 0}, content=data[:10]),
            eve.get(f"/instances/{iid}/files/stat", params={"path": "."}),
        ):
            assert r.status_code == 404 and r.json()["error"]["code"] == "instance_not_found", r.text


def test_a_files_version_changes_with_a_write_in_place_so_an_early_checksum_is_never_reused(
    sbx: LiveServer,  # noqa: F811
    renter: tuple[httpx.Client, str],
) -> None:
    """``danlu cp`` down takes the instance's SHA-256 beside the transfer and keeps it only if the file's version
    (read before that hash) is the same once the bytes are in: a write in place, same size, changes it."""
    c, iid = renter
    assert c.put(f"/instances/{iid}/files", params={"path": "ckpt.bin"}, content=b"a" * 4096).status_code == 200
    first = c.get(f"/instances/{iid}/files/stat", params={"path": "ckpt.bin", "sha256": "true"}).json()
    again = c.get(f"/instances/{iid}/files/stat", params={"path": "ckpt.bin"}).json()
    assert first["version"] and again["version"] == first["version"]  # nothing wrote: the same
    s = run(sbx, token_of(c), iid, ["sh", "-c", "printf b | dd of=ckpt.bin bs=1 seek=10 conv=notrunc; echo wrote"])
    assert b"wrote" in s.out, s.out
    after = c.get(f"/instances/{iid}/files/stat", params={"path": "ckpt.bin", "sha256": "true"}).json()
    assert after["bytes"] == first["bytes"] and after["version"] != first["version"]
    assert after["sha256"] != first["sha256"]
    folder = c.get(f"/instances/{iid}/files/stat", params={"path": "."}).json()
    assert folder["kind"] == "folder" and folder["version"] is None
