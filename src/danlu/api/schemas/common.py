"""What every schema shares: the strict base, the error body and its documented statuses, the bounds
and patterns of ids, amounts, commands and names.

Public request and response schemas live in this package, one module per resource. Money is a
decimal string in the deployment currency. Every limit the services enforce on one field is stated
here too (lengths, ranges, patterns), so the OpenAPI document tells the truth and a bad value is
refused before any database work; a limit with a stable error code of its own keeps it
(``limited``). Error responses are documented with ``ErrorBody`` through ``errors(...)``.
docs/api.md says what the schema promises.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Any

from fastapi import Path, Query
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from danlu.accounts.service import NAME_RE as USER_NAME_RE
from danlu.billing.commitments import ON_EXPIRY, TERMS
from danlu.catalog.gpu_models import gpu_models
from danlu.compute.envvars import MAX_VARS
from danlu.compute.images import NAME_RE as IMAGE_NAME_RE
from danlu.compute.instances import MAX_COMMAND_ARGS
from danlu.compute.sandbox.network import POLICIES
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
    416: "The byte range asked for starts past the file's end (`range_not_satisfiable`)",
    429: "Over a quota (`gpu_quota_exceeded`), or too many wrong tokens (`too_many_attempts`, Retry-After)",
    503: "This server cannot sandbox renters' code now (`sandbox_unavailable`), or its backend (Slurm's controller) "
    "does not answer (`backend_unavailable`); nothing changed, try again",
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
