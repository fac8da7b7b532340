"""Vouchers: campaigns, grants, redemption by code, spending order and expiry (docs/billing.md).

* A **campaign** says what a voucher is worth (a fixed amount, or a percentage of each charge up
  to an amount), what it pays for (any usage, a GPU model, a plan), when it can be had (a window,
  on sign-up, by code, by hand) and how often (overall and per billing account).
* A **grant** is one voucher held by one billing account. Its unspent value is the balance of its
  own ledger account: granting moves the value from ``promotions`` to it, spending (the meter,
  danlu.billing.posting) moves it to ``revenue``, expiry moves exactly what is left back.
* Limits hold under concurrency in the database: a conditional UPDATE of the campaign's count
  for the overall maximum, and a unique (campaign, account, n) for the per-account one.
* A voucher pays for usage up to its expiry: it is valid at ``expires_at - 1 ms`` and not at
  ``expires_at``. Before expiring it the payer is metered up to that instant, so what expires is
  exactly what was left unused. Vouchers are not refundable and never become cash.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from danlu.accounts import teams
from danlu.accounts.payers import billing_account, currency, personal_account
from danlu.accounts.service import NAME_RE, get_user_by_name
from danlu.billing.accounts import idempotency_key, lock_billing_account, post, system_account
from danlu.billing.ledger import Posting
from danlu.billing.metering import meter_account
from danlu.catalog.gpu_models import resolve_model
from danlu.context import Platform
from danlu.core.errors import Conflict, InvalidInput, NotFound
from danlu.core.money import format_minor, parse_amount
from danlu.core.parse import duration_s, duration_text, percent_bp
from danlu.db.models import Account, AllocationRow, BillingAccount, Team, User, VoucherCampaign, VoucherGrant

TRIGGERS = ("signup", "code", "manual")
ELIGIBILITY = ("all", "new")
CODE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


@dataclass(frozen=True)
class CampaignSpec:
    name: str
    amount_minor: int
    trigger: str
    valid_from_ms: int
    percent_bp: int | None = None
    valid_until_ms: int | None = None
    valid_for_ms: int | None = None
    code: str | None = None
    scope_model: str | None = None
    scope_plan: str | None = None
    eligibility: str = "all"
    max_redemptions: int | None = None
    max_per_account: int = 1
    priority: int = 100


@dataclass(frozen=True)
class GrantView:
    id: int
    campaign: str
    amount_minor: int
    remaining_minor: int
    percent_bp: int | None
    scope_model: str | None
    scope_plan: str | None
    granted_at_ms: int
    expires_at_ms: int | None
    status: str  # active | spent | expired
    currency: str


def _check_spec(spec: CampaignSpec) -> None:
    if spec.trigger not in TRIGGERS:
        raise InvalidInput("invalid_voucher_trigger", f"--on is one of {', '.join(TRIGGERS)}")
    if spec.eligibility not in ELIGIBILITY:
        raise InvalidInput("invalid_voucher_eligibility", f"--eligibility is one of {', '.join(ELIGIBILITY)}")
    if spec.amount_minor <= 0:
        raise InvalidInput("invalid_voucher_amount", "a voucher is worth more than 0 (for a percentage: its cap)")
    if spec.percent_bp is not None and not 0 < spec.percent_bp <= 10_000:
        raise InvalidInput("invalid_voucher_percent", "a percentage voucher pays 0.01 % to 100 % of each charge")
    if spec.trigger == "code":
        if not spec.code or not 4 <= len(spec.code) <= 64 or not set(spec.code) <= CODE_CHARS:
            raise InvalidInput("invalid_voucher_code", "a code campaign needs --code: 4-64 letters, digits, '-' or '_'")
    elif spec.code is not None:
        raise InvalidInput("invalid_voucher_code", "only a campaign with --on code has a code")
    if spec.valid_for_ms is not None and spec.valid_for_ms <= 0:
        raise InvalidInput("invalid_voucher_validity", "--valid-for must be a positive duration")
    if spec.valid_until_ms is not None and spec.valid_until_ms <= spec.valid_from_ms:
        raise InvalidInput("invalid_voucher_validity", "--until must be after the campaign starts")
    if spec.max_per_account < 1 or (spec.max_redemptions is not None and spec.max_redemptions < 1):
        raise InvalidInput("invalid_voucher_limit", "redemption limits are at least 1")


def create_campaign(p: Platform, spec: CampaignSpec) -> VoucherCampaign:
    _check_spec(spec)
    try:
        with p.db.write() as s:
            row = VoucherCampaign(
                name=spec.name,
                amount_minor=spec.amount_minor,
                percent_bp=spec.percent_bp,
                scope_model=spec.scope_model,
                scope_plan=spec.scope_plan,
                trigger=spec.trigger,
                code=spec.code,
                eligibility=spec.eligibility,
                valid_from_ms=spec.valid_from_ms,
                valid_until_ms=spec.valid_until_ms,
                valid_for_ms=spec.valid_for_ms,
                max_redemptions=spec.max_redemptions,
                max_per_account=spec.max_per_account,
                redemptions=0,
                priority=spec.priority,
                active=True,
                created_at_ms=p.clock.now_ms(),
            )
            s.add(row)
            s.flush()
            s.expunge(row)
            return row
    except IntegrityError:
        raise Conflict("voucher_campaign_exists", f"a campaign named {spec.name!r} or with that code exists") from None


def list_campaigns(p: Platform) -> list[VoucherCampaign]:
    with p.db.read() as s:
        rows = list(s.scalars(select(VoucherCampaign).order_by(VoucherCampaign.id)))
        for r in rows:
            s.expunge(r)
        return rows


def _open(c: VoucherCampaign, now_ms: int) -> bool:
    return c.active and c.valid_from_ms <= now_ms and (c.valid_until_ms is None or now_ms < c.valid_until_ms)


def _next_grant(
    session: Session, campaign: VoucherCampaign, ba: BillingAccount, now_ms: int, redeemer: User | None
) -> int:
    """The number of ``ba``'s next voucher of ``campaign``, after the campaign's window, eligibility and
    per-person and per-account limits allow it (else 409, nothing changed)."""
    if not _open(campaign, now_ms):
        raise Conflict("voucher_not_available", f"campaign {campaign.name} is not open now")
    born = redeemer.created_at_ms if redeemer is not None else ba.created_at_ms
    if campaign.eligibility == "new" and born < campaign.valid_from_ms:
        who = "people who joined" if redeemer is not None else "accounts created"
        raise Conflict("voucher_not_eligible", f"campaign {campaign.name} is for {who} since it started")
    if redeemer is not None:
        mine = session.execute(
            select(func.count(VoucherGrant.id)).where(
                VoucherGrant.campaign_id == campaign.id, VoucherGrant.redeemed_by_user_id == redeemer.id
            )
        ).scalar_one()
        if mine >= campaign.max_per_account:
            raise Conflict(
                "voucher_already_redeemed",
                f"you already have campaign {campaign.name}'s voucher: a code is once per person, "
                "whichever account it went to",
            )
    held = session.execute(
        select(func.count(VoucherGrant.id)).where(
            VoucherGrant.campaign_id == campaign.id, VoucherGrant.billing_account_id == ba.id
        )
    ).scalar_one()
    if held >= campaign.max_per_account:
        raise Conflict("voucher_already_redeemed", f"this account already holds campaign {campaign.name}'s voucher")
    return int(held) + 1


def grant(
    session: Session, campaign: VoucherCampaign, ba: BillingAccount, now_ms: int, redeemer: User | None = None
) -> VoucherGrant:
    """Give ``ba`` one voucher of ``campaign`` in the caller's transaction; refuses (and changes
    nothing) past the campaign's limits, its window, or its eligibility.

    A code ``redeemer`` (a person) gets at most ``max_per_account`` of a campaign's vouchers over every
    account they redeem onto, and "new" means the *person* joined since the campaign started: any renter
    can make teams, each a billing account, so per-account limits alone let one person redeem a code
    onto team after team (found by an attacker's pass in issue 11's last stop). The caller holds the
    redeemer's personal account lock, which serialises their redemptions."""
    n = _next_grant(session, campaign, ba, now_ms, redeemer)
    cur = currency(session)
    try:
        with session.begin_nested():
            taken = session.execute(
                update(VoucherCampaign)
                .where(
                    VoucherCampaign.id == campaign.id,
                    (VoucherCampaign.max_redemptions.is_(None))
                    | (VoucherCampaign.redemptions < VoucherCampaign.max_redemptions),
                )
                .values(redemptions=VoucherCampaign.redemptions + 1)
                .execution_options(synchronize_session=False)
            )
            if taken.rowcount != 1:  # type: ignore[attr-defined]
                raise Conflict("voucher_sold_out", f"campaign {campaign.name} has no vouchers left")
            acct = Account(
                kind="voucher",
                ref=f"voucher:{campaign.id}:{ba.id}:{n}",
                billing_account_id=ba.id,
                currency=cur,
                balance_minor=0,
            )
            session.add(acct)
            session.flush()
            expires = None if campaign.valid_for_ms is None else now_ms + campaign.valid_for_ms
            row = VoucherGrant(
                campaign_id=campaign.id,
                billing_account_id=ba.id,
                n=n,
                account_id=acct.id,
                granted_at_ms=now_ms,
                expires_at_ms=expires,
                expired=False,
                redeemed_by_user_id=redeemer.id if redeemer is not None else None,
            )
            session.add(row)
            session.flush()
    except IntegrityError:  # the same account redeemed it concurrently: the unique (campaign, account, n)
        raise Conflict(
            "voucher_already_redeemed", f"this account already holds campaign {campaign.name}'s voucher"
        ) from None
    post(
        session,
        key=idempotency_key("voucher-grant", campaign.id, ba.id, n),
        kind="voucher",
        memo=f"voucher {campaign.name} ({format_minor(campaign.amount_minor, cur)} {cur})",
        postings=[
            Posting(system_account(session, "promotions").id, -campaign.amount_minor),
            Posting(acct.id, campaign.amount_minor),
        ],
        now_ms=now_ms,
    )
    return row


