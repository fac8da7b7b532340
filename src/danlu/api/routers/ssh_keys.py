"""A person's SSH public keys for the gateway (``danlu key add|list|rm``; docs/access.md "SSH")."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, Field

from danlu.access import keys
from danlu.api.deps import CurrentUser, PlatformDep
from danlu.api.schemas.common import errors
from danlu.core.clock import iso

router = APIRouter(prefix="/ssh-keys", tags=["ssh"], responses=errors(401))
KeyIdPath = Annotated[int, Path(ge=1, le=2**31 - 1, description="the key's id (`danlu key list`)")]


class KeyIn(BaseModel):
    public_key: str = Field(
        ...,
        max_length=16 * 1024,
        description="one public key line (the .pub file): TYPE BASE64 [COMMENT]; a real key of that type",
    )
    name: str | None = Field(None, max_length=64, description="a name for it (default: the key's comment)")


class KeyOut(BaseModel):
    id: int
    name: str
    fingerprint: str  # SHA256:…, as `ssh-keygen -lf FILE` prints it
    created_at: str | None

    @classmethod
    def of(cls, v: keys.KeyView) -> KeyOut:
        return cls(id=v.id, name=v.name, fingerprint=v.fingerprint, created_at=iso(v.created_at_ms))


@router.post("", response_model=KeyOut, status_code=201, responses=errors(400, 409, 422))
def add_key(body: KeyIn, p: PlatformDep, user: CurrentUser) -> KeyOut:
    """Register a public key: ``ssh -p PORT INSTANCE@HOST`` with it reaches your instances (and your
    team's, where your role may manage them). A key is one person's: ``key_in_use`` if registered."""
    return KeyOut.of(keys.add(p, user, body.public_key, body.name))


@router.get("", response_model=list[KeyOut])
def list_keys(p: PlatformDep, user: CurrentUser) -> list[KeyOut]:
    return [KeyOut.of(v) for v in keys.list_keys(p, user)]


@router.delete("/{key_id}", status_code=204, responses=errors(404))
def remove_key(key_id: KeyIdPath, p: PlatformDep, user: CurrentUser) -> Response:
    """The key stops working at once for new connections, and open ones end within 15 s."""
    keys.remove(p, user, key_id)
    return Response(status_code=204)
