"""Connection-level guards of ``emq api`` against hostile or broken clients.

aiohttp's server bounds an idle keep-alive connection (``keepalive_timeout``) but has no timeout
for a request's headers, no limit on connections, and answers its own parse errors (a request
line over 8190 bytes, a malformed request) in ``text/plain``. This module adds, per connection:

* **max connections**: a connection beyond ``max_connections`` open at once is answered
  ``503`` (the JSON error shape, ``Connection: close``) and closed at once, before it can hold
  a descriptor or a task for long;
* **header timeout**: a request's line and headers must arrive within ``header_timeout_s`` of
  its first byte (of the connection's opening, for its first request), else the client gets
  ``408`` and the connection is closed (slowloris). An idle keep-alive connection between
  requests is aiohttp's ``keepalive_timeout``. The body has its own timeout where it is read
  (:mod:`emq.api.app`);
* **JSON errors**: aiohttp's own error responses use ``{"error": {"code", "message"}}``.

States of a connection's header timer::

    opened ---------------------------+
    idle --first byte of a request----+--> ARMED --its handler starts--> idle
                                             | header_timeout_s
                                             v
                                          408, closed

The hooks used (``Server.__call__``, ``RequestHandler.data_received``, ``_handle_request``,
``handle_error``) are aiohttp's protocol factory and handler; ``tests/api/test_hostile.py``
pins their behaviour on a real server.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from emq.api.errors import error_response

log = logging.getLogger(__name__)

MAX_ERROR_DETAIL = 200  # characters of a parser's message echoed back


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int = 1000
    header_timeout_s: float = 10.0


def raw_error(status: int, reason: str, code: str, message: str) -> bytes:
    """A complete HTTP/1.1 error response with the JSON error body, closing the connection
    (written straight to a transport where no request object exists)."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Content-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


TOO_MANY = raw_error(503, "Service Unavailable", "unavailable", "too many connections; retry")
HEADERS_TOO_SLOW = raw_error(
    408, "Request Timeout", "timeout", "request headers were not received in time"
)


class GuardedRequestHandler(RequestHandler):
    """aiohttp's per-connection protocol, with the limits above."""

    def __init__(self, manager: GuardedServer, *, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._limits = limits
        self._guard = manager
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self._guard.open > self._limits.max_connections:
            self._refuse(TOO_MANY)
        else:  # a new connection owes its first request at once, not after an idle wait
            self._arm()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # A request's first byte arms the timer; its handler starting disarms it. Bytes that
        # arrive while a handler runs are its body (timed where it is read).
        if self._header_timer is None and not self._request_in_progress and data:
            self._arm()
        super().data_received(data)

    async def _handle_request(self, request: BaseRequest, *args: Any) -> Any:
        self._disarm()
        return await super()._handle_request(request, *args)

    def _arm(self) -> None:
        self._header_timer = self._loop.call_later(
            self._limits.header_timeout_s, self._headers_overdue
        )

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_overdue(self) -> None:
        self._header_timer = None
        if not self._request_in_progress:
            self._refuse(HEADERS_TOO_SLOW)

    def _refuse(self, response: bytes) -> None:
        if self.transport is not None and not self._force_close:
            self.transport.write(response)
        self.force_close()

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """aiohttp's own errors (unparsable requests, an escaped exception) as JSON."""
        if status >= 500:
            self.log_exception("error handling a request from %s", request.remote, exc_info=exc)
        else:  # a client's mistake (or attack): not worth a traceback in the log
            self.log_debug("bad request from %s: %s", request.remote, message)
        if request.writer.output_size > 0:  # a response is half sent: only closing is left
            raise ConnectionError("response already started; cannot send an error")
        if status == 504:  # a handler timed out
            response = error_response(status, "timeout", "the request timed out")
        elif status >= 500:
            response = error_response(status, "internal", "internal error")
        else:
            detail = (message or "bad request")[:MAX_ERROR_DETAIL]
            response = error_response(status, "malformed", f"malformed HTTP request: {detail}")
        response.force_close()
        return response


class GuardedServer(web.Server):
    """The protocol factory: makes :class:`GuardedRequestHandler` s and counts them."""

    def __init__(self, *args: Any, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.open = 0  # connections open now (aiohttp's own list lags behind their tasks)

    def __call__(self) -> RequestHandler:
        return GuardedRequestHandler(self, loop=self._loop, limits=self.limits, **self._kwargs)

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        self.open += 1
        super().connection_made(handler, transport)

    def connection_lost(self, handler: RequestHandler, exc: BaseException | None = None) -> None:
        self.open -= 1
        super().connection_lost(handler, exc)


class GuardedRunner(web.AppRunner):
    """An ``AppRunner`` whose server is a :class:`GuardedServer`."""

    def __init__(self, app: web.Application, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.limits = limits

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()  # runs the app's startup, builds aiohttp's server
        return GuardedServer(
            plain.request_handler,
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
            loop=plain._loop,
            limits=self.limits,
            **plain._kwargs,
        )
