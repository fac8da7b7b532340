"""Public request and response schemas. Money is a decimal string in the deployment currency.

Every limit the services enforce on one field is stated here too (lengths, ranges, patterns), so
the OpenAPI document tells the truth and a bad value is refused before any database work; a limit
with a stable error code of its own keeps it (``limited``). Error responses are documented with
``ErrorBody`` through ``errors(...)``. docs/api.md says what the schema promises.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Any

from fastapi import Header, Path, Query
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from danlu.accounts.service import NAME_RE as USER_NAME_RE
from danlu.billing.commitments import ON_EXPIRY, TERMS
from danlu.catalog.gpu_models import gpu_models
from danlu.compute.envvars import MAX_VARS
from danlu.compute.hosts import cpus_text
from danlu.compute.images import NAME_RE as IMAGE_NAME_RE
from danlu.compute.instances import MAX_COMMAND_ARGS
from danlu.compute.lifecycle import StopCause
from danlu.compute.offers import Offer
from danlu.compute.sandbox.network import POLICIES
from danlu.compute.schedules import ScheduleView
from danlu.compute.views import InstanceView
from danlu.core.clock import iso
from danlu.core.money import format_minor
from danlu.scheduling.model import PRIORITIES


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# --- errors -------------------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    code: str = Field(description="Stable, machine-readable: branch on this")
    message: str = Field(description="What went wrong and what to do next")
    details: dict[str, Any] | None = None


class ErrorBody(BaseModel):
    """Every error answer: ``{"error": {"code", "message", "details"?}}``."""

    error: ErrorDetail


_STATUS_TEXT = {
    400: "Malformed request body (`malformed_json`)",
    401: "No or invalid API token (`missing_token`, `invalid_token`)",
    402: "Not enough balance (`insufficient_funds`): top up first",
    403: "Not allowed for this token (`admin_only`, a suspended account)",
    404: "No such object for this user (another tenant's objects are not found either)",
    409: "Conflicts with the object's current state or the platform's capacity",
    422: "Invalid input (`invalid_request` or a specific code)",
    429: "Over a quota (`gpu_quota_exceeded`), or too many wrong tokens (`too_many_attempts`, Retry-After)",
    503: "This server cannot sandbox renters' code now (`sandbox_unavailable`)",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a router or route: each status with the error body (422 always; 429 with
    401: a route that checks a token answers ``too_many_attempts`` to an address guessing them)."""
    codes = {*statuses, 422, *((429,) if 401 in statuses else ())}
    return {code: {"model": ErrorBody, "description": _STATUS_TEXT[code]} for code in sorted(codes)}


# --- limits -------------------------------------------------------------------------------------

NO_CONTROL = r"^[^\x00-\x1f\x7f]*$"
"""Text without NUL or other control characters (names, reasons, descriptions)."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def whole_number(value: object) -> object:
    """JSON Schema counts 3.0 as an integer; the strict models take it as 3 (3.5 stays refused)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value


WholeNumber = BeforeValidator(whole_number)


def limited(
    code: str,
    message: str,
    *,
    lo: float | None = None,
    hi: float | None = None,
    text: int | None = None,
    pattern: str | None = None,
) -> Any:
    """A validator giving an out-of-range whole number (``lo``..``hi``), a too-long or control
    character text (``text`` characters) or a text not matching ``pattern`` its own error code
    (``{value}`` in ``message`` is the value given); the same limits go in the schema with
    ``Field``. Values of the wrong type fall through to the generic ``invalid_request``."""
    regex = re.compile(pattern) if pattern else None

    def check(value: object) -> object:
        value = whole_number(value)
        bad = False
        if lo is not None and isinstance(value, int | float) and not isinstance(value, bool):
            bad = value < lo or (hi is not None and value > hi)
        if text is not None and isinstance(value, str):
            bad = len(value) > text or bool(_CONTROL.search(value))
        if regex is not None and isinstance(value, str):
            bad = bad or regex.match(value) is None or value.endswith("\n")  # Python's $ takes a final newline
        if bad:
            shown = repr(value[:40]) if isinstance(value, str) else repr(value)
            text_ = message.replace("{value}", shown).replace("{", "{{").replace("}", "}}")
            raise PydanticCustomError(code, text_, {"danlu_code": code})
        return value

    return BeforeValidator(check)


def _esc(ch: str) -> str:
    """A literal character in a pattern both Python and ECMA-262 (unicode mode) read alike."""
    return ch if ch.isalnum() or ch in "-_ " else "\\" + ch


def _case_free(name: str) -> str:
    """``T4`` → ``[Tt]4``, ``A100-80GB`` → ``[Aa]100[-_ ][89]...``: the spellings resolve_model takes."""
    out = []
    for ch in name:
        if ch.isalpha():
            out.append(f"[{ch.upper()}{ch.lower()}]")
        elif ch in "-_ ":
            out.append("[-_ ]")
        else:
            out.append(_esc(ch))
    return "".join(out)


def choice_pattern(values: Iterable[str], *, dashes: str = "exact") -> str:
    """One of ``values`` in any case. ``dashes``: "exact"; "catalog": '-', '_' or ' ' alike (as
    resolve_model takes a GPU model); "loose": '-' and '_' anywhere between the characters (as the
    advisor's choices take them, danlu.advisor.workload._choice)."""
    alts = []
    for v in values:
        if dashes == "catalog":
            alts.append(_case_free(v))
            continue
        chars = [f"[{c.upper()}{c.lower()}]" if c.isalpha() else _esc(c) for c in v]
        if dashes == "loose":
            chars = [c for c in chars if c != "-"]
        alts.append(("[-_]*" if dashes == "loose" else "").join(chars))
    return "^(" + "|".join(alts) + ")$"


