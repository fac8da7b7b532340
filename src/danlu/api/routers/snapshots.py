"""Snapshots of stopped workspaces (issue 26, item 4; danlu.compute.snapshots, docs/access.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, Field

from danlu.api.deps import CurrentUser, PlatformDep
from danlu.api.paging import ListRoute, paged
from danlu.api.schemas.common import NO_CONTROL, InstanceIdPath, errors, limited
from danlu.compute import snapshots
from danlu.core.clock import iso

router = APIRouter(route_class=ListRoute, tags=["snapshots"], responses=errors(401))
SNAPSHOT_ID = r"^s-[0-9a-f]{1,30}$"
SnapshotIdPath = Annotated[str, Path(pattern=SNAPSHOT_ID, max_length=32, description="A snapshot id: s- and hex")]


class SnapshotIn(BaseModel):
    name: Annotated[
        str,
        Field(max_length=64, pattern=NO_CONTROL),
        limited("invalid_name", "snapshot names are at most 64 characters, without control characters", text=64),
    ] = ""


class SnapshotOut(BaseModel):
    id: str
    name: str
    instance_id: str = Field(description="the instance it was taken of (it may be removed since)")
    size_bytes: int = Field(description="the workspace's files, as a restore gives them back")
    added_bytes: int = Field(description="new data it stored; the rest was already in your earlier snapshots")
    created_at: str | None
    cost_per_day: str = Field(
        "0", description="what keeping it costs a day (billed per second, per GB-month of size_bytes; 0: free)"
    )
    currency: str | None = Field(None, description="of cost_per_day; null where snapshots are free")

    @classmethod
    def of(cls, v: snapshots.SnapshotView) -> SnapshotOut:
        return cls(
            id=v.id,
            name=v.name,
            instance_id=v.instance_id,
            size_bytes=v.size_bytes,
            added_bytes=v.added_bytes,
            created_at=iso(v.created_at_ms),
            cost_per_day=v.per_day,
            currency=v.currency,
        )


@router.post(
    "/instances/{instance_id}/snapshots",
    response_model=SnapshotOut,
    status_code=201,
    responses=errors(400, 404, 409, 503),
)
def create(
    instance_id: InstanceIdPath, p: PlatformDep, user: CurrentUser, body: SnapshotIn | None = None
) -> SnapshotOut:
    """Snapshot a stopped instance's workspace (yours): deduplicated with your earlier snapshots and
    encrypted at rest with your account's key. ``rent`` with ``from_snapshot`` starts from it."""
    return SnapshotOut.of(snapshots.create(p, user, instance_id, (body or SnapshotIn()).name))


@router.get("/snapshots", response_model=list[SnapshotOut], **paged("created_at", "id"))
def list_snapshots(p: PlatformDep, user: CurrentUser) -> list[SnapshotOut]:
    """Your snapshots, oldest first."""
    return [SnapshotOut.of(v) for v in snapshots.list_snapshots(p, user)]


@router.delete("/snapshots/{snapshot_id}", status_code=204, responses=errors(404, 503))
def remove(snapshot_id: SnapshotIdPath, p: PlatformDep, user: CurrentUser) -> Response:
    """Remove a snapshot; what only it held is pruned from the repository."""
    snapshots.remove(p, user, snapshot_id)
    return Response(status_code=204)
