"""Walking and removing trees a renter built (workspaces, job folders): any depth, no recursion.

``os.fwalk``, ``os.walk`` and ``shutil.rmtree`` call themselves once per folder level on Python 3.11,
and the path-based ones fail past PATH_MAX, so a renter's folder nested a few thousand levels deep
made every walk of the platform raise: the disk limit was never measured (and so never enforced),
the end of the run was never recorded (the GPU stayed taken), and ``rm`` answered 500 after the
database had committed, leaving the workspace on disk with nobody paying for it.

Here a walk holds **one** open folder at a time: it goes down with ``openat(name, O_NOFOLLOW)`` and
back up with ``openat("..")``, and checks that the folder it came back to is the one it left (same
device and inode); a folder moved away meanwhile raises :class:`TreeChanged` rather than letting the
walk continue somewhere else. It never follows a symlink and stays on the top folder's file system.
The memory it needs is the names still to visit, not the depth of the stack.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable

log = logging.getLogger(__name__)
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class TreeChanged(OSError):
    """A folder being walked was moved to another parent during the walk."""


def _entries(fd: int, dev: int, visit: Callable[[str, os.stat_result], bool]) -> tuple[list[str], bool]:
    """Visit the folder's entries on ``dev``; returns its subfolders and whether to go on."""
    subdirs: list[str] = []
    for name in os.listdir(fd):
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue  # gone meanwhile
        if st.st_dev != dev:
            continue
        if not visit(name, st):
            return subdirs, False
        if stat.S_ISDIR(st.st_mode):
            subdirs.append(name)
    return subdirs, True


def _down(fd: int, name: str, dev: int) -> tuple[int, int] | None:
    """The subfolder ``name`` of the open folder ``fd`` (which is then closed) and its inode; None, with ``fd``
    still open, when it is gone, was replaced by a symlink, or is on another file system."""
    try:
        child = os.open(name, _DIR, dir_fd=fd)
    except OSError:
        return None
    st = os.fstat(child)
    if st.st_dev != dev:
        os.close(child)
        return None
    os.close(fd)
    return child, st.st_ino


def _up(fd: int, dev: int, ino: int) -> int:
    """The parent of the open folder ``fd`` (which is closed), if it is still the folder (dev, ino)."""
    parent = os.open("..", _DIR, dir_fd=fd)
    st = os.fstat(parent)
    if (st.st_dev, st.st_ino) != (dev, ino):
        os.close(parent)
        raise TreeChanged("a folder was moved while it was being walked")
    os.close(fd)
    return parent


def scan(top: str, visit: Callable[[str, os.stat_result], bool]) -> None:
    """Call ``visit(name, lstat)`` for every entry under ``top`` (not ``top`` itself), depth first, until
    it returns False. Nothing happens if ``top`` is missing or a symlink."""
    try:
        fd = os.open(top, _DIR)
    except OSError:
        return
    try:
        here = os.fstat(fd)
        dev = here.st_dev
        subs, go = _entries(fd, dev, visit)
        stack = [(here.st_ino, subs)]  # per level: the folder's inode and its subfolders still to visit
        while go and stack:
            _, pending = stack[-1]
            if pending:
                down = _down(fd, pending.pop(), dev)
                if down is None:
                    continue
                fd, ino = down
                subs, go = _entries(fd, dev, visit)
                stack.append((ino, subs))
            else:
                stack.pop()
                if stack:
                    fd = _up(fd, dev, stack[-1][0])
    finally:
        if fd >= 0:
            os.close(fd)


def remove_tree(path: str | os.PathLike[str]) -> bool:
    """``rm -rf path`` at any depth, without following links or leaving the file system. True when the
    path is gone; what could not be removed is logged (a mount point, a folder changed meanwhile)."""
    parent_path, name = os.path.split(os.path.abspath(path))
    try:
        pfd = os.open(parent_path, _DIR)
    except OSError:
        return not os.path.lexists(path)
    fd = -1
    try:
        try:
            st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
        except FileNotFoundError:
            return True
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(name, dir_fd=pfd)
            return True
        fd = os.open(name, _DIR, dir_fd=pfd)
        dev = os.fstat(fd).st_dev
        stack = [(os.fstat(fd).st_ino, name, _empty(fd, dev))]  # per level: inode, name, subfolders left
        while stack:
            _, entered, pending = stack[-1]
            if pending:
                sub = pending.pop()
                down = _down(fd, sub, dev)
                if down is not None:
                    fd, ino = down
                    stack.append((ino, sub, _empty(fd, dev)))
                continue
            stack.pop()
            if not stack:
                break
            fd = _up(fd, dev, stack[-1][0])
            try:
                os.rmdir(entered, dir_fd=fd)
            except OSError as exc:  # a mount point, or a file written meanwhile: the rest goes on
                log.warning("could not remove %s under %s: %s", entered, path, exc)
        os.close(fd)
        fd = -1
        os.rmdir(name, dir_fd=pfd)
        return True
    except OSError as exc:
        log.warning("could not remove all of %s: %s", path, exc)
        return False
    finally:
        if fd >= 0:
            os.close(fd)
        os.close(pfd)


def _empty(fd: int, dev: int) -> list[str]:
    """Unlink every entry of the folder that is not a folder; returns its subfolders."""

    def unlink(name: str, st: os.stat_result) -> bool:
        if not stat.S_ISDIR(st.st_mode):
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                pass
        return True

    return _entries(fd, dev, unlink)[0]
