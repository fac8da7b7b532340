"""Images: importing a root filesystem from a folder or a tarball (specials dropped, setuid bits
cleared, nothing written outside the image's folder), name/source errors with stable codes,
removal rules, and renting with an image, on SQLite and PostgreSQL."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import func, select

from danlu.accounts.service import create_user
from danlu.billing import service as billing
from danlu.compute import images, instances
from danlu.context import Platform
from danlu.core.errors import DanluError
from danlu.db.models import Gpu, Instance, Job, User
from danlu.scheduling import jobs
from tests.conftest import LiveServer, require_sandbox, wait_for
from tests.fakes import RecordingBackend


def make_tree(src: Path) -> Path:
    """A small root filesystem with an executable, symlinks, setuid/setgid files and a FIFO."""
    (src / "bin").mkdir(parents=True)
    (src / "etc").mkdir()
    (src / "bin" / "tool").write_text("#!/bin/sh\necho tool\n")
    os.chmod(src / "bin" / "tool", 0o755)
    (src / "etc" / "motd").write_text("hello from the image\n")
    (src / "bin" / "su").write_text("pretend setuid binary")
    os.chmod(src / "bin" / "su", 0o4755)
    (src / "bin" / "sg").write_text("pretend setgid binary")
    os.chmod(src / "bin" / "sg", 0o2755)
    os.symlink("tool", src / "bin" / "alias")
    os.symlink("/etc/shadow", src / "etc" / "host-shadow")  # kept as a link, never followed on import
    os.mkfifo(src / "etc" / "pipe")
    return src


def rootfs(p: Platform, name: str) -> Path:
    return p.sandbox_root / "images" / name / "rootfs"


def code_of(call: Callable[[], object]) -> str:
    with pytest.raises(DanluError) as exc:
        call()
    return exc.value.code


def assert_imported(p: Platform, name: str, size: int | None) -> None:
    root = rootfs(p, name)
    assert isinstance(size, int) and size > 0
    assert (root / "etc" / "motd").read_text() == "hello from the image\n"
    assert stat.S_IMODE(os.lstat(root / "bin" / "tool").st_mode) & 0o111 == 0o111
    assert os.readlink(root / "bin" / "alias") == "tool"
    for f in ("su", "sg"):
        mode = os.lstat(root / "bin" / f).st_mode
        assert stat.S_ISREG(mode) and mode & (stat.S_ISUID | stat.S_ISGID) == 0, (f, oct(mode))
        assert mode & stat.S_IXUSR  # only the setuid/setgid bits go
    assert not os.path.lexists(root / "etc" / "pipe")
    assert [i.name for i in images.list_images(p)] == ["host", name]


def test_register_from_a_folder(platform: Platform, tmp_path: Path) -> None:
    """Pins: a folder is copied with its files, modes and symlinks (not followed), setuid/setgid
    cleared, the FIFO dropped, a size > 0, and the operator's source folder left as it was."""
    src = make_tree(tmp_path / "tree")
    view = images.register(platform, "tree", str(src), "a test tree")
    assert (view.name, view.kind, view.description) == ("tree", "rootfs", "a test tree")
    assert_imported(platform, "tree", view.size_bytes)
    assert os.readlink(rootfs(platform, "tree") / "etc" / "host-shadow") == "/etc/shadow"
    assert os.lstat(src / "bin" / "su").st_mode & stat.S_ISUID  # the source is not touched
    assert stat.S_ISFIFO(os.lstat(src / "etc" / "pipe").st_mode)


def test_register_from_a_tarball(platform: Platform, tmp_path: Path) -> None:
    """Pins: a .tar.gz is unpacked the same way: FIFO and device members dropped, setuid/setgid
    cleared, symlinks kept; the listed image has a size > 0."""
    src = make_tree(tmp_path / "tree")
    tarball = tmp_path / "rootfs.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(src, arcname=".")
        dev = tarfile.TarInfo("dev/null-ish")
        dev.type, dev.devmajor, dev.devminor = tarfile.CHRTYPE, 1, 3
        tar.addfile(dev)
    view = images.register(platform, "tarred", str(tarball))
    assert view.kind == "rootfs"
    assert_imported(platform, "tarred", view.size_bytes)
    assert not os.path.lexists(rootfs(platform, "tarred") / "dev" / "null-ish")
    listed = {i.name: i.size_bytes for i in images.list_images(platform)}
    assert listed == {"host": None, "tarred": view.size_bytes}