GPU_MODEL_PATTERN = choice_pattern(gpu_models(), dashes="catalog")
GPU_MODEL_TEXT = "A GPU model of the catalog, any case, '-', '_' or ' ' alike: " + ", ".join(gpu_models())
INSTANCE_ID = r"^i-[0-9a-f]{1,32}(-[0-9]{1,9})?$"
JOB_ID = r"^j-[0-9a-f]{1,32}$"
HOST_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


def amount_pattern(exp: int, *, positive: bool = False, whole: int | None = None) -> str:
    """A decimal amount with at most ``exp`` decimal places and at most 10^15 minor units (what
    danlu.core.money.parse_amount takes), optionally greater than zero. The app states the one for
    its currency in the OpenAPI document (danlu.api.app); validation here is the loosest of all
    currencies (6 places, 15 digits)."""
    whole = whole or max(1, 15 - exp)
    frac = rf"(\.[0-9]{{1,{exp}}})?" if exp else ""
    if not positive:
        return rf"^[0-9]{{1,{whole}}}{frac}$"
    alts = [rf"0*[1-9][0-9]{{0,{whole - 1}}}{frac}"]
    for i in range(exp):  # 0.[0]*[1-9][0-9]*, within exp places
        tail = rf"[0-9]{{0,{exp - 1 - i}}}" if exp - 1 - i else ""
        alts.append(rf"0*\.{'0' * i}[1-9]{tail}")
    return "^(" + "|".join(alts) + ")$"


AMOUNT = amount_pattern(6, whole=15)
POSITIVE_AMOUNT = amount_pattern(6, positive=True, whole=15)
AMOUNT_TEXT = "A decimal string in the deployment currency, e.g. 12.50, with at most its decimal places"
MAX_GPUS = 1024
MAX_SECONDS = 10 * 366 * 86400  # ten years
MAX_OFFSET = 2**62
MAX_QUOTA = 1 << 20

_UNKNOWN_MODEL = limited(
    "unknown_gpu_model",
    "unknown GPU model {value}; known models: " + ", ".join(gpu_models()),
    pattern=GPU_MODEL_PATTERN,
)
_BAD_AMOUNT = limited(
    "invalid_amount", "{value} is not an amount; write a decimal such as 12.50 (no sign, no exponent)", pattern=AMOUNT
)
_BAD_POSITIVE = limited(
    "invalid_amount", "{value} is not an amount above zero; write a decimal such as 12.50", pattern=POSITIVE_AMOUNT
)
GpuModel = Annotated[str, Field(pattern=GPU_MODEL_PATTERN, description=GPU_MODEL_TEXT), _UNKNOWN_MODEL]
UserName = Annotated[
    str,
    Field(pattern=USER_NAME_RE.pattern, description="2-63 characters: a-z, 0-9, _ . -, first a letter"),
    limited(
        "invalid_user_name",
        "user names are 2-63 characters: lowercase letters, digits, '_', '.', '-', starting with a letter",
        pattern=USER_NAME_RE.pattern,
    ),
]
TeamName = Annotated[
    str,
    Field(pattern=USER_NAME_RE.pattern, description="2-63 characters: a-z, 0-9, _ . -, first a letter"),
    limited(
        "invalid_team_name",
        "team names are 2-63 characters: lowercase letters, digits, '_', '.', '-', starting with a letter",
        pattern=USER_NAME_RE.pattern,
    ),
]
ImageName = Annotated[
    str,
    Field(pattern=IMAGE_NAME_RE.pattern, description="A root filesystem from `GET /images`"),
    limited(
        "invalid_image_name",
        "image names are 1-64 characters: a-z, 0-9, '.', '_', '-', not first '.', '_' or '-'",
        pattern=IMAGE_NAME_RE.pattern,
    ),
]
GpuCount = Annotated[
    int,
    Field(ge=1, le=MAX_GPUS),
    limited("invalid_gpu_count", f"a GPU count is a whole number from 1 to {MAX_GPUS}", lo=1, hi=MAX_GPUS),
]
PROGRAM = r"^[^\x00-\x20\x7f\x85\s][^\x00]*$"


def _check_command(value: object) -> object:
    if isinstance(value, list) and all(isinstance(c, str) for c in value):
        first_ok = bool(value) and re.match(PROGRAM, value[0]) is not None
        if not first_ok or len(value) > MAX_COMMAND_ARGS or any("\x00" in c for c in value):
            raise PydanticCustomError(
                "invalid_command",
                f"a command is the program (not blank) and its arguments, at most {MAX_COMMAND_ARGS}, "
                'without NUL bytes, e.g. ["python", "train.py"]',
                {"danlu_code": "invalid_command"},
            )
    return value


Command = Annotated[
    list[Annotated[str, Field(pattern=r"^[^\x00]*$")]],
    Field(
        min_length=1,
        max_length=MAX_COMMAND_ARGS,
        description="argv: the program (not blank), then its arguments; no NUL bytes",
        json_schema_extra={"prefixItems": [{"type": "string", "pattern": PROGRAM}]},
    ),
    BeforeValidator(_check_command),
]
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"


def _check_env(value: object) -> object:
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        names_ok = all(isinstance(k, str) and re.fullmatch(ENV_NAME[1:-1], k) for k in value)
        if not names_ok or len(value) > MAX_VARS or any("\x00" in v for v in value.values()):
            raise PydanticCustomError(
                "invalid_env",
                f"env is at most {MAX_VARS} NAME: value pairs; names are letters, digits and '_' (not first a "
                "digit), values are text without NUL bytes",
                {"danlu_code": "invalid_env"},
            )
    return value


