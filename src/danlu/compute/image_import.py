"""Importing an image's root filesystem safely, as root, from a source nobody vouched for.

A tarball (``docker export`` output, say) may be crafted. The stdlib's ``tar`` filter refuses
members outside the destination, but it trusts hard links and, before the 2025 tarfile fixes,
``realpath`` past PATH_MAX; as root, tarfile would then chown and chmod whatever a hard link points
at (the admin token, /etc/shadow). So :func:`extract_tarball` keeps its own map of what it has
created in the (fresh, empty) destination and accepts a member only if

* its path is relative, has no ``..``, and every parent of it is a directory *this* import made or
  will make (never a symlink: nothing is ever written through a link);
* a hard link points at a regular file this import made (and that is still one);
* it is a directory, a regular file, a symlink (any target: it is resolved inside the sandbox)
  or such a hard link — device nodes and FIFOs are dropped.

Every member is owned by root, setuid/setgid bits and group/other write are cleared. Afterwards
:func:`check_no_outside_links` proves no file in the image shares its inode with one outside.
A folder is copied only if every directory in it and above it is root's and writable by root
alone, so nobody can swap a symlink in while it is copied.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import tarfile
from pathlib import Path

from danlu.core.errors import InvalidInput


def _refuse(message: str) -> InvalidInput:
    return InvalidInput("invalid_image_source", message)


class _Guard:
    def __init__(self) -> None:
        self.kinds: dict[str, str] = {"": "dir"}
        self.named: set[str] = set()  # folders the archive itself lists (their mode is the archive's)

    def __call__(self, member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
        if member.ischr() or member.isblk() or member.isfifo():
            return None
        name = posixpath.normpath(member.name.lstrip("/"))
        if name in ("", "."):
            return None  # the root itself
        if name.startswith("../") or name == ".." or "\x00" in name:
            raise _refuse(f"member {member.name!r} points outside the image")
        parent = posixpath.dirname(name)
        parts = parent.split("/") if parent else []
        for i in range(len(parts)):
            prefix = "/".join(parts[: i + 1])
            # A parent the archive never named is made as a folder; one it made anything else is refused.
            if self.kinds.setdefault(prefix, "dir") != "dir":
                raise _refuse(f"member {member.name!r} lies under {prefix!r}, which is not a folder of the image")
        kind = "dir" if member.isdir() else "sym" if member.issym() else "file" if member.isreg() else "link"
        if kind == "link":
            target = posixpath.normpath(member.linkname.lstrip("/"))
            if self.kinds.get(target) != "file":
                raise _refuse(f"hard link {member.name!r} must point at a file of the image, not {member.linkname!r}")
        elif not (member.isdir() or member.issym() or member.isreg()):
            return None  # anything else (contiguous files, GNU sparse headers …) is dropped
        previous = self.kinds.get(name)
        if previous is not None and previous != ("file" if kind == "link" else kind):
            raise _refuse(f"member {member.name!r} appears twice as different kinds of file")
        safe = tarfile.tar_filter(member, dest)  # no absolute/outside paths; high and write bits
        if safe is None:
            return None
        self.kinds[name] = "file" if kind == "link" else kind
        if kind == "dir":
            self.named.add(name)
        # A hard link's target: relative to the image, never an absolute host path.
        link = posixpath.normpath(member.linkname.lstrip("/")) if kind == "link" else safe.linkname
        return safe.replace(uid=0, gid=0, uname="root", gname="root", name=name, linkname=link, deep=False)


def extract_tarball(src: Path, root: Path) -> None:
    """Unpack ``src`` into the empty folder ``root`` (see the module docstring)."""
    guard = _Guard()
    try:
        with tarfile.open(src) as tar:
            tar.extractall(root, filter=guard)
    except tarfile.TarError as exc:
        raise _refuse(f"{src} is not a readable tarball: {exc}") from None
    except (EOFError, OSError) as exc:  # a cut-off .tar.gz raises EOFError
        raise _refuse(f"{src} could not be unpacked: {exc}") from None
    # Folders no member named were made with the server's umask (0700: the renter's uid could not
    # enter them); they get the mode a folder has by default, 0755.
    for name, kind in guard.kinds.items():
        if kind == "dir" and name and name not in guard.named and stat.S_ISDIR(os.lstat(root / name).st_mode):
            os.chmod(root / name, 0o755)


def check_source_folder(src: Path) -> None:
    """Refuse a folder that anyone but root could change while it is being copied."""
    for folder in [src, *src.parents]:
        st = folder.lstat()
        sticky = folder != src and st.st_mode & stat.S_ISVTX  # like /tmp: others cannot replace root's entries
        if st.st_uid != 0 or (st.st_mode & 0o022 and not sticky):
            raise _refuse(f"{folder} must be owned by root and writable by root alone to import from it")
    for dirpath, dirs, _files in os.walk(src, followlinks=False):
        for d in dirs:
            st = os.lstat(os.path.join(dirpath, d))
            if stat.S_ISDIR(st.st_mode) and (st.st_uid != 0 or st.st_mode & 0o022):
                raise _refuse(f"{dirpath}/{d} must be owned by root and writable by root alone to import it")


def copy_folder(src: Path, dest: Path) -> None:
    """Copy a checked folder: directories, regular files and symlinks; root-owned, no setuid bits."""
    check_source_folder(src)

    def ignore(folder: str, names: list[str]) -> list[str]:
        mode = {n: os.lstat(os.path.join(folder, n)).st_mode for n in names}
        return [n for n, m in mode.items() if not (stat.S_ISDIR(m) or stat.S_ISREG(m) or stat.S_ISLNK(m))]

    shutil.copytree(src, dest, symlinks=True, ignore=ignore)
    for dirpath, dirs, files in os.walk(dest, followlinks=False):
        for n in dirs + files:
            path = os.path.join(dirpath, n)
            os.lchown(path, 0, 0)
            mode = os.lstat(path).st_mode
            if not stat.S_ISLNK(mode):
                os.chmod(path, stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID | 0o022))


def check_no_outside_links(root: Path) -> None:
    """Every multiply-linked file in the image has all its links inside it."""
    seen: dict[tuple[int, int], int] = {}
    nlink: dict[tuple[int, int], int] = {}
    for dirpath, _dirs, files in os.walk(root, followlinks=False):
        for n in files:
            st = os.lstat(os.path.join(dirpath, n))
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                key = (st.st_dev, st.st_ino)
                seen[key] = seen.get(key, 0) + 1
                nlink[key] = st.st_nlink
    outside = [k for k, count in seen.items() if count < nlink[k]]
    if outside:
        raise _refuse(f"{len(outside)} file(s) of the image are hard links to files outside it")


def tree_size(root: Path) -> int:
    return sum(os.lstat(os.path.join(r, n)).st_size for r, ds, fs in os.walk(root) for n in ds + fs)