def test_folders_a_tarball_never_named_are_made_readable(platform: Platform, tmp_path: Path) -> None:
    """A tarball of files only (no directory entries, as some exporters write) made its folders with
    the server's umask (0700): the renter's uid could not enter /usr/bin and the image was unusable
    (issue 28, finding 7). They are made 0755, as a folder member's own mode is kept."""
    tarball = tmp_path / "files-only.tar"
    with tarfile.open(tarball, "w") as tar:
        _member(tar, "usr/bin/tool", b"#!/bin/sh\necho ok\n")
        _member(tar, "etc/motd", b"hi\n")
        named = tarfile.TarInfo("opt/private")
        named.type, named.mode = tarfile.DIRTYPE, 0o750
        tar.addfile(named)
    old = os.umask(0o077)  # the server's own (its data folder is private)
    try:
        images.register(platform, "filesonly", str(tarball))
    finally:
        os.umask(old)
    root = rootfs(platform, "filesonly")
    for folder in ("usr", "usr/bin", "etc", "opt"):
        assert stat.S_IMODE((root / folder).stat().st_mode) == 0o755, folder
    assert stat.S_IMODE((root / "opt" / "private").stat().st_mode) == 0o750  # as the archive said


def _member(tar: tarfile.TarFile, name: str, data: bytes = b"pwned\n", link: str | None = None) -> None:
    info = tarfile.TarInfo(name)
    if link is not None:
        info.type, info.linkname = tarfile.SYMTYPE, link
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("attack", ["dotdot", "deep-dotdot", "absolute", "through-symlink"])
def test_a_tarball_cannot_write_outside_its_image(platform: Platform, tmp_path: Path, attack: str) -> None:
    """Pins: '../x', absolute and through-a-symlink members never land outside the image's rootfs:
    the import is refused (422 invalid_image_source, nothing left behind) or the member stays inside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    tarball = tmp_path / "evil.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        _member(tar, "etc/ok", b"fine\n")
        if attack == "dotdot":
            _member(tar, "../escape")
        elif attack == "deep-dotdot":
            _member(tar, "etc/../../../escape")
        elif attack == "absolute":
            _member(tar, str(outside / "escape"))
        else:
            _member(tar, "out", link=str(outside))
            _member(tar, "out/escape")
    folder = platform.sandbox_root / "images" / "evil"
    try:
        images.register(platform, "evil", str(tarball))
    except DanluError as exc:
        assert exc.code == "invalid_image_source"
        assert not folder.exists() and [i.name for i in images.list_images(platform)] == ["host"]
    else:
        assert (folder / "rootfs" / "etc" / "ok").read_text() == "fine\n"
    escaped = [q for base in (tmp_path, platform.sandbox_root) for q in base.rglob("escape")]
    assert all(folder / "rootfs" in q.parents for q in escaped), escaped
    assert not (outside / "escape").exists() and list(outside.iterdir()) == []


def test_bad_registrations_change_nothing(platform: Platform, tmp_path: Path) -> None:
    """Pins: duplicate names are 409 image_exists (the first image intact); bad names 422
    invalid_image_name; relative, missing, NUL-bearing, non-tar and truncated sources 422
    invalid_image_source; no image is listed and no folder is left for any failed import."""
    src = make_tree(tmp_path / "tree")
    images.register(platform, "base", str(src))
    size = _size(platform, "base")
    assert code_of(lambda: images.register(platform, "base", str(src))) == "image_exists"
    assert code_of(lambda: images.register(platform, "host", str(src))) == "image_exists"
    assert (rootfs(platform, "base") / "etc" / "motd").exists() and _size(platform, "base") == size
    for bad in ["", "Ubuntu", "-x", ".hidden", "a/b", "..", "a b", "x" * 65, "é"]:
        assert code_of(lambda bad=bad: images.register(platform, bad, str(src))) == "invalid_image_name", bad
    (tmp_path / "notes.txt").write_text("this is not a tarball\n")
    good = tmp_path / "good.tar.gz"
    with tarfile.open(good, "w:gz") as tar:
        tar.add(src / "etc", arcname="etc")
        _member(tar, "big", os.urandom(200_000))
    (tmp_path / "cut.tar.gz").write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    (tmp_path / "empty.tar").write_bytes(b"")
    for source in ["tree", "./tree", "/no/such/folder", str(tmp_path / "a\x00b"), "notes.txt"] + [
        str(tmp_path / f) for f in ("notes.txt", "empty.tar")
    ]:
        assert code_of(lambda s=source: images.register(platform, "fresh", s)) == "invalid_image_source", source
        assert not (platform.sandbox_root / "images" / "fresh").exists(), source
    assert code_of(lambda: images.register(platform, "fresh", str(src), "d" * 501)) == "invalid_description"
    assert [i.name for i in images.list_images(platform)] == ["base", "host"]
    # A tarball cut short (a failed download) is the operator's input error too, not a crash:
    assert code_of(lambda: images.register(platform, "fresh", str(tmp_path / "cut.tar.gz"))) == "invalid_image_source"
    assert not (platform.sandbox_root / "images" / "fresh").exists()
    assert [i.name for i in images.list_images(platform)] == ["base", "host"]


def _size(p: Platform, name: str) -> int | None:
    return {i.name: i.size_bytes for i in images.list_images(p)}[name]


@pytest.fixture
def recorded(platform: Platform) -> Platform:
    platform.backend = RecordingBackend()
    billing.set_price(platform, "T4", "3.60")
    billing.set_price(platform, "A100-80GB", "36.00")
    return platform


def renter(p: Platform, name: str) -> User:
    with p.db.write() as s:
        user, _ = create_user(s, name, 0)
        s.expunge(user)
    billing.admin_topup(p, name, "100.00", f"seed-{name}")
    return user


def test_remove_rules(recorded: Platform, tmp_path: Path) -> None:
    """Pins: 'host' is 409 image_builtin; an image used by a non-destroyed instance or an unfinished
    job is 409 image_in_use (still listed, files kept); once unused it is removed with its folder."""
    p = recorded
    user = renter(p, "ren")
    images.register(p, "used", str(make_tree(tmp_path / "tree")))
    assert code_of(lambda: images.remove(p, "host")) == "image_builtin"
    assert code_of(lambda: images.remove(p, "nope")) == "image_not_found"
    inst = instances.rent(p, user, "T4", 1, ["sleep", "60"], image="used")
    assert inst.status == "running" and p.backend.launched[-1].image.path == rootfs(p, "used")
    assert code_of(lambda: images.remove(p, "used")) == "image_in_use"
    instances.stop(p, user, inst.id)
    assert code_of(lambda: images.remove(p, "used")) == "image_in_use"
    instances.destroy(p, user, inst.id)
    job = jobs.submit(p, user, ["true"], gpus=1, image="used")
    assert code_of(lambda: images.remove(p, "used")) == "image_in_use"
    assert (rootfs(p, "used") / "etc" / "motd").exists() and "used" in [i.name for i in images.list_images(p)]
    jobs.cancel(p, user, job.id)
    images.remove(p, "used")
    assert [i.name for i in images.list_images(p)] == ["host"]
    assert not (p.sandbox_root / "images" / "used").exists()
    assert code_of(lambda: images.remove(p, "used")) == "image_not_found"


def test_renting_an_unknown_image_claims_nothing(recorded: Platform) -> None:
    """Pins: a rental or job with an unregistered image is 404 image_not_found before anything is
    claimed: no instance or job row, every GPU free, nothing launched, the balance untouched."""
    p = recorded
    user = renter(p, "una")
    for image in ["ubuntu", "x" * 300, "../host"]:
        assert code_of(lambda i=image: instances.rent(p, user, "T4", 2, ["true"], image=i)) == "image_not_found"
        assert code_of(lambda i=image: jobs.submit(p, user, ["true"], gpus=1, image=i)) == "image_not_found"
    with p.db.read() as s:
        assert s.scalar(select(func.count()).select_from(Instance)) == 0
        assert s.scalar(select(func.count()).select_from(Job)) == 0
        assert s.scalar(select(func.count()).select_from(Gpu).where(Gpu.allocation_id.is_not(None))) == 0
    assert p.backend.launched == []
    assert billing.balance(p, user).balance_minor == 100_00


def busybox_root(folder: Path) -> Path:
    """A root filesystem of static busybox alone, in ``folder`` (skips where there is none)."""
    require_sandbox()
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("no static busybox to build a root filesystem from")
    (folder / "bin").mkdir(parents=True)
    shutil.copy(busybox, folder / "bin" / "busybox")
    return folder


def test_images_over_http_and_a_rental_runs_in_its_image(live: LiveServer, tmp_path: Path) -> None:
    """Pins: register/list/remove over HTTP with stable codes (admin only); a rental with the image
    sees the image's files as its root, and the image cannot be removed while the rental exists."""
    src = busybox_root(tmp_path / "mini")
    (src / "etc").mkdir()
    for tool in ("sh", "cat", "ls"):
        os.symlink("busybox", src / "bin" / tool)
    (src / "etc" / "danlu-marker").write_text("inside the mini image\n")
    body = {"name": "mini", "source": str(src), "description": "busybox only"}
    with live.new_user("ida") as c, live.admin() as a:
        assert c.post("/admin/images", json=body).json()["error"]["code"] == "admin_only"
        r = a.post("/admin/images", json=body)
        assert r.status_code == 201, r.text
        assert (r.json()["name"], r.json()["kind"], r.json()["size_bytes"] > 0) == ("mini", "rootfs", True)
        assert [(i["name"], i["size_bytes"] is None) for i in c.get("/images").json()] == [
            ("host", True),
            ("mini", False),
        ]
        for bad, status, code in [
            (body, 409, "image_exists"),
            ({**body, "name": "Mini"}, 422, "invalid_image_name"),
            ({**body, "name": "m2", "source": "mini"}, 422, "invalid_image_source"),
        ]:
            r = a.post("/admin/images", json=bad)
            assert (r.status_code, r.json()["error"]["code"]) == (status, code)
        r = c.post("/instances", json={"gpu_model": "T4", "command": ["true"], "image": "nope"})
        assert (r.status_code, r.json()["error"]["code"]) == (404, "image_not_found")
        assert c.get("/instances").json() == []
        cmd = ["sh", "-c", "cat /etc/danlu-marker; ls /bin; sleep 60"]
        r = c.post("/instances", json={"gpu_model": "T4", "command": cmd, "image": "mini"})
        assert r.status_code == 201 and r.json()["image"] == "mini", r.text
        iid = r.json()["id"]

        def log() -> str:
            return str(c.get(f"/instances/{iid}/logs").json()["text"])

        wait_for(lambda: "inside the mini image" in log() or c.get(f"/instances/{iid}").json()["status"] != "running")
        assert "inside the mini image" in log() and "busybox" in log(), (c.get(f"/instances/{iid}").json(), log())
        r = a.delete("/admin/images/mini")
        assert (r.status_code, r.json()["error"]["code"]) == (409, "image_in_use")
        r = a.delete("/admin/images/host")
        assert (r.status_code, r.json()["error"]["code"]) == (409, "image_builtin")
        assert c.delete(f"/instances/{iid}").status_code == 204
        assert c.delete("/admin/images/mini").status_code == 403
        assert a.delete("/admin/images/mini").status_code == 204
        assert [i["name"] for i in c.get("/images").json()] == ["host"]


