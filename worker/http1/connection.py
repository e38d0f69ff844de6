"""One HTTP/1.1 keep-alive connection of the lean client: an ``asyncio.Protocol`` that sends a
request and parses its response with ``httptools`` (llhttp, the parser of Node.js).

States::

    IDLE (in its destination's idle list) --send--> BUSY
    BUSY --response complete, keep-alive--> IDLE (put back in the idle list at once, from
                                                  data_received: before the caller resumes)
    BUSY --answer known, connection unusable: ``Connection: close``, a body past
           max_response_bytes, a HEAD answer, 101, a body read to the close--> CLOSED
    BUSY --garbage, reset, close mid-response, total timeout, caller cancelled--> CLOSED
           (the caller's future fails)
    IDLE --the peer closes, sends bytes out of turn--> CLOSED (left in the idle list, skipped
           and dropped when popped or swept)

The answer is the status and ``Retry-After`` (known at the end of the headers); the body is
counted, never kept, and only read to its end so that the connection can carry the next
request. A body longer than ``max_body`` ends the request with its status and closes the
connection (as the aiohttp executor reads at most ``max_response_bytes``). 1xx answers other
than 101 are skipped. A response without ``Content-Length`` or chunked framing ends when the
peer closes (RFC 9112 6.3): the status stands.

One future per request, no task, no timer (:mod:`worker.http1.deadlines`): the caller awaits
the future once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

import httptools

# status, raw Retry-After, and for the attempt log: raw Content-Type, raw Content-Length, the
# body's first bytes (when asked for)
Answer = tuple[int, bytes | None, bytes | None, bytes | None, bytes | None]


class ConnectionLost(ConnectionError):
    """The peer closed or reset the connection before its answer was complete."""


class BadResponse(ConnectionError):
    """The peer's bytes are not an HTTP/1.1 response (or one we did not ask for)."""


class Connection(asyncio.Protocol):
    """See the module docstring; made by :class:`worker.http1.pool.Pool`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        key: tuple[str, str, int],
        release: Callable[[Connection], None],
        lost: Callable[[Connection], None],
        max_body: int,
    ) -> None:
        self._loop = loop
        self.key = key  # its destination
        self._release = release  # back to the destination's idle connections
        self._lost = lost
        self._max_body = max_body
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future[Answer] | None = None
        self.sent = 0  # requests sent: tells a deadline of an earlier request from the current
        self._head = False
        self._status = 0
        self._retry_after: bytes | None = None
        self._framed = False  # Content-Length or chunked: the body ends itself (no close needed)
        self._headers_done = False
        self._informational = False
        self._body = 0
        self._content_type: bytes | None = None
        self._content_length: bytes | None = None
        self._keep = 0  # body bytes to keep for the attempt log (0: none)
        self._kept: bytes | None = None

    # ------------------------------------------------------------------ the caller's side

    @property
    def busy(self) -> bool:
        """A request is waiting for its answer."""
        return self._waiter is not None

    def send(self, data: bytes, head: bool, keep: int = 0) -> asyncio.Future[Answer]:
        """Write one request; the future answers (status, Retry-After, Content-Type,
        Content-Length, the body's first ``keep`` bytes) or fails. Its total timeout is the
        caller's (:mod:`worker.http1.deadlines`: :meth:`expire`)."""
        waiter = self._waiter = self._loop.create_future()
        self.sent += 1
        self._head = head
        self._status = self._body = 0
        self._retry_after = self._content_type = self._content_length = None
        self._keep = keep
        self._kept = b"" if keep else None
        self._framed = self._headers_done = self._informational = False
        assert self.transport is not None
        self.transport.write(data)
        return waiter

    def expire(self, sent: int) -> None:
        """Request number ``sent`` ran past its total timeout: if it is still waiting, fail it
        and drop the connection."""
        if self.sent == sent and self._waiter is not None:
            self._fail(TimeoutError())

    def abort(self) -> None:
        """Drop the connection at once; a request still waiting fails (the executor closes)."""
        self._fail(ConnectionLost("connection closed by the client"))

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._lost(self)
        if self._waiter is None:
            return
        if self._headers_done and not self._framed:
            self._finish(reuse=False)  # a body delimited by the close (RFC 9112 6.3)
        else:
            reason = f": {exc}" if exc else ""
            self._fail(ConnectionLost(f"connection closed before the answer was complete{reason}"))

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # bytes nobody asked for: the connection's state is unknown
            self.abort()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._waiter is not None and self._headers_done:
                self._finish(reuse=False)  # 101: an answer, but not a connection for us
            else:
                self._fail(BadResponse("an upgrade nobody asked for"))
        except httptools.HttpParserError as e:
            if self._waiter is not None:
                self._fail(BadResponse(f"not an HTTP/1.1 response: {e}"))
            else:
                self.abort()  # bytes past a complete answer

    def eof_received(self) -> bool | None:
        return None  # close: connection_lost decides what the answer was

    # ------------------------------------------------------------------ httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        n = len(name)
        if n == 11:
            if name.lower() == b"retry-after":
                self._retry_after = value
        elif n == 12:
            if name.lower() == b"content-type":
                self._content_type = value
        elif n == 14 and name.lower() == b"content-length":
            self._framed = True
            self._content_length = value
        elif n == 17 and name.lower() == b"transfer-encoding":
            # chunked last: the body ends itself; any other coding: read until the close
            self._framed = value.rstrip().lower().endswith(b"chunked")

    def on_headers_complete(self) -> None:
        if self._waiter is None:  # a second answer in one read: unsolicited
            self.abort()
            return
        status = self._parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self._informational = True  # 100, 102, 103: the answer follows
            self._retry_after, self._framed = None, False
            self._content_type = self._content_length = None
            return
        self._status = status
        self._headers_done = True
        if self._head or status == 101:
            # A HEAD answer announces a body it does not send; after a 101 the connection
            # speaks another protocol. Either way the answer is all we get from it.
            self._finish(reuse=False)

    def on_body(self, body: bytes) -> None:
        self._body += len(body)
        kept = self._kept
        if kept is not None and len(kept) < self._keep:
            self._kept = kept + body[: self._keep - len(kept)]
        if self._body > self._max_body and self._waiter is not None:
            self._finish(reuse=False)  # more than we read: the rest is not worth the wire

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        if self._waiter is not None:
            self._finish(reuse=self._parser.should_keep_alive())

    # ------------------------------------------------------------------ endings

    def _finish(self, reuse: bool) -> None:
        waiter, self._waiter = self._waiter, None
        assert waiter is not None
        if not waiter.done():
            status, after, ctype, clen = (
                self._status,
                self._retry_after,
                self._content_type,
                self._content_length,
            )
            waiter.set_result((status, after, ctype, clen, self._kept))
        if reuse and not self.closed:
            self.idle_since = self._loop.time()
            self._release(self)
        else:
            self._close()

    def _fail(self, exc: BaseException) -> None:
        waiter, self._waiter = self._waiter, None
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        if waiter is not None and not waiter.done():  # (not when its caller was cancelled)
            waiter.set_exception(exc)

    def _close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()