def grant_signup_vouchers(session: Session, ba: BillingAccount, now_ms: int) -> int:
    """Every open sign-up campaign's voucher, for a new personal account (those sold out are skipped)."""
    count = 0
    for campaign in session.scalars(
        select(VoucherCampaign).where(VoucherCampaign.trigger == "signup").order_by(VoucherCampaign.id)
    ):
        if not _open(campaign, now_ms):
            continue
        try:
            grant(session, campaign, ba, now_ms)
            count += 1
        except Conflict:
            continue
    return count


def redeem_code(p: Platform, billing_account_id: int, code: str, redeemer: User | None = None) -> GrantView:
    with p.db.write() as s:
        campaign = (
            s.scalars(
                select(VoucherCampaign).where(VoucherCampaign.code == code, VoucherCampaign.trigger == "code")
            ).first()
            if len(code) <= 64
            else None
        )
        if campaign is None:
            raise NotFound("voucher_code_not_found", "no voucher has this code; check it for typos")
        if redeemer is not None:  # the person's account first (the one lock order), then the payer's
            personal = personal_account(s, redeemer.id).id
            lock_billing_account(s, personal)
        lock_billing_account(s, billing_account_id)
        row = grant(s, campaign, billing_account(s, billing_account_id), p.clock.now_ms(), redeemer)
        return _views(s, [row.id], p.clock.now_ms())[0]