@pytest.mark.parametrize("target", ["admin-token", "/abs"])
def test_a_hard_link_to_a_host_file_is_refused_and_the_file_untouched(
    platform: Platform, tmp_path: Path, target: str
) -> None:
    """As root, tarfile would chown/chmod whatever a hard link points at: a crafted image could
    make the admin token world-readable (found in review). The import refuses such links."""
    token = platform.settings.data_dir / "admin-token"
    victim = str(token) if target == "/abs" else os.path.relpath(token, platform.sandbox_root / "images" / "evil")
    before = token.stat()
    tarball = tmp_path / "evil.tar"
    with tarfile.open(tarball, "w") as tar:
        folder = tarfile.TarInfo("etc")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        info = tarfile.TarInfo("etc/stolen-token")
        info.type, info.linkname, info.uid, info.mode = tarfile.LNKTYPE, victim, 2_000_001, 0o644
        tar.addfile(info)
    assert code_of(lambda: images.register(platform, "evil", str(tarball))) == "invalid_image_source"
    after = token.stat()
    assert (after.st_uid, after.st_mode, after.st_nlink) == (before.st_uid, before.st_mode, before.st_nlink)
    assert not (platform.sandbox_root / "images" / "evil").exists()


def test_a_hard_link_inside_the_image_is_kept(platform: Platform, tmp_path: Path) -> None:
    tarball = tmp_path / "links.tar"
    with tarfile.open(tarball, "w") as tar:
        _member(tar, "bin/busybox", b"binary")
        info = tarfile.TarInfo("bin/sh")
        info.type, info.linkname = tarfile.LNKTYPE, "bin/busybox"
        tar.addfile(info)
    images.register(platform, "links", str(tarball))
    root = platform.sandbox_root / "images" / "links" / "rootfs"
    assert (root / "bin" / "sh").stat().st_ino == (root / "bin" / "busybox").stat().st_ino
    assert (root / "bin" / "sh").stat().st_uid == 0