EnvVars = Annotated[
    dict[Annotated[str, Field(pattern=ENV_NAME)], Annotated[str, Field(pattern=r"^[^\x00]*$")]],
    Field(
        max_length=MAX_VARS,
        description="Your own environment variables (at most 64 KiB in all); DANLU_* and the GPU variables "
        "(CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER) and HOME are the platform's",
    ),
    BeforeValidator(_check_env),
]
NOT_BLANK = r"^[^\x00-\x1f\x7f]*[^\x00-\x20\x7f\x85\s][^\x00-\x1f\x7f]*$"
"""Like NO_CONTROL, with something other than spaces in it."""
Reason = Annotated[
    str,
    Field(max_length=500, pattern=NOT_BLANK, description="What the renter is told"),
    limited(
        "invalid_reason",
        "give a reason the renter will read: 1-500 characters, not only spaces, no control characters",
        text=500,
        pattern=NOT_BLANK,
    ),
]
Amount = Annotated[str, Field(pattern=AMOUNT, description=AMOUNT_TEXT), _BAD_AMOUNT]
PositiveAmount = Annotated[
    str, Field(pattern=POSITIVE_AMOUNT, description=AMOUNT_TEXT + ", more than zero"), _BAD_POSITIVE
]

# Path and query parameters
InstanceIdPath = Annotated[str, Path(pattern=INSTANCE_ID, max_length=32, description="An instance id: i- and hex")]
JobIdPath = Annotated[str, Path(pattern=JOB_ID, max_length=32, description="A job id: j- and hex")]
UserNamePath = Annotated[str, Path(pattern=USER_NAME_RE.pattern, description="A user name")]
HostNamePath = Annotated[str, Path(pattern=HOST_NAME, description="A host name from `GET /admin/hosts`")]
ImageNamePath = Annotated[str, Path(pattern=IMAGE_NAME_RE.pattern, description="An image name")]
GpuModelPath = Annotated[str, Path(pattern=GPU_MODEL_PATTERN, description=GPU_MODEL_TEXT), _UNKNOWN_MODEL]
LogOffset = Annotated[int, Query(ge=0, le=MAX_OFFSET, description="Byte offset to read from (next_offset)")]
NETWORK_POLICY = "|".join(POLICIES)
PRIORITY = "|".join(PRIORITIES)


TERM_CHOICES = "|".join(TERMS)
TERM_TEXT = "package-day, package-week, package-month, reserved-1m, reserved-3m, reserved-6m or reserved-12m"
TermName = Annotated[
    str,
    Field(pattern=f"^({TERM_CHOICES})$", description=TERM_TEXT),
    limited("invalid_term", f"a term is one of {TERM_TEXT}", pattern=f"^({TERM_CHOICES})$"),
]
OnExpiry = Annotated[
    str,
    Field(pattern=f"^({'|'.join(ON_EXPIRY)})$", description="At the end, an instance on it: stop, or on-demand"),
    limited("invalid_on_expiry", "on_expiry is stop or on-demand", pattern=f"^({'|'.join(ON_EXPIRY)})$"),
]

RUN_DURATION = r"^([1-9][0-9]{0,6}s|[1-9][0-9]{0,5}m|[1-9][0-9]{0,4}h|[1-9][0-9]{0,3}d)$"
IDLE_STOP = r"^(off|0|[1-9][0-9]{0,6}s|[1-9][0-9]{0,5}m|[1-9][0-9]{0,4}h|[1-9][0-9]{0,3}d)$"
IDLE_THRESHOLD = r"^(100(\.0)?|[1-9][0-9]?(\.[0-9])?|0\.[1-9])$"
IdleStop = Annotated[
    str,
    Field(pattern=IDLE_STOP, description="Stop after this long with every GPU idle: 90s, 30m, 6h, 2d; off"),
    limited("invalid_idle_stop", "idle_stop is a duration such as 30m (or off), not {value}", pattern=IDLE_STOP),
]
IdleThreshold = Annotated[
    str,
    Field(pattern=IDLE_THRESHOLD, description="Idle means every GPU under this percentage (default 5)"),
    limited("invalid_idle_threshold", "idle_threshold is a percentage above 0, at most 100", pattern=IDLE_THRESHOLD),
]
RunDuration = Annotated[
    str,
    Field(pattern=RUN_DURATION, description="Stop a run older than this: 90s, 30m, 6h, 2d"),
    limited("invalid_max_duration", "max_duration is a duration such as 6h, not {value}", pattern=RUN_DURATION),
]


class RunLimitsIn(Strict):
    """A run's own limits (docs/telemetry.md); the operator's default and maximum apply."""

    idle_stop: IdleStop | None = None
    idle_threshold: IdleThreshold | None = None
    max_duration: RunDuration | None = None


class RentRequest(RunLimitsIn):
    gpu_model: GpuModel
    gpu_count: GpuCount = 1
    command: Command
    name: Annotated[
        str,
        Field(max_length=64, pattern=NO_CONTROL),
        limited("invalid_name", "instance names are at most 64 characters, without control characters", text=64),
    ] = ""
    interruptible: bool = False
    image: ImageName = "host"
    env: EnvVars = Field(default_factory=dict)
    team: TeamName | None = Field(None, description="Pay from this team's account (member or above)")
    package: TermName | None = Field(
        None, description="Buy this package or reserved commitment with the rental (paid at once) and run on it"
    )
    on_expiry: OnExpiry = "stop"
    expected_price: Amount | None = Field(
        None, description="With package: the price you were quoted (POST /plans/quote); if it changed, 409"
    )