def grant_by_name(p: Platform, campaign_name: str, billing_account_id: int) -> GrantView:
    with p.db.write() as s:
        campaign = s.scalars(select(VoucherCampaign).where(VoucherCampaign.name == campaign_name)).first()
        if campaign is None:
            raise NotFound(
                "voucher_campaign_not_found", f"no campaign {campaign_name!r}; see `danlu admin voucher campaign list`"
            )
        lock_billing_account(s, billing_account_id)
        row = grant(s, campaign, billing_account(s, billing_account_id), p.clock.now_ms())
        return _views(s, [row.id], p.clock.now_ms())[0]


def _views(
    s: Session, grant_ids: list[int] | None, now_ms: int, billing_account_id: int | None = None
) -> list[GrantView]:
    stmt = (
        select(VoucherGrant, VoucherCampaign, Account.balance_minor)
        .join(VoucherCampaign, VoucherCampaign.id == VoucherGrant.campaign_id)
        .join(Account, Account.id == VoucherGrant.account_id)
        .order_by(VoucherGrant.id)
    )
    if grant_ids is not None:
        stmt = stmt.where(VoucherGrant.id.in_(grant_ids))
    if billing_account_id is not None:
        stmt = stmt.where(VoucherGrant.billing_account_id == billing_account_id)
    cur = currency(s)
    out = []
    for g, c, remaining in s.execute(stmt).all():
        expired = g.expired or (g.expires_at_ms is not None and now_ms >= g.expires_at_ms)
        status = "expired" if expired else ("spent" if remaining <= 0 else "active")
        out.append(
            GrantView(
                g.id,
                c.name,
                c.amount_minor,
                remaining if not g.expired else 0,
                c.percent_bp,
                c.scope_model,
                c.scope_plan,
                g.granted_at_ms,
                g.expires_at_ms,
                status,
                cur,
            )
        )
    return out


