"""Images: the root filesystems renters choose from (``danlu images``, ``danlu rent --image NAME``).

``host`` is built in: this host's own ``/usr``, ``/etc``, ``/bin`` … read-only. The operator
registers more from a folder (e.g. a debootstrap tree) or a tarball (e.g. ``docker export`` output);
the platform copies it under ``SANDBOX_DIR/images/NAME/rootfs``, owned by root, and every sandbox
binds it read-only, so nothing a renter does changes it. The import trusts nothing in the source
(danlu.compute.image_import); bubblewrap mounts binds ``nosuid``/``nodev`` anyway.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from danlu.backend import ImageRoot
from danlu.compute import image_build
from danlu.compute.image_import import check_no_outside_links, copy_folder, extract_tarball, tree_size
from danlu.compute.lifecycle import Status
from danlu.context import Platform
from danlu.core.errors import Conflict, InvalidInput, NotFound
from danlu.db.models import Image, Instance, Job

HOST_IMAGE = "host"
HOST_DESCRIPTION = "this host's own /usr, /etc, /bin … read-only (whatever the operator installed)"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


@dataclass
class ImageView:
    name: str
    kind: str
    description: str
    size_bytes: int | None  # None for the host image (shared with the host)
    created_at_ms: int
    contents: dict[str, object] | None = None  # what an image built here holds (image_build.contents)


def _view(img: Image) -> ImageView:
    size = None if img.kind == "host" else img.size_bytes
    held = None if img.kind == "host" else image_build.contents(Path(img.root_path))
    return ImageView(img.name, img.kind, img.description, size, img.created_at_ms, held)


def ensure_host_image(session: Session, now_ms: int) -> None:
    if session.get(Image, HOST_IMAGE) is None:
        session.add(
            Image(
                name=HOST_IMAGE,
                kind="host",
                description=HOST_DESCRIPTION,
                root_path="/",
                size_bytes=0,
                created_at_ms=now_ms,
            )
        )
        session.flush()


def list_images(p: Platform) -> list[ImageView]:
    with p.db.read() as s:
        return [_view(i) for i in s.scalars(select(Image).order_by(Image.name))]


def resolve(session: Session, name: str) -> ImageRoot:
    """The image a run will see; a clear error for a name that is not registered."""
    img = session.get(Image, name) if isinstance(name, str) and len(name) <= 64 else None
    if img is None:
        raise NotFound("image_not_found", f"no image {name!r}; list them with `danlu images`")
    if img.kind == "host":
        return ImageRoot(img.name, "host")
    return ImageRoot(img.name, "rootfs", Path(img.root_path))


def register(p: Platform, name: str, source: str, description: str = "") -> ImageView:
    """Import a root filesystem from a folder or a tarball on the server's host."""
    if not NAME_RE.fullmatch(name or ""):  # match() would take a final newline
        raise InvalidInput("invalid_image_name", "image names are 1-64 characters: a-z, 0-9, '.', '_', '-'")
    if len(description) > 500:
        raise InvalidInput("invalid_description", "an image description is at most 500 characters")
    src = Path(source)
    try:
        usable = "\x00" not in source and src.is_absolute() and src.exists()
    except OSError:  # e.g. a path component longer than the file system allows
        usable = False
    if not usable:
        raise InvalidInput("invalid_image_source", f"{source!r} is not an absolute path to a folder or tarball here")
    with p.db.read() as s:
        if s.get(Image, name) is not None:
            raise Conflict("image_exists", f"an image named {name!r} exists; remove it first or pick another name")
    folder = p.sandbox_root / "images" / name
    root = folder / "rootfs"
    shutil.rmtree(folder, ignore_errors=True)
    (p.sandbox_root / "images").mkdir(parents=True, exist_ok=True, mode=0o711)
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    try:
        if src.is_dir():
            copy_folder(src, root)
        else:
            root.mkdir(mode=0o755)
            extract_tarball(src, root)
        os.chmod(root, 0o755)
        check_no_outside_links(root)
        size = tree_size(root)
        with p.db.write() as s:
            img = Image(
                name=name,
                kind="rootfs",
                description=description,
                root_path=str(root),
                size_bytes=size,
                created_at_ms=p.clock.now_ms(),
            )
            s.add(img)
            s.flush()
            return _view(img)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def remove(p: Platform, name: str) -> None:
    with p.db.write() as s:
        img = s.get(Image, name) if len(name) <= 64 else None
        if img is None:
            raise NotFound("image_not_found", f"no image {name!r}; list them with `danlu images`")
        if img.kind == "host":
            raise Conflict("image_builtin", "the host image is built in and cannot be removed")
        users = (
            s.scalars(
                select(Instance.id).where(Instance.image == name, Instance.status != Status.DESTROYED.value).limit(1)
            ).first()
            or s.scalars(select(Job.id).where(Job.image == name, Job.end_ms.is_(None)).limit(1)).first()
        )
        if users is not None:
            raise Conflict("image_in_use", f"image {name!r} is used by {users}; remove that first")
        root = Path(img.root_path)
        s.delete(img)
    shutil.rmtree(root.parent, ignore_errors=True)
