"""The console's files page (issue 26, item 1; danlu.console.files_pages): a running instance's folder, an upload
form (two files at once, into a new folder), download of a file and of a folder as tar, the same for 简体中文;
a form without the CSRF token does nothing; an upload over the free space is refused before it is read; another
renter's instance is not found."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import urllib.parse

import pytest

from tests.access.session_client import run
from tests.access.test_sessions import token_of
from tests.conftest import LiveServer
from tests.console.helpers import csrf_of, flash, set_password, sign_in
from tests.sandbox.conftest import rent, sbx  # noqa: F401 - the sandboxed live server

pytestmark = [pytest.mark.slow(seconds=30), pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)]


def test_upload_list_and_download_in_the_console(sbx: LiveServer) -> None:  # noqa: F811
    with sbx.new_user("ana") as api:
        iid = rent(api, ["sh", "-c", "exec sleep 3000"])
        set_password(sbx, "ana", "correct horse battery")
        page = sign_in(sbx, "ana", "correct horse battery")
        assert f'href="/instances/{iid}/files"' in page.get(f"/instances/{iid}").text
        token = csrf_of(page, f"/instances/{iid}/files")
        weights = os.urandom(2 << 20)
        r = page.post(
            f"/instances/{iid}/files",
            data={"csrf": token, "path": "data/new"},
            files=[("files", ("w.bin", weights)), ("files", ("notes 1.txt", b"hello\n"))],
        )
        assert r.status_code == 303, r.text
        assert "path=data%2Fnew" in r.headers["location"]
        listing = page.get(r.headers["location"])
        assert "Uploaded 2 files" in " ".join(flash(listing.text)), listing.text
        assert "w.bin" in listing.text and "notes 1.txt" in listing.text and "2.0 MiB" in listing.text
        # in the rental: the renter's own files, byte for byte
        s = run(sbx, token_of(api), iid, ["sh", "-c", "id -u; stat -c %u data/new/w.bin; sha256sum data/new/w.bin"])
        uid, owner, digest = s.out.decode().split("\n")[:3]
        assert uid == owner and digest.split()[0] == hashlib.sha256(weights).hexdigest()
        down = page.get(f"/instances/{iid}/files/download", params={"path": "data/new/w.bin"})
        assert down.status_code == 200 and down.content == weights
        assert 'filename="w.bin"' in down.headers["content-disposition"]
        folder = page.get(f"/instances/{iid}/files/download", params={"path": "data"})
        with tarfile.open(fileobj=io.BytesIO(folder.content)) as tar:
            member = tar.extractfile("./new/notes 1.txt")
            assert member is not None and member.read() == b"hello\n"
        # a folder page links each folder and the way up
        top = page.get(f"/instances/{iid}/files").text
        assert f'href="/instances/{iid}/files?path=data"' in top
        inner = page.get(f"/instances/{iid}/files", params={"path": "data/new"}).text
        assert f'href="/instances/{iid}/files?path=data"' in inner and 'id="up"' in inner
        zh = sign_in(sbx, "ana", "correct horse battery", lang="zh_CN")
        assert "上传到此文件夹" in zh.get(f"/instances/{iid}/files").text


def test_the_upload_form_refuses_what_it_must_before_reading_it(sbx: LiveServer) -> None:  # noqa: F811
    with sbx.new_user("ben") as api:
        iid = rent(api, ["sh", "-c", "exec sleep 3000"])
        set_password(sbx, "ben", "correct horse battery")
        page = sign_in(sbx, "ben", "correct horse battery")
        files_page = f"/instances/{iid}/files"
        forged = page.post(files_page, data={"csrf": "forged", "path": "."}, files=[("files", ("x", b"x"))])
        assert forged.status_code == 403
        limit_mb = int(api.get(f"/instances/{iid}").json()["sandbox"]["disk_mb"])
        token = csrf_of(page, files_page)
        over = page.post(
            files_page,
            data={"csrf": token, "path": "."},
            files=[("files", ("big", b"\0" * ((limit_mb + 1) << 20)))],
            headers={"Referer": sbx.url + files_page},
        )
        assert over.status_code == 303
        shown = " ".join(flash(page.get(urllib.parse.urlparse(over.headers["location"]).path).text))
        assert "does not fit" in shown, shown
        ls = run(sbx, token_of(api), iid, ["sh", "-c", "ls -A"])
        assert b"big" not in ls.out and b"x" not in ls.out.split()
        with sbx.new_user("eve"):
            set_password(sbx, "eve", "correct horse battery")
            other = sign_in(sbx, "eve", "correct horse battery")
            assert other.get(files_page).status_code == 404
            assert other.get(f"{files_page}/download", params={"path": "."}).status_code == 404