class OfferOut(BaseModel):
    gpu_model: str
    vram_gb: int
    free: int
    total: int
    max_per_host: int
    price_per_hour: str | None
    interruptible_price_per_hour: str | None
    currency: str
    simulated: bool
    vcpus_per_gpu: str | None
    memory_per_gpu_mb: int | None
    disk_per_gpu_mb: int | None
    sandbox: str
    price_now: str | None = Field(None, description="the on-demand price in force now under the operator's tariffs")
    tariff_now: str | None = Field(None, description="the tariff window in force now, if any")
    next_cheaper_at: str | None = Field(None, description="when the next cheaper window opens (ISO 8601, UTC)")
    next_cheaper_price: str | None = None

    @classmethod
    def of(cls, o: Offer) -> OfferOut:
        price = None if o.price_per_hour_minor is None else format_minor(o.price_per_hour_minor, o.currency)
        spot = o.interruptible_price_per_hour_minor
        spot_text = None if spot is None else format_minor(spot, o.currency)
        return cls(
            gpu_model=o.gpu_model,
            vram_gb=o.vram_gb,
            free=o.free,
            total=o.total,
            max_per_host=o.max_per_host,
            price_per_hour=price,
            interruptible_price_per_hour=spot_text,
            currency=o.currency,
            simulated=o.simulated,
            vcpus_per_gpu=cpus_text(o.cpus_per_gpu_milli) if o.cpus_per_gpu_milli else None,
            memory_per_gpu_mb=o.mem_per_gpu_mb,
            disk_per_gpu_mb=o.disk_per_gpu_mb,
            sandbox=o.sandbox,
            price_now=None if o.price_now_minor is None else format_minor(o.price_now_minor, o.currency),
            tariff_now=o.tariff_now,
            next_cheaper_at=None if o.next_cheaper_at_ms is None else iso(o.next_cheaper_at_ms),
            next_cheaper_price=None
            if o.next_cheaper_price_minor is None
            else format_minor(o.next_cheaper_price_minor, o.currency),
        )


class ScheduleOut(BaseModel):
    stop: str | None = Field(None, description="stops at this time (HH:MM, the deployment's zone)")
    start: str | None = Field(None, description="starts at this time (HH:MM, the deployment's zone)")
    days: list[str] = Field(description='on these days: ["daily"], ["weekdays"], ["weekends"] or e.g. ["mon", "wed"]')
    timezone: str
    description: str
    next_action: str | None = Field(None, description="stop or start")
    next_at: str | None = None

    @classmethod
    def of(cls, v: ScheduleView) -> ScheduleOut:
        return cls(
            stop=v.stop,
            start=v.start,
            days=v.days.split(","),
            timezone=v.timezone,
            description=v.description,
            next_action=v.next_action,
            next_at=iso(v.next_at_ms),
        )


HHMM_PATTERN = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
_DAY = "(mon|tue|wed|thu|fri|sat|sun)"
DAYS_PATTERN = rf"^({_DAY}(-{_DAY})?|daily|weekdays|weekends)$"


HHMM = Annotated[
    str,
    Field(pattern=HHMM_PATTERN),
    limited(
        "invalid_schedule", "a time of day is HH:MM, 00:00 to 23:59 (e.g. 23:00), not {value}", pattern=HHMM_PATTERN
    ),
]


class ScheduleIn(Strict):
    stop: HHMM | None = None
    start: HHMM | None = None
    days: list[
        Annotated[
            str,
            Field(pattern=DAYS_PATTERN),
            limited(
                "invalid_schedule",
                "a day (mon … sun), a range (mon-fri), daily, weekdays or weekends, not {value}",
                pattern=DAYS_PATTERN,
            ),
        ]
    ] = Field(
        default_factory=lambda: ["daily"], min_length=1, max_length=7, description='e.g. ["mon-fri"] or ["sat", "sun"]'
    )


class InstanceOut(BaseModel):
    id: str
    name: str
    status: str
    status_reason: str
    gpu_model: str
    gpu_count: int
    gpu_indices: list[int]
    simulated: bool
    interruptible: bool
    command: list[str]
    exit_code: int | None
    billed_seconds: int
    cost: str
    price_per_hour: str | None
    currency: str
    created_at: str | None
    image: str
    sandbox: dict[str, Any] | None
    storage_cost: str = Field("0", description="the part of cost that is stored workspace while stopped")
    stopped_storage_per_day: str | None = Field(
        None, description="what staying stopped costs per day (its workspace at the storage price); `show` only"
    )
    workspace_release_at: str | None = Field(None, description="when a stopped instance's workspace is released")
    workspace_released_at: str | None = None
    hold_id: str | None = Field(None, description="the package or reservation it runs on (prepaid), if any")
    idle_stop_s: int | None = Field(None, description="stopped after this many seconds with every GPU idle")
    idle_threshold: str = Field("5.0", description="idle means every GPU under this percentage")
    max_duration_s: int | None = Field(None, description="a run is stopped after this many seconds")
    stop_reason: str = Field("", description="why it last stopped (for an idle stop: what was measured)")
    stop_cause: str = Field(
        "",
        description="why it last stopped, as a word to act on: " + ", ".join(StopCause) + "; empty if it never stopped",
    )
    schedule: ScheduleOut | None = Field(None, description="its start/stop schedule; `show` only")
    hints: list[str] = Field(
        default_factory=list, description="efficiency hints from the last 10 minutes' samples; `show` only"
    )
    backend_ref: str | None = Field(
        None, description="where its current or last run is: slurm:JOBID on a Slurm cluster, local:PID; `show` only"
    )
    last_used_at: str | None = Field(
        None, description="when a person last used it (idle auto-stop counts it as use); `show` only"
    )
    last_used_by: str | None = Field(None, description="how: keystrokes (a session) or port traffic; `show` only")

    @classmethod
    def of(cls, v: InstanceView) -> InstanceOut:
        price = None if v.price_per_hour_minor is None else format_minor(v.price_per_hour_minor, v.currency)
        return cls(
            id=v.id,
            name=v.name,
            status=v.status,
            status_reason=v.status_reason,
            gpu_model=v.gpu_model,
            gpu_count=v.gpu_count,
            gpu_indices=v.gpu_indices,
            simulated=v.simulated,
            interruptible=v.interruptible,
            command=v.command,
            exit_code=v.exit_code,
            billed_seconds=v.billed_seconds,
            cost=format_minor(v.cost_minor, v.currency),
            price_per_hour=price,
            currency=v.currency,
            created_at=iso(v.created_at_ms),
            image=v.image,
            sandbox=v.sandbox,
            storage_cost=format_minor(v.storage_cost_minor, v.currency),
            stopped_storage_per_day=None
            if v.stopped_storage_per_day_minor is None
            else format_minor(v.stopped_storage_per_day_minor, v.currency),
            workspace_release_at=iso(v.workspace_release_at_ms),
            workspace_released_at=iso(v.workspace_released_at_ms),
            hold_id=v.hold_id,
            idle_stop_s=v.idle_stop_s,
            idle_threshold=f"{v.idle_threshold_pm // 10}.{v.idle_threshold_pm % 10}",
            max_duration_s=v.max_duration_s,
            stop_reason=v.stop_reason,
            stop_cause=v.stop_cause,
            backend_ref=v.backend_ref,
            last_used_at=iso(v.last_used_ms),
            last_used_by=v.last_used_by,
        )


