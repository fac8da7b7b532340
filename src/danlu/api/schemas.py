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

from fastapi import Path, Query
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from danlu.accounts.service import NAME_RE as USER_NAME_RE
from danlu.catalog.gpu_models import gpu_models
from danlu.compute.envvars import MAX_VARS
from danlu.compute.hosts import cpus_text
from danlu.compute.images import NAME_RE as IMAGE_NAME_RE
from danlu.compute.instances import MAX_COMMAND_ARGS
from danlu.compute.offers import Offer
from danlu.compute.sandbox.network import POLICIES
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
    429: "Over a quota (`gpu_quota_exceeded`)",
    503: "This server cannot sandbox renters' code now (`sandbox_unavailable`)",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a router or route: each status with the error body (422 always)."""
    return {code: {"model": ErrorBody, "description": _STATUS_TEXT[code]} for code in sorted({*statuses, 422})}


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


class RentRequest(Strict):
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
        )


class EventOut(BaseModel):
    from_status: str
    to_status: str
    reason: str
    at: str | None


class LogChunk(BaseModel):
    text: str
    next_offset: int


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
