"""Console passwords and named API tokens over the API (the CLI's `danlu password` and `danlu token`;
the console does the same from its pages). danlu.accounts.credentials holds the rules."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, Field

from danlu.accounts import credentials
from danlu.api.deps import AdminUser, CurrentUser, PlatformDep
from danlu.api.paging import ListRoute, paged
from danlu.api.schemas.common import Strict, UserNamePath, errors
from danlu.core.clock import iso
from danlu.core.errors import Unauthorized

router = APIRouter(route_class=ListRoute, tags=["account"], responses=errors(401))

Password = Annotated[
    str,
    Field(
        min_length=credentials.MIN_PASSWORD,
        max_length=credentials.MAX_PASSWORD,
        pattern=credentials.PASSWORD_RE.pattern,
    ),
]


class PasswordIn(Strict):
    new: Password = Field(description=f"{credentials.MIN_PASSWORD} to {credentials.MAX_PASSWORD} characters")
    current: Annotated[str, Field(max_length=credentials.MAX_PASSWORD)] | None = Field(
        None, description="your current password; not needed when you have none yet"
    )


class AdminPasswordIn(Strict):
    password: Password


class ApiTokenIn(Strict):
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=credentials.TOKEN_NAME_RE.pattern)]


class ApiTokenOut(BaseModel):
    id: int
    name: str
    hint: str = Field(description="the token's last 4 characters")
    created_at: str | None
    revoked_at: str | None
    token: str | None = Field(None, description="the token itself: in the answer that creates it, never again")

    @classmethod
    def of(cls, t: credentials.TokenInfo, token: str | None = None) -> ApiTokenOut:
        return cls(
            id=t.id, name=t.name, hint=t.hint, created_at=iso(t.created_at_ms), revoked_at=iso(t.revoked_at_ms),
            token=token,
        )  # fmt: skip


@router.put("/me/password", status_code=204, responses=errors(400))
def set_my_password(body: PasswordIn, p: PlatformDep, user: CurrentUser) -> Response:
    """Set your console password (the web console's sign-in). Changing one needs the current one;
    every browser signed in as you is signed out."""
    if user.password_hash is not None:
        if body.current is None:
            raise Unauthorized("bad_credentials", "give your current password as 'current' to change it")
        credentials.check_password(p, user.name, body.current)
    credentials.set_password(p, user.name, body.new)
    return Response(status_code=204)


@router.put("/admin/users/{name}/password", status_code=204, tags=["admin"], responses=errors(400, 403, 404))
def set_user_password(name: UserNamePath, body: AdminPasswordIn, p: PlatformDep, _admin: AdminUser) -> Response:
    """Set a user's console password (they sign in with it and may change it)."""
    credentials.set_password(p, name, body.password)
    return Response(status_code=204)


@router.get("/tokens", response_model=list[ApiTokenOut], **paged("id", descending=True))
def list_tokens(p: PlatformDep, user: CurrentUser) -> list[ApiTokenOut]:
    """Your named API tokens, newest first (the token itself is never shown again)."""
    return [ApiTokenOut.of(t) for t in credentials.list_api_tokens(p, user)]


@router.post("/tokens", response_model=ApiTokenOut, status_code=201, responses=errors(400, 409))
def create_token(body: ApiTokenIn, p: PlatformDep, user: CurrentUser) -> ApiTokenOut:
    """A new named token that works like your first one (shown once, in this answer)."""
    info, token = credentials.create_api_token(p, user, body.name)
    return ApiTokenOut.of(info, token)


@router.delete("/tokens/{token_id}", response_model=ApiTokenOut, responses=errors(404))
def revoke_token(token_id: Annotated[int, Path(ge=1, le=2**31 - 1)], p: PlatformDep, user: CurrentUser) -> ApiTokenOut:
    """Revoke one of your named tokens: it stops working at once."""
    return ApiTokenOut.of(credentials.revoke_api_token(p, user, token_id))