def test_a_folder_others_can_change_is_refused(platform: Platform, tmp_path: Path) -> None:
    """Copying a folder a renter could write to would let them swap a symlink in mid-copy."""
    src = make_tree(tmp_path / "src")
    inner = src / "bin"
    os.chown(inner, 2_000_009, 2_000_009)
    assert code_of(lambda: images.register(platform, "theirs", str(src))) == "invalid_image_source"
    os.chown(inner, 0, 0)
    os.chmod(inner, 0o777)
    assert code_of(lambda: images.register(platform, "theirs", str(src))) == "invalid_image_source"


def test_names_ending_in_a_newline_and_overlong_paths_are_refused_by_the_services(platform: Platform) -> None:
    """The API refuses them first; the services must too (re.match with $ took a final newline)."""
    from danlu.compute.envvars import validate_env
    from danlu.core.errors import InvalidInput

    with pytest.raises(InvalidInput) as exc:
        images.register(platform, "base\n", "/", "")
    assert exc.value.code == "invalid_image_name"
    with pytest.raises(InvalidInput) as exc:
        images.register(platform, "base", "/" + "x" * 300 + "/rootfs", "")
    assert exc.value.code == "invalid_image_source"
    with pytest.raises(InvalidInput) as exc:
        validate_env({"FOO\n": "1"})
    assert exc.value.code == "invalid_env"


