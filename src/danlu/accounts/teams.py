"""Teams: a shared billing account, members with roles, and who may see or spend what.

Roles, from most to least: owner (money and members), admin (members, any instance on the team),
member (rents on the team's account, manages their own instances), viewer (sees, never spends).
Outside a team its objects do not exist (404), as between users. Removing a member stops nothing:
each of their running instances on the team gets an event for the member and one for the team's
managers, and keeps running until an owner or admin stops it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from danlu.accounts.payers import create_billing_account, currency, personal_account
from danlu.accounts.policies import MANAGERS, ROLES, SPENDERS
from danlu.accounts.service import NAME_RE, get_user_by_name
from danlu.context import Platform
from danlu.core.errors import Conflict, Forbidden, InvalidInput, NotFound
from danlu.db.models import Account, BillingAccount, Event, Instance, Team, TeamMember, User

# An instance (or a job's run) in one of these still runs on its account: removing its renter from
# the team leaves it running there.
STILL_RUNNING = ("pending", "running", "stopping")


@dataclass(frozen=True)
class MemberView:
    user: str
    role: str
    gpu_quota: int | None


@dataclass(frozen=True)
class TeamView:
    name: str
    role: str  # the caller's
    members: list[MemberView]


def _team(session: Session, user: User, name: str) -> tuple[Team, TeamMember]:
    """The team and the caller's membership; a team the caller is not in answers 404."""
    row = session.execute(
        select(Team, TeamMember)
        .join(TeamMember, TeamMember.team_id == Team.id)
        .where(Team.name == name, TeamMember.user_id == user.id)
    ).first()
    if row is None:
        raise NotFound("team_not_found", f"no team {name!r}; list yours with `danlu team list`")
    return row[0], row[1]


def _require(member: TeamMember, roles: tuple[str, ...], what: str) -> None:
    if member.role not in roles:
        raise Forbidden("team_role_required", f"{what} needs the role {' or '.join(roles)}; you are {member.role}")


def _view(session: Session, team: Team, role: str) -> TeamView:
    rows = session.execute(
        select(User.name, TeamMember.role, TeamMember.gpu_quota)
        .join(User, User.id == TeamMember.user_id)
        .where(TeamMember.team_id == team.id)
        .order_by(TeamMember.id)
    ).all()
    return TeamView(team.name, role, [MemberView(n, r, q) for n, r, q in rows])