def list_grants(p: Platform, billing_account_id: int) -> list[GrantView]:
    with p.db.read() as s:
        return _views(s, None, p.clock.now_ms(), billing_account_id)


def spendable_minor(s: Session, billing_account_ids: list[int], now_ms: int) -> dict[int, int]:
    """What each payer can spend now: unexpired vouchers + cash balance + credit limit (an upper
    bound for the loop's wake-up; a voucher's scope is left to the meter)."""
    out: dict[int, int] = {}
    for ba_id, balance, credit in s.execute(
        select(BillingAccount.id, Account.balance_minor, BillingAccount.credit_limit_minor)
        .join(Account, (Account.billing_account_id == BillingAccount.id) & (Account.kind == "cash"))
        .where(BillingAccount.id.in_(billing_account_ids))
    ).all():
        out[ba_id] = balance + credit
    for ba_id, value in s.execute(
        select(VoucherGrant.billing_account_id, func.sum(Account.balance_minor))
        .join(Account, Account.id == VoucherGrant.account_id)
        .where(
            VoucherGrant.billing_account_id.in_(billing_account_ids),
            VoucherGrant.expired.is_(False),
            (VoucherGrant.expires_at_ms.is_(None)) | (VoucherGrant.expires_at_ms > now_ms),
        )
        .group_by(VoucherGrant.billing_account_id)
    ).all():
        out[ba_id] = out.get(ba_id, 0) + int(value or 0)
    return out


def next_expiry_ms(s: Session) -> int | None:
    value = s.execute(
        select(func.min(VoucherGrant.expires_at_ms)).where(
            VoucherGrant.expired.is_(False), VoucherGrant.expires_at_ms.is_not(None)
        )
    ).scalar_one()
    return None if value is None else int(value)


def expire_due(p: Platform, now_ms: int | None = None) -> int:
    """Expire every voucher whose time has come (by ``now_ms``, default now): bill its payer up to the
    expiry first (so usage before it is paid by it), then move exactly the unspent rest back to
    ``promotions``."""
    now = p.clock.now_ms() if now_ms is None else now_ms
    with p.db.read() as s:
        due = [
            (g.id, g.billing_account_id, int(g.expires_at_ms or 0))
            for g in s.scalars(
                select(VoucherGrant)
                .where(
                    VoucherGrant.expired.is_(False),
                    VoucherGrant.expires_at_ms.is_not(None),
                    VoucherGrant.expires_at_ms <= now,
                )
                .order_by(VoucherGrant.expires_at_ms, VoucherGrant.id)
            )
        ]
    for grant_id, ba_id, expires in due:
        with p.db.write() as s:
            lock_billing_account(s, ba_id)
            allocs = list(
                s.scalars(
                    select(AllocationRow).where(
                        AllocationRow.billing_account_id == ba_id,
                        AllocationRow.settled.is_(False),
                        AllocationRow.billed_until_ms < expires,
                    )
                )
            )
            if allocs:
                meter_account(s, ba_id, allocs, expires)
            row = s.get(VoucherGrant, grant_id, with_for_update=True, populate_existing=True)
            if row is None or row.expired:
                continue
            acct = s.get(Account, row.account_id, with_for_update=True, populate_existing=True)
            assert acct is not None
            if acct.balance_minor > 0:
                post(
                    s,
                    key=idempotency_key("voucher-expiry", grant_id),
                    kind="voucher",
                    memo=f"voucher {grant_id} expired unused: {acct.balance_minor} minor units",
                    postings=[
                        Posting(acct.id, -acct.balance_minor),
                        Posting(system_account(s, "promotions").id, acct.balance_minor),
                    ],
                    now_ms=expires,
                )
            row.expired = True
    return len(due)


# --- the API's and CLI's entry points ----------------------------------------------------------


MAX_VALIDITY_MS = 3650 * 86_400_000


