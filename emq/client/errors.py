"""The client's side of the error contract: from an error response to its EMQ error class.

One table (:data:`ERRORS`, the inverse of the API's ``emq.api.errors.STATUS``) turns each
documented status into its :mod:`emq.core.errors` class, so callers catch ``NotFound`` or
``BacklogFull`` whether they run next to the API or across the network. Two errors are the
client's own: :class:`ApiError` (a status the API does not document) and :class:`JobsRejected`
(what :meth:`emq.client.Producer.flush` raises for jobs the API did not accept).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from emq.core import errors

# The one mapping from an error response's status to its EMQ error class: the inverse of the
# API's ``emq.api.errors.STATUS``.
ERRORS: dict[int, type[errors.EmqError]] = {
    400: errors.MalformedRequest,
    401: errors.Unauthorized,
    403: errors.Forbidden,
    404: errors.NotFound,
    409: errors.AlreadyExists,
    413: errors.PayloadTooLarge,
    422: errors.InvalidInput,
    429: errors.BacklogFull,
    503: errors.BackendUnavailable,
}


class ApiError(errors.EmqError):
    """An error status the API does not document (500, 405, a proxy's 502...)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(frozen=True, slots=True)
class Rejected:
    """A job the API did not accept, and why (the error it answered, or the last one before
    the retry budget ran out)."""

    job: Mapping[str, Any]
    error: BaseException


class JobsRejected(errors.EmqError):
    """Jobs given to :meth:`~emq.client.Producer.send` that the API did not accept.

    Raised by ``flush()``, ``aclose()`` and the end of ``async with``; ``rejected`` lists each
    job with its error, in the order they were answered. Every other job was accepted.
    """

    code = "rejected"

    def __init__(self, rejected: Sequence[Rejected]) -> None:
        first = rejected[0]
        more = f" (and {len(rejected) - 1} more)" if len(rejected) > 1 else ""
        super().__init__(
            f"{len(rejected)} jobs not accepted; the first: {describe(first.error)}{more}"
        )
        self.rejected = list(rejected)


def error_from_response(status: int, body: object, retry_after: str | None) -> errors.EmqError:
    """The EMQ error for an error response (``body`` is its decoded JSON, or its text)."""
    code, message, field = _error_parts(status, body)
    cls = ERRORS.get(status)
    if cls is None:
        return ApiError(status, code, message)
    if issubclass(cls, errors.InvalidInput):
        return cls(field, message)
    if issubclass(cls, errors.BacklogFull):
        return cls(message, _retry_after_s(retry_after))
    return cls(message)


def _error_parts(status: int, body: object) -> tuple[str, str, str | None]:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        field = error.get("field")
        return (
            str(error.get("code", "")),
            error["message"],
            field if isinstance(field, str) else None,
        )
    if isinstance(body, dict):  # /healthz answers 503 with its checks, not an error object
        detail = ", ".join(f"{k} {v}" for k, v in body.items() if k != "status")
        return "unavailable", detail or f"HTTP {status}", None
    text = " ".join(str(body).split())[:200]
    return "http_error", text or f"HTTP {status}", None


def _retry_after_s(header: str | None) -> float:
    """Retry-After in seconds (only the delta-seconds form; the API never sends a date)."""
    try:
        return max(0.0, float(header)) if header is not None else 1.0
    except ValueError:
        return 1.0


def describe(error: BaseException) -> str:
    """One line for humans: ``code: message (field: X)``."""
    if not isinstance(error, errors.EmqError):
        return f"{type(error).__name__}: {error}"
    text = f"{error.code}: {error.message}"
    field = getattr(error, "field", None)
    return f"{text} (field: {field})" if field else text