class EventOut(BaseModel):
    from_status: str
    to_status: str
    reason: str
    at: str | None


class LogChunk(BaseModel):
    text: str
    next_offset: int


class LedgerLineOut(BaseModel):
    transaction_id: int = Field(description="the next page is `?before=` the last line's transaction_id")
    kind: str
    memo: str
    at_ms: int
    amount: str


class BalanceOut(BaseModel):
    balance: str
    credit_limit: str
    currency: str


class UserCreate(Strict):
    name: UserName


class UserOut(BaseModel):
    name: str
    token: str | None = None
    is_admin: bool = False
    suspended_reason: str | None = None
    sandbox_uid: int | None = None


class ReasonIn(Strict):
    reason: Reason


class TokenOut(BaseModel):
    name: str
    token: str | None


IMAGE_SOURCE = r"^(/|(/[^\x00/]{1,63}){1,64}/?)$"


class ImageIn(Strict):
    name: ImageName
    source: Annotated[
        str,
        Field(
            max_length=1000,
            pattern=IMAGE_SOURCE,
            description="Absolute path on the server's host: an existing root filesystem folder or a tarball, "
            "owned by root; names in it at most 63 characters",
        ),
        limited(
            "invalid_image_source",
            "{value} is not an absolute path (names in it at most 63 characters, no NUL bytes)",
            pattern=IMAGE_SOURCE,
        ),
    ]
    description: Annotated[
        str,
        Field(max_length=500, pattern=NO_CONTROL),
        limited(
            "invalid_description", "an image description is at most 500 characters, no control characters", text=500
        ),
    ] = ""


class ImageOut(BaseModel):
    name: str
    kind: str
    description: str
    size_bytes: int | None
    created_at: str | None


def _host_limit(lo: float, hi: float, what: str) -> Any:
    def num(x: float) -> str:
        return str(int(x)) if float(x).is_integer() else f"{x:g}"

    return limited("invalid_host_limit", f"{what} is between {num(lo)} and {num(hi)}", lo=lo, hi=hi)


class HostIn(Strict):
    cpus_per_gpu: (
        Annotated[float, Field(ge=0.1, le=1000, allow_inf_nan=False), _host_limit(0.1, 1000, "vCPUs per GPU")] | None
    ) = Field(None, description="vCPUs per GPU")
    memory_per_gpu_mb: (
        Annotated[int, Field(ge=64, le=1 << 30), _host_limit(64, 1 << 30, "memory per GPU (MiB)")] | None
    ) = None
    disk_per_gpu_mb: Annotated[int, Field(ge=16, le=1 << 40), _host_limit(16, 1 << 40, "disk per GPU (MiB)")] | None = (
        None
    )
    pids_per_gpu: Annotated[int, Field(ge=16, le=1 << 22), _host_limit(16, 1 << 22, "processes per GPU")] | None = None
    network_policy: (
        Annotated[
            str,
            Field(pattern=f"^({NETWORK_POLICY})$"),
            limited(
                "invalid_network_policy",
                "the network policy is one of " + ", ".join(POLICIES),
                pattern=f"^({NETWORK_POLICY})$",
            ),
        ]
        | None
    ) = None


class HostOut(BaseModel):
    name: str
    gpus: int
    vcpus_per_gpu: str
    memory_per_gpu_mb: int
    disk_per_gpu_mb: int
    pids_per_gpu: int
    network_policy: str
    sandbox: str
    limits_enforced_by: str
    identity: str
    detail: str


class SandboxOut(BaseModel):
    instance_id: str
    user: str
    job_id: str | None
    host: str
    status: str
    image: str
    uid: int | None
    network: str
    limits: dict[str, Any]


class AmountIn(Strict):
    amount: Amount


class TopupIn(Strict):
    amount: PositiveAmount


class PriceIn(Strict):
    price_per_hour: PositiveAmount
    interruptible_price_per_hour: PositiveAmount | None = Field(None, description="At most the on-demand price")


class PriceOut(BaseModel):
    gpu_model: str
    price_per_hour: str
    interruptible_price_per_hour: str | None
    currency: str


