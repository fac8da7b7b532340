"""The session wire protocol, pure: one WebSocket, every message a binary frame whose first byte
names its channel (as Kubernetes' ``v5.channel.k8s.io`` exec streams do).

| channel | direction | payload |
|---|---|---|
| 0 stdin | client → server | bytes for the process (keystrokes, for a terminal) |
| 1 stdout | server → client | bytes (a terminal's whole output) |
| 2 stderr | server → client | bytes (none with a terminal) |
| 3 status | server → client | JSON, last: ``{"exit_code": N}`` or ``{"error": {"code", "message"}}`` |
| 4 resize | client → server | JSON ``{"cols": C, "rows": R}`` (a terminal only) |
| 255 close | client → server | empty: the client has no more stdin (EOF) |

The query string says what to start: ``command`` (repeated, one argument each; none: the renter's
login shell) and ``tty`` (``true``: a terminal, ``cols``/``rows`` its first size).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from danlu.core.errors import DanluError, InvalidInput

STDIN, STDOUT, STDERR, STATUS, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
MAX_COMMAND_BYTES = 64 * 1024  # as a rental's command (danlu.api.schemas)
MAX_FRAME_BYTES = 1 << 20  # one message; a larger paste arrives in several
DEFAULT_SIZE = (80, 24)
SUBPROTOCOL = "danlu.exec.v1"
# WebSocket close codes: 4000 + the HTTP status the same refusal gets on the REST API.
CLOSE_NORMAL = 1000


def frame(channel: int, payload: bytes) -> bytes:
    return bytes((channel,)) + payload


def status_frame(*, exit_code: int | None = None, error: DanluError | None = None) -> bytes:
    body = {"error": error.to_dict()} if error is not None else {"exit_code": exit_code}
    return frame(STATUS, json.dumps(body).encode())


def close_code(error: DanluError) -> int:
    return 4000 + error.http_status


@dataclass(frozen=True)
class Frame:
    channel: int
    payload: bytes


def parse_frame(data: bytes) -> Frame:
    if not data:
        raise InvalidInput("invalid_frame", "an empty message: every message starts with its channel byte")
    if len(data) > MAX_FRAME_BYTES + 1:
        raise InvalidInput("frame_too_large", f"a message is at most {MAX_FRAME_BYTES >> 10} KiB; send in parts")
    channel = data[0]
    if channel not in (STDIN, RESIZE, CLOSE):
        raise InvalidInput("invalid_frame", f"channel {channel} is not one a client sends (0, 4 or 255)")
    return Frame(channel, data[1:])


def parse_size(cols: object, rows: object) -> tuple[int, int]:
    """A terminal size: whole numbers of columns and rows between 1 and 1000."""
    try:
        c, r = int(str(cols)), int(str(rows))
    except ValueError:
        c = r = 0
    if not (1 <= c <= 1000 and 1 <= r <= 1000):
        raise InvalidInput("invalid_size", "a terminal size is 1–1000 columns by 1–1000 rows")
    return c, r


def parse_resize(payload: bytes) -> tuple[int, int]:
    try:
        body = json.loads(payload)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise InvalidInput("invalid_size", 'a resize is JSON: {"cols": C, "rows": R}')
    return parse_size(body.get("cols"), body.get("rows"))


def check_command(command: list[str]) -> list[str]:
    """A command to start: at most 64 KiB in all, no NUL byte (no argument could carry one)."""
    if any("\x00" in arg for arg in command):
        raise InvalidInput("invalid_command", "a command cannot contain a NUL byte")
    if sum(len(arg.encode()) + 1 for arg in command) > MAX_COMMAND_BYTES:
        raise InvalidInput("invalid_command", "a command is at most 64 KiB in all; put long scripts in a file")
    if command and not command[0]:
        raise InvalidInput("invalid_command", "the command's first word (the program) is empty")
    return command
