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
    idle --first byte of a request----+--> ARMED --its handler starts--> HANDLING --ends--> idle
                                             | header_timeout_s
                                             v
                                          408, closed

Only aiohttp's public surface is used, so that an aiohttp upgrade cannot silently disarm a
guard: :class:`web.AppRunner` runs the app (startup, shutdown, cleanup) and its public
``server`` (:class:`web.Server`) stays the manager of every connection; our own protocol
factory (:class:`ConnectionGuard`, on our own listening socket: :meth:`GuardedRunner.listen`)
wraps each connection's :class:`web.RequestHandler` (built with its documented keyword
arguments) in a :class:`GuardedConnection`, which counts connections and times headers from
the bytes it passes on; an app middleware (outermost) marks a request's handler starting and
ending; the JSON errors override the handler's public ``handle_error``.
``tests/api/test_hostile.py`` pins the behaviour on a real server, and
``tests/test_library_privates.py`` keeps private attributes of libraries out of the code.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web
from aiohttp.web_request import BaseRequest

from emq.api.errors import Handler, error_response

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


class JsonErrorHandler(web.RequestHandler):
    """aiohttp's per-connection HTTP handler, answering its own errors in the JSON shape."""

    __slots__ = ()  # no state of ours: nothing can shadow one of aiohttp's attributes

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


class GuardedConnection(asyncio.Protocol):
    """One client connection: passes everything to aiohttp's handler, within the limits.

    A connection over the limit gets no handler at all: the 503 is written and it is closed.
    """

    __slots__ = ("_guard", "_handler", "_timer", "_transport", "handling")

    def __init__(self, guard: ConnectionGuard) -> None:
        self._guard = guard
        self._handler: web.RequestHandler | None = None
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.handling = False  # a request's handler is running (its body is timed there)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        guard = self._guard
        guard.open += 1
        if guard.open > guard.limits.max_connections:
            self._refuse(TOO_MANY)
            return
        self._handler = handler = guard.make_handler()
        guard.connections[self._transport] = self
        handler.connection_made(transport)
        self._arm()  # a new connection owes its first request at once, not after an idle wait

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        self._guard.open -= 1
        if self._handler is not None and self._transport is not None:
            self._guard.connections.pop(self._transport, None)
            self._handler.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # A request's first byte arms the timer; its handler starting disarms it. Bytes that
        # arrive while a handler runs are its body (timed where it is read).
        if self._timer is None and not self.handling and data:
            self._arm()
        if self._handler is not None:
            self._handler.data_received(data)

    def eof_received(self) -> None:
        # aiohttp's handler keeps nothing open after the client's EOF: asyncio closes the
        # transport once this returns a false value
        if self._handler is not None:
            self._handler.eof_received()

    def pause_writing(self) -> None:
        if self._handler is not None:
            self._handler.pause_writing()

    def resume_writing(self) -> None:
        if self._handler is not None:
            self._handler.resume_writing()

    def handler_started(self) -> None:
        self._disarm()
        self.handling = True

    def _arm(self) -> None:
        self._timer = self._guard.loop.call_later(
            self._guard.limits.header_timeout_s, self._headers_overdue
        )

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _headers_overdue(self) -> None:
        self._timer = None
        if not self.handling:
            self._refuse(HEADERS_TOO_SLOW)

    def _refuse(self, response: bytes) -> None:
        transport = self._transport
        assert transport is not None
        if not transport.is_closing():  # aiohttp may already be closing it after an answer
            transport.write(response)
        if self._handler is not None:
            self._handler.force_close()  # ends its request loop, closes the transport
        transport.close()


class ConnectionGuard:
    """The protocol factory of ``emq api``: a :class:`GuardedConnection` per connection, each
    wrapping a :class:`JsonErrorHandler` managed by aiohttp's server (:meth:`bind`, once the
    app has started); and the middleware that tells a connection its request's handler runs."""

    loop: asyncio.AbstractEventLoop  # set by bind()

    def __init__(self, limits: ConnectionLimits, handler_kwargs: dict[str, Any]) -> None:
        self.limits = limits
        self.open = 0  # connections open now, refused ones included until they are closed
        self.connections: dict[asyncio.Transport, GuardedConnection] = {}  # those with a handler
        self._handler_kwargs = handler_kwargs
        self._server: web.Server | None = None

    def bind(self, server: web.Server, loop: asyncio.AbstractEventLoop) -> None:
        """Manage connections with ``server`` (aiohttp's, which shuts them down at cleanup)."""
        self._server = server
        self.loop = loop

    @property
    def bound(self) -> bool:
        return self._server is not None

    def __call__(self) -> GuardedConnection:
        return GuardedConnection(self)

    def make_handler(self) -> web.RequestHandler:
        assert self._server is not None  # GuardedRunner.listen() checks bound
        return JsonErrorHandler(self._server, loop=self.loop, **self._handler_kwargs)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        connection = self.connections.get(request.transport)  # type: ignore[arg-type]
        if connection is None:  # not served by a guarded connection (or closed meanwhile)
            return await handler(request)
        connection.handler_started()
        try:
            return await handler(request)
        finally:
            connection.handling = False


class GuardedRunner:
    """Runs an app like aiohttp's ``AppRunner`` + ``TCPSite``, with the connection guards.

    ``setup()``, then ``listen()`` (any number of addresses); ``stop_listening()`` to refuse new
    connections while the open ones drain; ``cleanup()`` closes everything. The guard's
    middleware is added (outermost) at ``setup()``, after any the caller added.
    """

    def __init__(
        self,
        app: web.Application,
        limits: ConnectionLimits,
        *,
        shutdown_timeout: float = 60.0,
        **handler_kwargs: Any,
    ) -> None:
        """``handler_kwargs``: aiohttp's documented ``RequestHandler`` keyword arguments
        (``keepalive_timeout``, ``lingering_time``, ``access_log``, ...)."""
        self.app = app
        self.guard = ConnectionGuard(limits, handler_kwargs)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=shutdown_timeout)
        self._listeners: list[asyncio.Server] = []

    async def setup(self) -> None:
        """Start the app (its startup hooks run) and bind the protocol factory to its server."""
        self.app.middlewares.insert(0, self.guard.middleware)  # frozen by the runner's setup
        await self._runner.setup()
        server = self._runner.server
        assert server is not None  # set by setup()
        self.guard.bind(server, asyncio.get_running_loop())

    async def listen(
        self,
        host: str,
        port: int,
        *,
        backlog: int = 128,
        reuse_address: bool | None = None,
        reuse_port: bool | None = None,
    ) -> int:
        """Accept connections on ``host:port``; the port bound (``port`` 0: a free one).
        ``reuse_port``: SO_REUSEPORT, several processes listening on one port."""
        if not self.guard.bound:
            raise RuntimeError("call setup() before listen()")
        loop = asyncio.get_running_loop()
        listener = await loop.create_server(
            self.guard,
            host,
            port,
            backlog=backlog,
            reuse_address=reuse_address,
            reuse_port=reuse_port,
        )
        self._listeners.append(listener)
        return int(listener.sockets[0].getsockname()[1])

    def stop_listening(self) -> None:
        """Accept no more connections; the open ones carry on (as ``TCPSite.stop()``)."""
        for listener in self._listeners:
            listener.close()
        self._listeners.clear()

    async def cleanup(self) -> None:
        """Stop listening, close the connections (up to ``shutdown_timeout`` for requests in
        progress) and run the app's shutdown and cleanup hooks."""
        self.stop_listening()
        await self._runner.cleanup()