def parse_duration(text: str) -> int:
    """``30m``, ``72h``, ``7d`` (or ``90s``) → milliseconds."""
    seconds = duration_s(
        text,
        code="invalid_voucher_validity",
        message="--valid-for is a duration such as 30m, 72h or 7d",
        max_s=MAX_VALIDITY_MS // 1000,  # an expiry past year 9999 cannot even be shown
        too_long="--valid-for is at most 3650d (ten years)",
    )
    return seconds * 1000


def format_duration(ms: int | None) -> str | None:
    if ms is None:
        return None
    return duration_text(ms // 1000) if ms % 1000 == 0 else f"{ms}ms"


def parse_percent(text: str) -> int:
    """``50`` or ``12.5`` (percent, at most 2 decimals) → basis points, exactly."""
    return percent_bp(text, code="invalid_voucher_percent", message="a percentage is 0.01 to 100, e.g. 50 or 12.5")


@dataclass(frozen=True)
class CampaignView:
    campaign: VoucherCampaign
    currency: str


def create_campaign_from_text(
    p: Platform,
    *,
    name: str,
    amount: str,
    trigger: str,
    valid_for: str,
    until_ms: int | None = None,
    percent: str | None = None,
    code: str | None = None,
    gpu_model: str | None = None,
    plan: str | None = None,
    max_redemptions: int | None = None,
    per_account: int = 1,
    priority: int = 100,
    eligibility: str = "all",
) -> CampaignView:
    """A campaign from what an operator types (amount in the deployment currency, durations as
    ``72h``); it opens now."""
    if not NAME_RE.fullmatch(name):
        raise InvalidInput(
            "invalid_campaign_name",
            "campaign names are 2-63 characters: lowercase letters, digits, '_', '.', '-', starting with a letter",
        )
    if plan is not None and plan not in ("on-demand", "interruptible"):
        raise InvalidInput("invalid_voucher_plan", "--plan is on-demand or interruptible")
    with p.db.read() as s:
        cur = currency(s)
    spec = CampaignSpec(
        name=name,
        amount_minor=parse_amount(amount, cur, allow_zero=False),
        trigger=trigger,
        valid_from_ms=p.clock.now_ms(),
        percent_bp=None if percent is None else parse_percent(percent),
        valid_until_ms=until_ms,
        valid_for_ms=parse_duration(valid_for),
        code=code,
        scope_model=None if gpu_model is None else resolve_model(gpu_model).name,
        scope_plan=plan,
        eligibility=eligibility,
        max_redemptions=max_redemptions,
        max_per_account=per_account,
        priority=priority,
    )
    return CampaignView(create_campaign(p, spec), cur)


def campaign_views(p: Platform) -> list[CampaignView]:
    with p.db.read() as s:
        cur = currency(s)
    return [CampaignView(c, cur) for c in list_campaigns(p)]


def _payer(s: Session, user: User, team: str | None, *, spend: bool) -> int:
    # Imported here: danlu.accounts imports this module (sign-up vouchers) at its top.
    return teams.payer_named(s, user, team, spend=spend)


def vouchers_of(p: Platform, user: User, team: str | None = None) -> list[GrantView]:
    """The vouchers of the caller's personal account, or of ``team`` (any member may look)."""
    with p.db.read() as s:
        return _views(s, None, p.clock.now_ms(), _payer(s, user, team, spend=False))


def redeem(p: Platform, user: User, code: str, team: str | None = None) -> GrantView:
    """Redeem ``code`` onto the caller's personal account, or onto ``team``'s (member or above)."""
    with p.db.read() as s:
        payer = _payer(s, user, team, spend=True)
    return redeem_code(p, payer, code, redeemer=user)


def grant_to(p: Platform, campaign_name: str, *, user: str | None = None, team: str | None = None) -> GrantView:
    """The operator gives one voucher of ``campaign_name`` to a user's personal account or a team."""
    if (user is None) == (team is None):
        raise InvalidInput("invalid_voucher_target", "grant to exactly one of --user and --team")
    with p.db.read() as s:
        if team is not None:
            row = s.scalars(select(Team).where(Team.name == team)).first() if len(team) <= 64 else None
            if row is None:
                raise NotFound("team_not_found", f"no team named {team!r}; see `danlu admin team list`")
            payer = row.billing_account_id
        else:
            assert user is not None
            payer = personal_account(s, get_user_by_name(s, user).id).id
    return grant_by_name(p, campaign_name, payer)
