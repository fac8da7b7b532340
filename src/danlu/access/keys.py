"""A person's SSH public keys, for the gateway (danlu.access.ssh): add, list, remove, and whose a
key is. A key's SHA-256 fingerprint is unique over everyone, so a key identifies one person."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from danlu.context import Platform
from danlu.core.errors import Conflict, InvalidInput, NotFound
from danlu.db.models import SshKey, User

MAX_KEY_CHARS = 16 * 1024
MAX_KEYS = 50  # per person


@dataclass(frozen=True)
class KeyView:
    id: int
    name: str
    fingerprint: str
    created_at_ms: int


def parse(text: str) -> tuple[str, str, str]:
    """(the key in OpenSSH form, its SHA-256 fingerprint, its comment) of one public key line."""
    import asyncssh  # here, not at the top: ~0.2 s of every server start, which a restart waits on

    if len(text) > MAX_KEY_CHARS or "PRIVATE KEY" in text:
        raise InvalidInput("invalid_key", "send a public key (the .pub file, one line), never a private key")
    try:
        key = asyncssh.import_public_key(text.strip())
    except (asyncssh.KeyImportError, ValueError, TypeError) as exc:
        raise InvalidInput("invalid_key", f"not an SSH public key ({exc}); send the .pub file ssh-keygen made") from exc
    comment = key.get_comment() or ""
    key.set_comment(None)
    return key.export_public_key("openssh").decode().strip(), key.get_fingerprint("sha256"), comment


def add(p: Platform, user: User, text: str, name: str | None = None) -> KeyView:
    public, fingerprint, comment = parse(text)
    label = (name or comment or "key").strip()[:64] or "key"
    with p.db.write() as s:
        count = s.execute(select(func.count(SshKey.id)).where(SshKey.user_id == user.id)).scalar_one()
        if count >= MAX_KEYS:
            raise Conflict("too_many_keys", f"you have {count} keys, the most one person may; remove one first")
        row = SshKey(user_id=user.id, name=label, fingerprint=fingerprint, public_key=public,
                     created_at_ms=p.clock.now_ms())  # fmt: skip
        s.add(row)
        try:
            s.flush()
        except IntegrityError as exc:
            message = "this key is registered already (each key is one person's): make a new one with ssh-keygen"
            raise Conflict("key_in_use", message) from exc
        return KeyView(row.id, row.name, row.fingerprint, row.created_at_ms)


def list_keys(p: Platform, user: User) -> list[KeyView]:
    with p.db.read() as s:
        rows = s.scalars(select(SshKey).where(SshKey.user_id == user.id).order_by(SshKey.id)).all()
        return [KeyView(r.id, r.name, r.fingerprint, r.created_at_ms) for r in rows]


def remove(p: Platform, user: User, key_id: int) -> None:
    with p.db.write() as s:
        row = s.get(SshKey, key_id)
        if row is None or row.user_id != user.id:
            raise NotFound("key_not_found", f"no SSH key {key_id} of yours; list them with `danlu key list`")
        s.delete(row)

