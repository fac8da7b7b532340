"""Typed errors with stable codes. The API maps them to HTTP in one place (danlu.api.errors).

Every message tells the user what to do next. Another tenant's object is always NotFound.
"""

from __future__ import annotations

from typing import Any, ClassVar


class DanluError(Exception):
    http_status: ClassVar[int] = 400
    default_code: ClassVar[str] = "bad_request"

    def __init__(self, code: str | None, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code or self.default_code
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            body["details"] = self.details
        return body


class InvalidInput(DanluError):
    http_status = 422
    default_code = "invalid_input"


class RangeNotSatisfiable(DanluError):
    http_status = 416
    default_code = "range_not_satisfiable"


class Unauthorized(DanluError):
    http_status = 401
    default_code = "unauthorized"


class Forbidden(DanluError):
    http_status = 403
    default_code = "forbidden"


class NotFound(DanluError):
    http_status = 404
    default_code = "not_found"


class Conflict(DanluError):
    http_status = 409
    default_code = "conflict"


class InsufficientFunds(DanluError):
    http_status = 402
    default_code = "insufficient_funds"


class NoCapacity(DanluError):
    http_status = 409
    default_code = "no_capacity"


class QuotaExceeded(DanluError):
    http_status = 429
    default_code = "quota_exceeded"


class TooManyAttempts(DanluError):
    """Too many wrong passwords or tokens: ``details["retry_after_s"]`` is how long to wait (the
    API and the console send it as ``Retry-After``)."""

    http_status = 429
    default_code = "too_many_attempts"
