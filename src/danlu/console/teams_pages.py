"""Teams: the teams you are on, their balance, members and roles; create a team, add, change and
remove members, and choose the account you rent on by default (``danlu team ...``).

Every form calls the function the API's route calls (``danlu.api.routers.teams``) through the API's
own request models, so who may do what (owners and admins manage members; only an owner makes an
owner) and every error is the API's: a refusal comes back as an error notice and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Form, Path
from fastapi.responses import Response

from danlu.accounts import policies
from danlu.accounts import teams as teams_svc
from danlu.api.routers import teams as teams_api
from danlu.api.schemas.accounts import BalanceOut
from danlu.api.schemas.teams import DefaultTeamIn, MemberIn, MemberPatch, TeamIn, TeamOut
from danlu.billing import service as billing
from danlu.console.web import ConsoleRoute, Ctx, Page, Post, back, validated, with_flash
from danlu.core.errors import InvalidInput

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
# No limits here: a missing or overlong field would be refused before the handler runs (a 500 page
# under ConsoleRoute); the API's own models and services check every value and answer its errors.
NamePath = Annotated[str, Path()]
NameForm = Annotated[str, Form()]


@dataclass(frozen=True)
class TeamPage:
    """One team as the page shows it: the API's team, its balance (any member may see it), what
    removing each member would leave running, and which roles the viewer may give."""

    team: TeamOut
    balance: BalanceOut
    running: dict[str, list[teams_svc.RunningView]]
    manages: bool
    roles: tuple[str, ...]

    def may_remove(self, me: str, user: str, role: str) -> bool:
        """Managers remove others (an owner only by an owner); anyone may leave (the service keeps
        the last owner)."""
        if user == me:
            return True
        return self.manages and (role != "owner" or self.team.role == "owner")


@router.get("/teams")
def teams(ctx: Page) -> Response:
    p, me = ctx.platform, ctx.me
    pages = []
    for t in teams_api.list_teams(p, me):
        manages = t.role in policies.MANAGERS
        pages.append(
            TeamPage(
                team=t,
                balance=BalanceOut(**billing.balance(p, me, t.name).as_dict()),
                running=teams_svc.running_by_member(p, me, t.name),
                manages=manages,
                roles=policies.ROLES if t.role == "owner" else tuple(r for r in policies.ROLES if r != "owner"),
            )
        )
    return ctx.render("teams.html", teams=pages, default_team=teams_svc.default_team(p, me))


@router.post("/teams")
def create_team(ctx: Post, name: NameForm = "") -> Response:
    out = teams_api.create(validated(TeamIn, name=name.strip()), ctx.platform, ctx.me)
    message = ctx._("Team created; you are its owner:") + f" {out.name}"
    return with_flash(back("/teams"), "ok", message)


@router.post("/teams/default")
def default_team(ctx: Post, team: NameForm = "") -> Response:
    """``team`` empty: the personal account."""
    body = validated(DefaultTeamIn, team=team.strip() or None)
    out = teams_api.default_team(body, ctx.platform, ctx.me)
    if out.team is None:
        return with_flash(back("/teams"), "ok", ctx._("You now rent on your personal account by default."))
    return with_flash(back("/teams"), "ok", ctx._("You now rent on this team by default:") + f" {out.team}")


@router.post("/teams/{name}/members")
def add_member(
    ctx: Post, name: NamePath, user: NameForm = "", role: NameForm = "", gpu_quota: NameForm = ""
) -> Response:
    body = validated(MemberIn, user=user.strip(), role=role, gpu_quota=_quota(ctx, gpu_quota))
    teams_api.add_member(name, body, ctx.platform, ctx.me)
    return with_flash(back("/teams"), "ok", ctx._("Member added:") + f" {body.user} ({ctx._(body.role)}, {name})")


@router.post("/teams/{name}/members/{user_name}/change")
def change_member(
    ctx: Post, name: NamePath, user_name: NamePath, role: NameForm = "", gpu_quota: NameForm = ""
) -> Response:
    """The role and the GPU quota as the form shows them; only what differs from now is sent (an
    admin may change a member's quota without touching anyone's ownership). An empty quota: no cap."""
    current = next((m for m in teams_api.show(name, ctx.platform, ctx.me).members if m.user == user_name), None)
    quota = _quota(ctx, gpu_quota)
    fields: dict[str, object] = {}
    if current is None or role != current.role:
        fields["role"] = role
    if current is None or quota != current.gpu_quota:
        fields["gpu_quota"] = quota
    if not fields:
        return with_flash(back("/teams"), "ok", ctx._("Nothing to change."))
    teams_api.set_member(name, user_name, validated(MemberPatch, **fields), ctx.platform, ctx.me)
    return with_flash(back("/teams"), "ok", ctx._("Member changed:") + f" {user_name} ({name})")


@router.post("/teams/{name}/members/{user_name}/remove")
def remove_member(ctx: Post, name: NamePath, user_name: NamePath) -> Response:
    out = teams_api.remove_member(name, user_name, ctx.platform, ctx.me)
    message = ctx._("Removed from the team:") + f" {user_name} ({name})."
    if out.running_instances:
        message += (
            " "
            + ctx._("Still running on the team's account until an owner or admin stops them:")
            + " "
            + ", ".join(out.running_instances)
        )
    return with_flash(back("/teams"), "ok", message)


def _quota(ctx: Ctx, text: str) -> int | None:
    """A GPU quota field: empty is no cap, else a whole number (the API's model checks its range)."""
    text = text.strip()
    if not text:
        return None
    if not (text.isascii() and text.isdigit()):
        raise InvalidInput("invalid_quota", ctx._("A GPU quota is a whole number of GPUs, or empty for no cap."))
    return int(text)