class TopupOut(BalanceOut):
    created: bool


class GpuOut(BaseModel):
    host: str
    index: int
    uuid: str
    model: str
    nvml_name: str
    vram_mb: int
    simulated: bool
    present: bool
    instance_id: str | None
    hold_id: str | None = None


class QuotaIn(Strict):
    gpus: (
        Annotated[
            int,
            Field(ge=0, le=MAX_QUOTA),
            limited(
                "invalid_quota",
                f"a GPU quota is a whole number of GPUs, 0 to {MAX_QUOTA} (or null for none)",
                lo=0,
                hi=MAX_QUOTA,
            ),
        ]
        | None
    )


class QuotaOut(BaseModel):
    name: str
    gpus: int | None


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


VOUCHER_CODE = r"^[A-Za-z0-9_-]{4,64}$"
VoucherCode = Annotated[
    str,
    Field(pattern=VOUCHER_CODE, description="4-64 letters, digits, '-' or '_'"),
    limited("invalid_voucher_code", "a voucher code is 4-64 letters, digits, '-' or '_'", pattern=VOUCHER_CODE),
]
DURATION = r"^[1-9][0-9]{0,6}[smhd]$"
# 0.01 to 100, at most two decimals; never zero (danlu.billing.vouchers.parse_percent refuses it).
PERCENT = r"^(100(\.0{1,2})?|0?[1-9](\.[0-9]{1,2})?|[1-9][0-9](\.[0-9]{1,2})?|0{1,2}\.([1-9][0-9]?|0[1-9]))$"
ISO_TIME = (
    r"^[12][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[T ]([01][0-9]|2[0-3]):[0-5][0-9]"
    r"(:[0-5][0-9](\.[0-9]{1,6})?)?(Z|[+-]([01][0-9]|2[0-3]):?[0-5][0-9])$"
)
PLAN_CHOICES = "on-demand|interruptible"
MAX_REDEMPTIONS = 10**9


MaxRedemptions = Annotated[
    int,
    Field(ge=1, le=MAX_REDEMPTIONS),
    limited("invalid_voucher_limit", f"max_redemptions is 1 to {MAX_REDEMPTIONS}", lo=1, hi=MAX_REDEMPTIONS),
]
PerAccount = Annotated[
    int, Field(ge=1, le=1000), limited("invalid_voucher_limit", "per_account is 1 to 1000", lo=1, hi=1000)
]
VoucherPriority = Annotated[
    int,
    Field(ge=0, le=10_000),
    limited("invalid_voucher_priority", "priority is 0 (spent first) to 10000", lo=0, hi=10_000),
]


class RedeemIn(Strict):
    code: VoucherCode
    team: TeamName | None = Field(None, description="Redeem onto this team's account (member or above)")


class CampaignIn(Strict):
    # A code exactly when on=code (danlu.billing.vouchers._check_spec), stated for clients and fuzzers.
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"properties": {"on": {"const": "code"}, "code": {"type": "string"}}, "required": ["on", "code"]},
                {"properties": {"on": {"enum": ["signup", "manual"]}, "code": {"type": "null"}}},
            ]
        }
    )

    name: TeamName
    amount: PositiveAmount = Field(description="Each voucher's value (for a percentage voucher: its cap)")
    percent: (
        Annotated[
            str,
            Field(pattern=PERCENT),
            limited("invalid_voucher_percent", "a percentage is 0.01 to 100, e.g. 50 or 12.5", pattern=PERCENT),
        ]
        | None
    ) = Field(None, description="Pays this percentage of each charge, up to the amount")
    valid_for: Annotated[
        str,
        Field(pattern=DURATION),
        limited("invalid_voucher_validity", "valid_for is a duration such as 30m, 72h or 7d", pattern=DURATION),
    ] = Field(description="How long each voucher lasts once granted: 30m, 72h, 7d (s, m, h, d)")
    until: (
        Annotated[
            str,
            Field(pattern=ISO_TIME),
            limited(
                "invalid_voucher_validity",
                "until is ISO-8601 with a timezone, e.g. 2027-01-01T00:00:00Z",
                pattern=ISO_TIME,
            ),
        ]
        | None
    ) = Field(None, description="Last moment vouchers can be had (ISO-8601 with timezone)")
    on: Annotated[
        str,
        Field(pattern="^(signup|code|manual)$"),
        limited("invalid_voucher_trigger", "on is one of signup, code, manual", pattern="^(signup|code|manual)$"),
    ]
    code: VoucherCode | None = Field(None, description="For on=code: what renters type")
    gpu_model: GpuModel | None = Field(None, description="Pays only for this GPU model")
    plan: (
        Annotated[
            str,
            Field(pattern=f"^({PLAN_CHOICES})$"),
            limited("invalid_voucher_plan", "plan is on-demand or interruptible", pattern=f"^({PLAN_CHOICES})$"),
        ]
        | None
    ) = Field(None, description="Pays only for this plan")
    max_redemptions: MaxRedemptions | None = Field(None, description="Vouchers in all (null: no limit)")
    per_account: PerAccount = Field(1, description="Vouchers per billing account")
    priority: VoucherPriority = Field(100, description="Lower is spent first")
    eligibility: Annotated[
        str,
        Field(pattern="^(all|new)$"),
        limited("invalid_voucher_eligibility", "eligibility is all or new", pattern="^(all|new)$"),
    ] = "all"


class CampaignOut(BaseModel):
    name: str
    amount: str
    percent: str | None
    valid_for: str | None
    until: str | None
    on: str
    code: str | None
    gpu_model: str | None
    plan: str | None
    max_redemptions: int | None
    per_account: int
    redemptions: int
    priority: int
    eligibility: str
    active: bool
    currency: str
    created_at: str | None