def validate_team_name(name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise InvalidInput(
            "invalid_team_name",
            "team names are 2-63 characters: lowercase letters, digits, '_', '.', '-', starting with a letter",
        )
    return name


def create_team(p: Platform, user: User, name: str) -> TeamView:
    validate_team_name(name)
    now = p.clock.now_ms()
    try:
        with p.db.write() as s:
            ba = create_billing_account(s, currency(s), kind="team", name=name, now_ms=now)
            team = Team(name=name, billing_account_id=ba.id, created_at_ms=now)
            s.add(team)
            s.flush()
            s.add(TeamMember(team_id=team.id, user_id=user.id, role="owner", gpu_quota=None, added_at_ms=now))
            s.flush()
            return _view(s, team, "owner")
    except IntegrityError:
        raise Conflict("team_exists", f"a team named {name!r} already exists; pick another name") from None


def list_teams(p: Platform, user: User) -> list[TeamView]:
    with p.db.read() as s:
        rows = s.execute(
            select(Team, TeamMember.role)
            .join(TeamMember, TeamMember.team_id == Team.id)
            .where(TeamMember.user_id == user.id)
            .order_by(Team.name)
        ).all()
        return [_view(s, t, r) for t, r in rows]


def show_team(p: Platform, user: User, name: str) -> TeamView:
    with p.db.read() as s:
        team, me = _team(s, user, name)
        return _view(s, team, me.role)


def _check_role(role: str) -> str:
    if role not in ROLES:
        raise InvalidInput("invalid_role", f"a role is one of {', '.join(ROLES)}")
    return role


def add_member(p: Platform, user: User, name: str, who: str, role: str, gpu_quota: int | None = None) -> TeamView:
    _check_role(role)
    with p.db.write() as s:
        team, me = _team(s, user, name)
        _require(me, MANAGERS, "adding members")
        if role == "owner" and me.role != "owner":
            raise Forbidden("team_role_required", "only an owner can add another owner")
        other = get_user_by_name(s, who)
        exists = s.scalars(
            select(TeamMember).where(TeamMember.team_id == team.id, TeamMember.user_id == other.id)
        ).first()
        if exists is not None:
            raise Conflict("already_member", f"{who} is already in {name} as {exists.role}; change it with `team role`")
        s.add(
            TeamMember(team_id=team.id, user_id=other.id, role=role, gpu_quota=gpu_quota, added_at_ms=p.clock.now_ms())
        )
        s.flush()
        return _view(s, team, me.role)


def set_member(
    p: Platform, user: User, name: str, who: str, *, role: str | None, gpu_quota: int | None, clear_quota: bool = False
) -> TeamView:
    with p.db.write() as s:
        team, me = _team(s, user, name)
        _require(me, MANAGERS, "changing members")
        target = _member(s, team, who)
        if role is not None:
            _check_role(role)
            if "owner" in (role, target.role) and me.role != "owner":
                raise Forbidden("team_role_required", "only an owner can make or unmake an owner")
            if target.role == "owner" and role != "owner":
                _keep_an_owner(s, team, target)
            target.role = role
        if gpu_quota is not None or clear_quota:
            target.gpu_quota = gpu_quota
        s.flush()
        return _view(s, team, me.role)


def _member(s: Session, team: Team, who: str) -> TeamMember:
    other = get_user_by_name(s, who)
    target = s.scalars(select(TeamMember).where(TeamMember.team_id == team.id, TeamMember.user_id == other.id)).first()
    if target is None:
        raise NotFound("member_not_found", f"{who} is not in team {team.name}")
    return target


def _keep_an_owner(s: Session, team: Team, leaving: TeamMember) -> None:
    owners = s.scalars(select(TeamMember).where(TeamMember.team_id == team.id, TeamMember.role == "owner")).all()
    if [o.id for o in owners] == [leaving.id]:
        raise Conflict("last_owner", f"{team.name} needs an owner; make someone else owner first")


def remove_member(p: Platform, user: User, name: str, who: str) -> tuple[TeamView, list[str]]:
    """Remove ``who``; returns the team and the ids of their instances still running on it (each
    gets a notice event; none is stopped — an owner or admin decides)."""
    now = p.clock.now_ms()
    with p.db.write() as s:
        team, me = _team(s, user, name)
        target = _member(s, team, who)
        if target.user_id != user.id:
            _require(me, MANAGERS, "removing members")
            if target.role == "owner" and me.role != "owner":
                raise Forbidden("team_role_required", "only an owner can remove an owner")
        if target.role == "owner":
            _keep_an_owner(s, team, target)
        running = list(
            s.scalars(
                select(Instance.id).where(
                    Instance.billing_account_id == team.billing_account_id,
                    Instance.user_id == target.user_id,
                    Instance.status.in_(STILL_RUNNING),
                )
            )
        )
        for inst_id in running:
            msg = (
                f"{who} left team {name}; instance {inst_id} still runs on the team's account until an owner or "
                f"admin stops it (`danlu stop {inst_id}`)"
            )
            s.add(
                Event(
                    user_id=target.user_id,
                    billing_account_id=None,
                    instance_id=inst_id,
                    kind="member_removed",
                    message=msg,
                    at_ms=now,
                )
            )
            s.add(
                Event(
                    user_id=None,
                    billing_account_id=team.billing_account_id,
                    instance_id=inst_id,
                    kind="member_removed",
                    message=msg,
                    at_ms=now,
                )
            )
        s.delete(target)
        member_user = s.get(User, target.user_id)
        if member_user is not None and member_user.default_team_id == team.id:
            member_user.default_team_id = None
        s.flush()
        return _view(s, team, me.role), running


@dataclass(frozen=True)
class RunningView:
    instance_id: str
    job_id: str | None  # a job's run (seen on the job's page), or None: an instance


def running_by_member(p: Platform, user: User, name: str) -> dict[str, list[RunningView]]:
    """What removing each member of ``name`` would leave running on the team's account (what
    remove_member returns): their instances and jobs' runs, by member name. Any member may look,
    as any member may see the team's instances."""
    with p.db.read() as s:
        team, _me = _team(s, user, name)
        rows = s.execute(
            select(User.name, Instance.id, Instance.job_id)
            .join(User, User.id == Instance.user_id)
            .join(TeamMember, (TeamMember.user_id == Instance.user_id) & (TeamMember.team_id == team.id))
            .where(Instance.billing_account_id == team.billing_account_id, Instance.status.in_(STILL_RUNNING))
            .order_by(Instance.created_at_ms, Instance.id)
        ).all()
    out: dict[str, list[RunningView]] = {}
    for who, inst_id, job_id in rows:
        out.setdefault(who, []).append(RunningView(inst_id, job_id))
    return out


def default_team(p: Platform, user: User) -> str | None:
    """The team the caller's rentals and jobs are paid from when they name none (as resolve_payer
    decides), or None: their personal account."""
    with p.db.read() as s:
        payer = resolve_payer(s, user, None, spend=True)
        return s.scalars(select(Team.name).where(Team.billing_account_id == payer)).first()


def set_default_team(p: Platform, user: User, name: str | None) -> str | None:
    with p.db.write() as s:
        fresh = s.get(User, user.id)
        assert fresh is not None
        if name is None:
            fresh.default_team_id = None
            return None
        team, me = _team(s, user, name)
        _require(me, SPENDERS, "renting on a team")
        fresh.default_team_id = team.id
        return team.name


def resolve_payer(session: Session, user: User, team: str | None, *, spend: bool) -> int:
    """The billing account a request acts on: ``team`` (the caller must be in it; to spend, as
    owner, admin or member), else the caller's default team, else their personal account."""
    if team is None:
        fresh = session.get(User, user.id)
        default = fresh.default_team_id if fresh is not None else None
        if default is not None:
            row = session.execute(
                select(Team, TeamMember)
                .join(TeamMember, TeamMember.team_id == Team.id)
                .where(Team.id == default, TeamMember.user_id == user.id)
            ).first()
            if row is not None and (not spend or row[1].role in SPENDERS):
                return int(row[0].billing_account_id)
        return personal_account(session, user.id).id
    found, me = _team(session, user, team)
    if spend:
        _require(me, SPENDERS, "spending the team's money")
    return found.billing_account_id


def payer_named(session: Session, user: User, team: str | None, *, spend: bool = False) -> int:
    """The caller's personal account when no team is named (not the default team), else ``team``'s."""
    return personal_account(session, user.id).id if team is None else resolve_payer(session, user, team, spend=spend)


@dataclass(frozen=True)
class AdminTeamView:
    name: str
    members: int
    balance_minor: int
    credit_limit_minor: int
    currency: str


def list_all_teams(p: Platform) -> list[AdminTeamView]:
    """Every team with its member count, cash balance and credit limit (for the operator)."""
    with p.db.read() as s:
        cur = currency(s)
        counts = dict(
            s.execute(select(TeamMember.team_id, func.count(TeamMember.id)).group_by(TeamMember.team_id)).all()
        )
        rows = s.execute(
            select(Team, Account.balance_minor, BillingAccount.credit_limit_minor)
            .join(BillingAccount, BillingAccount.id == Team.billing_account_id)
            .join(Account, (Account.billing_account_id == BillingAccount.id) & (Account.kind == "cash"))
            .order_by(Team.name)
        ).all()
        return [AdminTeamView(t.name, int(counts.get(t.id, 0)), bal, credit, cur) for t, bal, credit in rows]
