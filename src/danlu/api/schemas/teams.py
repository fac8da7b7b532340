"""Teams and their members (issue 9)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from pydantic import BaseModel, Field

from danlu.accounts.service import NAME_RE as USER_NAME_RE
from danlu.api.schemas.common import MAX_QUOTA, Strict, TeamName, UserName, limited

# --- teams and vouchers (issue 9) ---------------------------------------------------------------

ROLE_CHOICES = "owner|admin|member|viewer"
TeamNamePath = Annotated[str, Path(pattern=USER_NAME_RE.pattern, description="A team name")]
TeamQuery = Annotated[
    str | None,
    Query(pattern=USER_NAME_RE.pattern, description="A team you are in (default: your personal account)"),
]
Role = Annotated[
    str,
    Field(pattern=f"^({ROLE_CHOICES})$", description="owner, admin, member or viewer"),
    limited("invalid_role", "a role is one of owner, admin, member, viewer", pattern=f"^({ROLE_CHOICES})$"),
]
MemberQuota = Annotated[
    int,
    Field(ge=0, le=MAX_QUOTA),
    limited(
        "invalid_quota",
        f"a GPU quota is a whole number of GPUs, 0 to {MAX_QUOTA} (or null for none)",
        lo=0,
        hi=MAX_QUOTA,
    ),
]


class TeamIn(Strict):
    name: TeamName


class MemberIn(Strict):
    user: UserName
    role: Role
    gpu_quota: MemberQuota | None = Field(None, description="GPUs this member may hold on the team (null: no cap)")


class MemberPatch(Strict):
    """Only the fields given change; ``"gpu_quota": null`` removes the member's cap."""

    role: Role | None = None
    gpu_quota: MemberQuota | None = None


class MemberOut(BaseModel):
    user: str
    role: str
    gpu_quota: int | None


class TeamOut(BaseModel):
    name: str
    role: str = Field(description="Your role on the team")
    members: list[MemberOut]


class MemberRemovedOut(BaseModel):
    team: TeamOut
    running_instances: list[str] = Field(description="The member's instances still running on the team's account")


class DefaultTeamIn(Strict):
    team: TeamName | None = Field(description="Rent on this team by default; null: your personal account")


class DefaultTeamOut(BaseModel):
    team: str | None


class AdminTeamOut(BaseModel):
    name: str
    members: int
    balance: str
    credit_limit: str
    currency: str