class GrantIn(Strict):
    """Exactly one of ``user`` and ``team``."""

    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"properties": {"user": {"type": "string"}}, "required": ["user"]},
                {"properties": {"team": {"type": "string"}}, "required": ["team"]},
            ]
        }
    )

    user: UserName | None = None
    team: TeamName | None = None


class VoucherOut(BaseModel):
    id: int
    campaign: str
    amount: str
    remaining: str
    percent: str | None
    gpu_model: str | None
    plan: str | None
    granted_at: str | None
    expires_at: str | None = Field(description="ISO-8601 UTC; null: never expires")
    status: str = Field(description="active, spent or expired")
    currency: str


# --- invoices and cost (danlu.billing.invoices, danlu.compute.cost) ------------------------------

PERIOD = r"^2[0-9]{3}-(0[1-9]|1[0-2])$"  # 2000-01 to 2999-12, as danlu.billing.invoices.check_period
_BAD_PERIOD = limited(
    "invalid_period",
    "a period is a month written YYYY-MM (2000-01 to 2999-12), e.g. 2026-01, not {value}",
    pattern=PERIOD,
)
PeriodPath = Annotated[str, Path(pattern=PERIOD, max_length=7, description="A month, YYYY-MM (deployment time zone)")]
InvoiceTeamQuery = Annotated[
    str | None,
    Query(max_length=64, pattern=USER_NAME_RE.pattern, description="A team you are in (default: your default team)"),
]
InvoiceFormatQuery = Annotated[
    str, Query(pattern="^(json|csv|html)$", description="json, csv or html (self-contained)")
]


class InvoiceLineOut(BaseModel):
    instance_id: str
    description: str
    plan: str
    seconds: int = Field(description="Whole billed seconds of GPU time (per allocation, not per GPU)")
    price_per_hour: str = Field(description="Per GPU-hour")
    gross: str = Field(description="List price")
    discount: str
    vouchers: str
    cash: str
    amount: str = Field(description="gross - discount = vouchers + cash")
    adjustment: bool = Field(description="Usage of an earlier, already final month posted after it closed")


class InvoiceOut(BaseModel):
    period: str
    status: str = Field(description="draft (derived, may change) | final (numbered, immutable)")
    number: int | None
    account: str
    account_kind: str
    currency: str
    finalized_at_ms: int | None
    lines: list[InvoiceLineOut]
    gross: str
    discount: str
    vouchers: str
    cash: str
    total: str


class CostLineOut(BaseModel):
    allocation_id: int
    description: str = Field(description="posted | not yet posted")
    plan: str
    tariff: str | None
    seconds: int
    gpus: int
    price_per_hour: str = Field(description="The list price per GPU-hour")
    multiplier: str = Field("1", description="The tariff's multiplier: the price applied is price_per_hour × it")
    gross: str
    discount: str
    vouchers: str = Field(description="An amount, or pending (not posted yet)")
    cash: str = Field(description="An amount, or pending (not posted yet)")
    amount: str
    posted: bool


class CostOut(BaseModel):
    instance_id: str
    currency: str
    cost: str = Field(description="The sum of the lines' amounts")
    lines: list[CostLineOut]


class FinalizeIn(Strict):
    period: Annotated[str, Field(pattern=PERIOD, max_length=7), _BAD_PERIOD] | None = Field(
        None, description="A month that has ended (grace waived); omitted: every month past its grace window"
    )


class FinalizeOut(BaseModel):
    finalized: int = Field(description="Invoices written")


# --- budgets, the student discount, tariffs, stopped storage (issue 9 parts 3, 4, 6, 7) ---------

BUDGET_PERIOD = r"^(month|total)$"
MAX_ROW_ID = 2**31 - 1  # the id columns are INTEGER (32-bit on PostgreSQL)
BudgetIdPath = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="A budget's id from `GET /budgets`")]
BudgetTeamQuery = Annotated[
    str | None,
    Query(max_length=64, pattern=USER_NAME_RE.pattern, description="A team you are in (default: your own account)"),
]


class BudgetIn(Strict):
    """One budget per scope: the account (neither ``member`` nor ``instance``), one team member, or
    one instance; setting it again replaces its limits. At least one of ``soft`` and ``hard``
    (a request with neither, or with both ``member`` and ``instance``, answers 422)."""

    member: UserName | None = Field(None, description="A member of the team's account (owners and admins set it)")
    instance: (
        Annotated[
            str,
            Field(pattern=INSTANCE_ID, max_length=32),
            limited("invalid_budget_scope", "instance is an instance id, i- and hex", pattern=INSTANCE_ID, text=32),
        ]
        | None
    ) = Field(None, description="One instance on the account (its renter or the team's managers set it)")
    period: Annotated[
        str,
        Field(pattern=BUDGET_PERIOD),
        limited("invalid_budget_period", "period is month or total", pattern=BUDGET_PERIOD),
    ] = Field("month", description="month: this calendar month (deployment time zone); total: ever")
    soft: PositiveAmount | None = Field(None, description="Events at 50%, 80% and 100% of it")
    hard: PositiveAmount | None = Field(None, description="Usage in the scope stops exactly here")


class BudgetOut(BaseModel):
    id: int
    scope: str = Field(description="account, member:NAME or instance:ID")
    period: str
    soft: str | None
    hard: str | None
    spent: str = Field(description="Charged in the scope this period (vouchers and cash, after discounts)")
    currency: str