def test_rent_exits_non_zero_when_the_rental_failed_to_start(live: LiveServer, tmp_path: Path) -> None:
    """Issue 28, finding 8: `danlu rent` printed "failed" and exited 0 (the API answers 201 with
    status failed: the instance exists, unbilled, to start again or remove). A script must know."""
    src = busybox_root(tmp_path / "gone")
    with live.new_user("fay") as c, live.admin() as a:
        assert a.post("/admin/images", json={"name": "gone", "source": str(src)}).status_code == 201
        shutil.rmtree(live.platform.sandbox_root / "images" / "gone")  # lost from the disk: no launch can bind it
        env = {**os.environ, "DANLU_URL": live.url, "DANLU_TOKEN": str(c.headers["Authorization"]).split()[1]}
        argv = [sys.executable, "-m", "danlu.cli.main", "rent", "--gpu", "T4", "--image", "gone"]
        r = subprocess.run([*argv, "--", "true"], capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert " failed on " in r.stdout and "failed: could not start" in r.stderr, (r.stdout, r.stderr)
        r = subprocess.run([*argv, "--json", "--", "true"], capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 1 and json.loads(r.stdout)["status"] == "failed", (r.stdout, r.stderr)
        assert {i["status"] for i in c.get("/instances").json()} == {"failed"}
        assert all(i["cost"] in ("0", "0.00") for i in c.get("/instances").json())
        first = c.get("/instances").json()[0]["id"]
        r = subprocess.run(
            [sys.executable, "-m", "danlu.cli.main", "start", first],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert r.returncode == 1 and f"{first} failed: could not start" in r.stderr, (r.stdout, r.stderr)
