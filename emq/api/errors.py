"""The one mapping from EMQ's error hierarchy to HTTP, and the JSON error body.

Every error response is ``{"error": {"code", "message", "field"?}}``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from emq.core import errors

log = logging.getLogger(__name__)

# Most specific first: the first class that matches decides the status.
STATUS: tuple[tuple[type[errors.EmqError], int], ...] = (
    (errors.MalformedRequest, 400),
    (errors.PayloadTooLarge, 413),
    (errors.InvalidInput, 422),
    (errors.RequestTimeout, 408),
    (errors.Unauthorized, 401),
    (errors.Forbidden, 403),
    (errors.NotFound, 404),
    (errors.AlreadyExists, 409),
    (errors.ConfigConflict, 409),
    (errors.BacklogFull, 429),
    (errors.BackendUnavailable, 503),
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def status_of(error: errors.EmqError) -> int:
    for cls, status in STATUS:
        if isinstance(error, cls):
            return status
    return 500


def error_response(status: int, code: str, message: str, field: str | None = None) -> web.Response:
    body: dict[str, str] = {"code": code, "message": message}
    if field is not None:
        body["field"] = field
    return web.json_response({"error": body}, status=status)


def _from_emq(e: errors.EmqError) -> web.Response:
    status = status_of(e)
    field = e.field if isinstance(e, errors.InvalidInput) else None
    response = error_response(status, e.code, e.message, field)
    if isinstance(e, errors.BacklogFull):
        response.headers["Retry-After"] = str(max(1, round(e.retry_after_s)))
    if isinstance(e, errors.Unauthorized):
        response.headers["WWW-Authenticate"] = 'Bearer realm="emq"'
    if isinstance(e, errors.RequestTimeout):
        response.force_close()  # the rest of the body is not worth waiting for
    return response


_HTTP_CODES = {400: "malformed", 404: "not_found", 405: "method_not_allowed", 413: "too_large"}


class _UnavailableLog:
    """One warning line per ``every_s`` while a backend is down, not a traceback per request
    (an outage under load would write thousands); the 503s in between are counted."""

    def __init__(self, every_s: float = 5.0) -> None:
        self._every = every_s
        self._next = 0.0
        self._quiet = 0

    def note(self, request: web.Request, error: errors.BackendUnavailable) -> None:
        now = time.monotonic()
        if now < self._next:
            self._quiet += 1
            return
        more = f" ({self._quiet} more 503s since the last report)" if self._quiet else ""
        log.warning("503 on %s %s: %s%s", request.method, request.path, error.message, more)
        self._next, self._quiet = now + self._every, 0


_unavailable = _UnavailableLog()


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn every failure into the JSON error body, including aiohttp's own (404, 405, 413)."""
    try:
        return await handler(request)
    except errors.BackendUnavailable as e:
        _unavailable.note(request, e)
        return _from_emq(e)
    except errors.EmqError as e:
        if status_of(e) >= 500:
            log.exception("unexpected EMQ error on %s %s", request.method, request.path)
        return _from_emq(e)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        code = _HTTP_CODES.get(e.status, "http_error")
        message = e.reason if e.status != 413 else "request body is too large"
        response = error_response(e.status, code, message)
        if "Allow" in e.headers:  # a 405 says which methods the resource has (RFC 9110)
            response.headers["Allow"] = e.headers["Allow"]
        return response
    except json.JSONDecodeError as e:
        return error_response(400, "malformed", f"request body is not valid JSON: {e}")
    except UnicodeEncodeError:
        # Text with a lone surrogate ("\ud800" in JSON) that a field check did not name: it
        # cannot be stored or sent, so it is the client's error, not ours.
        return error_response(400, "malformed", "request contains text that is not valid UTF-8")
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "internal", "internal error")