INSTITUTION_MAX, EVIDENCE_MAX = 128, 2000
_TEXT = r"[^\x00-\x1f\x7f]*"
_SOLID = r"[^\x00-\x20\x7f\x85\s]"
INSTITUTION = f"^{_TEXT}{_SOLID}{_TEXT}{_SOLID}{_TEXT}$"
"""At least two characters other than spaces (the service strips the name), no control characters."""


class VerificationIn(Strict):
    institution: Annotated[
        str,
        Field(min_length=2, max_length=INSTITUTION_MAX, pattern=INSTITUTION),
        limited(
            "invalid_verification",
            "name your institution (2-128 characters, no control characters)",
            text=INSTITUTION_MAX,
            pattern=INSTITUTION,
        ),
    ]
    evidence: Annotated[
        str,
        Field(max_length=EVIDENCE_MAX, pattern=r"^[^\x00]*$"),
    ] = Field("", description="What shows you are a student: a university e-mail, a card number")


class VerificationOut(BaseModel):
    user: str
    status: str = Field(description="none, pending, approved or refused")
    institution: str
    reason: str = Field(description="Why a request was refused")
    requested_at: str | None
    decided_at: str | None
    discount: str = Field(description="The student discount an approved renter gets now, in percent")


class VerificationRequestOut(VerificationOut):
    evidence: str


class DiscountIn(Strict):
    percent: Annotated[
        str,
        Field(pattern=PERCENT, max_length=6),
        limited(
            "invalid_discount",
            "the student discount is a percentage from 0 to 100, at most 2 decimals",
            pattern=PERCENT,
        ),
    ] = Field(description="0 to 100, at most 2 decimals, e.g. 20 or 12.5")


class DiscountOut(BaseModel):
    percent: str


CLOCK_TIME = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
MULTIPLIER = r"^0(\.[0-9]{1,4})?$"
_BAD_TARIFF_TIME = limited("invalid_tariff", "times are HH:MM in 24 h, e.g. 23:00 (got {value})", pattern=CLOCK_TIME)
TariffIdPath = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="A tariff rule's id from `GET /admin/tariffs`")]


class TariffIn(Strict):
    """A time-of-day rule; ``to`` at or before ``from`` wraps past midnight (equal times answer 422)."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    name: Annotated[
        str,
        Field(min_length=1, max_length=64, pattern=NO_CONTROL),
        limited("invalid_tariff", "a tariff's name is 1 to 64 characters", text=64),
    ]
    days: Annotated[
        list[
            Annotated[
                str,
                Field(pattern=DAYS_PATTERN),
                limited("invalid_tariff", "days are mon … sun, mon-fri, weekdays …", pattern=DAYS_PATTERN),
            ]
        ],
        Field(min_length=1, max_length=7, description="The days a window starts on: mon … sun, mon-fri, weekdays …"),
    ]
    from_: Annotated[str, Field(pattern=CLOCK_TIME), _BAD_TARIFF_TIME] = Field(
        alias="from", description="Local time (deployment time zone), HH:MM"
    )
    to: Annotated[str, Field(pattern=CLOCK_TIME), _BAD_TARIFF_TIME] = Field(description="HH:MM; <= from wraps")
    multiplier: Annotated[
        str,
        Field(pattern=MULTIPLIER, max_length=6),
        limited("invalid_tariff", "a multiplier is 0 to below 1, at most 4 decimals, e.g. 0.5", pattern=MULTIPLIER),
    ] = Field(description="The price factor in the window: 0.5 is -50%")
    plans: Annotated[
        list[
            Annotated[
                str,
                Field(pattern=f"^({PLAN_CHOICES})$"),
                limited("invalid_tariff", "plans are on-demand and interruptible", pattern=f"^({PLAN_CHOICES})$"),
            ]
        ],
        Field(max_length=2, description="Only these plans (empty: every plan)"),
    ] = Field(default_factory=list)


class TariffOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    id: int
    name: str
    days: list[str]
    from_: str = Field(alias="from")
    to: str
    multiplier: str
    plans: list[str] = Field(description="empty: every plan")
    created_at: str | None
    retired_at: str | None = Field(description="null: in force")


RETENTION = (
    r"^(([1-9]|[1-9][0-9]|[1-9][0-9]{2}|[1-7][0-9]{3}|8[0-6][0-9]{2}|87[0-7][0-9]|878[0-4])h"
    r"|([1-9]|[1-9][0-9]|[12][0-9]{2}|3[0-5][0-9]|36[0-6])d)$"
)
"""1h to 8784h, or 1d to 366d: the service's 1 hour to 366 days."""
_BAD_RETENTION = limited(
    "invalid_storage_policy", "a period is hours or days such as 12h or 7d, 1 hour to 366 days", pattern=RETENTION
)


class StorageIn(Strict):
    """Only the fields given change. Each period is 1 hour to 366 days, in hours or days."""

    price_gb_month: Amount | None = Field(None, description="What a stopped instance's workspace costs per GB-month")
    warn_after: Annotated[str, Field(pattern=RETENTION), _BAD_RETENTION] | None = Field(
        None, description="Stopped this long, the renter is warned: 12h, 7d (1h to 366d)"
    )
    release_after: Annotated[str, Field(pattern=RETENTION), _BAD_RETENTION] | None = Field(
        None, description="This long after the warning the workspace is released"
    )


class StorageOut(BaseModel):
    price_gb_month: str
    warn_after: str
    release_after: str
    currency: str


# --- idempotency (danlu.billing.idempotency) -----------------------------------------------------

IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        min_length=1,
        max_length=120,
        pattern=r"^[\x21-\x7e]+$",
        description=(
            "Retry-safe: the same key (yours, on this endpoint) with the same request answers the first "
            "response again and changes nothing; with another request it is 409 idempotency_key_reused"
        ),
    ),
]
