"""The server's logs (issue 28): ``--log-format text|json``, a request id on every line a request
causes, and an access log.

* **Request ids.** Every HTTP request gets one: the caller's ``X-Request-Id`` when it is 1–64 of
  ``[A-Za-z0-9._-]`` (a proxy's or a client's, so one id follows a request across systems), else a
  new random one; the response carries it back in ``X-Request-Id``. It is held in a context
  variable, so every log line the request causes, in the event loop or the thread pool, names it.
* **The access log** (logger ``danlu.access``, INFO; ``--no-access-log`` turns it off): one line per
  HTTP request when its response ends — method, route template, path **without its query string**
  (a port link's token travels there), status, milliseconds, the client's address, the request id.
  WebSockets (shells, proxied sockets) are not requests and are not logged per message.
* **JSON** (``--log-format json``): one object per line, ``time`` (UTC, ISO 8601 with milliseconds),
  ``level``, ``logger``, ``message``, ``request_id`` when there is one, the access fields, and
  ``exception`` (its traceback) when one is logged: what journald, Loki or Elasticsearch ingest.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from danlu.core.errors import InvalidInput

REQUEST_ID: ContextVar[str | None] = ContextVar("danlu_request_id", default=None)
_GOOD_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
ACCESS = logging.getLogger("danlu.access")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s%(request_suffix)s"


def request_id(offered: str | None) -> str:
    """The caller's id when it is a safe token, else a new one (16 hex digits)."""
    return offered if offered is not None and _GOOD_ID.match(offered) else secrets.token_hex(8)


class RequestIdFilter(logging.Filter):
    """Puts the current request's id on every record (``request_id``; ``request_suffix`` for text)."""

    def filter(self, record: logging.LogRecord) -> bool:
        rid = REQUEST_ID.get()
        record.request_id = rid
        record.request_suffix = f" [request {rid}]" if rid else ""
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        rid = getattr(record, "request_id", None)
        if rid:
            out["request_id"] = rid
        access = getattr(record, "access", None)
        if isinstance(access, dict):
            out.update(access)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def configure(fmt: str = "text", *, access_log: bool = True) -> None:
    """The root logger's one handler (stderr), in ``fmt``: text or json."""
    if fmt not in ("text", "json"):
        raise InvalidInput("invalid_log_format", f"--log-format is text or json, not {fmt!r}")
    handler = logging.StreamHandler()
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    ACCESS.disabled = not access_log


def access(method: str, route: str, path: str, status: int, seconds: float, client: str | None, rid: str) -> None:
    if ACCESS.disabled or not ACCESS.isEnabledFor(logging.INFO):
        return
    ms = round(seconds * 1000, 1)
    fields = {"method": method, "route": route, "path": path, "status": status, "duration_ms": ms, "client": client}
    ACCESS.info("%s %s %s %.1f ms %s", method, path, status, ms, client or "-", extra={"access": fields})
