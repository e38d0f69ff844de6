"""One HTTP/1.1 keep-alive connection of the lean client: an ``asyncio.Protocol`` that sends a
request and parses its response with ``httptools`` (llhttp, the parser of Node.js, strict:
a bare LF, whitespace before a colon, a NUL, a bad or repeated ``Content-Length``, a bad chunk
size, ``Transfer-Encoding`` with ``Content-Length``, a status line not ``HTTP/``... all fail).
The reason phrase is ignored, whatever it holds (RFC 9112 4: a client should ignore it).

States::

    IDLE (in its destination's idle list) --send--> BUSY
    BUSY --response complete, keep-alive--> IDLE (put back in the idle list at once, from
                                                  data_received: before the caller resumes)
    BUSY --answer known, connection unusable: ``Connection: close``, a body past
           max_response_bytes, a HEAD answer, 101, a body read to the close--> CLOSED
    BUSY --garbage, a head past its limits, reset, close mid-response, total timeout, caller
           cancelled--> CLOSED (the caller's future fails)
    BUSY --response complete, more bytes after it in the same read--> CLOSED (the answer
           stands; the bytes are never parsed as the next answer)
    IDLE --the peer closes, sends any byte out of turn--> CLOSED (left in the idle list,
           skipped and dropped when popped or swept)

An answer counts only if it is the complete response to its request on a connection that
carried nothing else (ARCHITECTURE.md invariant 9, docs/design/push-client.md). A byte after
a complete response is the start of no answer of ours: the connection is closed the moment it
is seen (``on_message_begin`` of a second message in the same read; ``data_received`` while
idle). llhttp itself skips empty lines (CR, LF) between two messages of one read: those never
begin an answer, and the connection is kept.

The head is bounded (:mod:`worker.protocol_errors`): its bytes (counted per read, before the
parser copies them: an endless header ends at the limit, not after gigabytes), each field's
bytes, the number of fields. The answer is the status and ``Retry-After`` (known at the end of
the headers); the body is counted, never kept, and only read to its end so that the connection
can carry the next request. A body longer than ``max_body`` ends the request with its status
and closes the connection (as the aiohttp executor reads at most ``max_response_bytes``). 1xx
answers other than 101 are skipped (their heads count against the head's limit). A response
without ``Content-Length`` or chunked framing ends when the peer closes (RFC 9112 6.3): the
status stands.

One future per request, no task, no timer (:mod:`worker.http1.deadlines`): the caller awaits
the future once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import NamedTuple, cast

import httptools

from worker.protocol_errors import (
    FIELD_TOO_LARGE,
    HEAD_TOO_LARGE,
    MALFORMED,
    STRAY,
    TOO_MANY_HEADERS,
    UPGRADE,
    message,
)

# status, raw Retry-After, and for the attempt log: raw Content-Type, raw Content-Length, the
# body's first bytes (when asked for)
Answer = tuple[int, bytes | None, bytes | None, bytes | None, bytes | None]


class ConnectionLost(ConnectionError):
    """The peer closed or reset the connection before its answer was complete."""


class BadResponse(ConnectionError):
    """The peer's bytes are not an HTTP/1.1 response we may count (``reason``: one of
    :mod:`worker.protocol_errors`)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(message(reason, detail))
        self.reason = reason


class _Refused(Exception):
    """Raised from a parser callback to stop parsing: the connection's bytes broke a rule."""


class Limits(NamedTuple):
    """A response head's limits (the worker's ``max_response_head_bytes``,
    ``max_response_field_bytes``, ``max_response_headers``)."""

    head_bytes: int = 64 * 1024
    field_bytes: int = 8190
    fields: int = 128


DEFAULT_LIMITS = Limits()


def unreported(endpoint: str, reason: str) -> None:
    """A connection's default for reporting its protocol errors: nowhere."""


class Connection(asyncio.Protocol):
    """See the module docstring; made by :class:`worker.http1.pool.Pool`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        key: tuple[str, str, int],
        release: Callable[[Connection], None],
        lost: Callable[[Connection], None],
        max_body: int,
        max_head: int = 64 * 1024,
        max_field: int = 8190,
        max_fields: int = 128,
        report: Callable[[str, str], None] = unreported,
    ) -> None:
        self._loop = loop
        self.key = key  # its destination
        self._release = release  # back to the destination's idle connections
        self._lost = lost
        self._max_body = max_body
        self._max_head = max_head
        self._max_field = max_field
        self._max_fields = max_fields
        # A head of at most this many bytes can break neither the field count nor the field
        # size (a field line is 4 bytes at least): its fields are not looked at one by one.
        self._check_from = min(max_field, 4 * max_fields)
        self._report = report  # (endpoint, reason) of a protocol error
        self.endpoint = ""  # whose request it carries (or last carried): the errors' topic
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
        self._head_bytes = 0  # bytes read since the request, until its head was complete
        self._fields = 0
        self._refusal = ""  # the rule a parser callback found broken (_Refused)
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
        self._status = self._body = self._head_bytes = self._fields = 0
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
        if self._headers_done and not self._framed and exc is None:
            self._finish(reuse=False)  # a body delimited by the close (RFC 9112 6.3; a reset
            # ends no body: the answer is incomplete)
        else:
            reason = f": {exc}" if exc else ""
            self._fail(ConnectionLost(f"connection closed before the answer was complete{reason}"))

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # bytes nobody asked for: never an answer of ours
            self._stray()
            return
        if not self._headers_done:
            self._head_bytes += len(data)  # (a head's bytes, until it is complete)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._waiter is not None and self._headers_done:
                self._finish(reuse=False)  # 101: an answer, but not a connection for us
            else:
                self._fail(BadResponse(UPGRADE))
        except httptools.HttpParserCallbackError:
            if self._refusal == STRAY:
                self._stray()  # the answer before stands
            else:
                self._refuse(self._refusal or MALFORMED)
        except httptools.HttpParserError as e:
            if self._waiter is not None:
                self._refuse(MALFORMED, str(e).lower())
            else:
                self._stray()  # bytes past a complete answer
        else:
            if not self._headers_done:  # (a head in pieces: all of this read was head)
                if self._head_bytes > self._max_head:
                    self._refuse(HEAD_TOO_LARGE)
                elif self._head_bytes <= self._check_from:
                    # its fields were not counted one by one: count its lines, less the
                    # status line's in the head's first read (to within one: a field whose
                    # line ends here is reported in the next read)
                    self._fields += data.count(b"\n") - (self._head_bytes == len(data))

    def eof_received(self) -> bool | None:
        return None  # close: connection_lost decides what the answer was

    # ------------------------------------------------------------------ httptools callbacks

    def on_message_begin(self) -> None:
        if self._waiter is None:  # a second message after a complete one, in the same read
            self._refusal = STRAY
            raise _Refused

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._head_bytes > self._check_from:  # (one compare, unless the head is long)
            self._check_field(name, value)
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

    def _check_field(self, name: bytes, value: bytes) -> None:
        self._fields += 1
        if self._fields > self._max_fields:
            self._refusal = TOO_MANY_HEADERS
            raise _Refused
        if max(len(name), len(value)) > self._max_field:
            self._refusal = FIELD_TOO_LARGE
            raise _Refused

    def on_headers_complete(self) -> None:
        if self._waiter is None:  # (a second message is refused when it begins)
            self._stray()
            return
        status = self._parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self._informational = True  # 100, 102, 103: the answer follows
            self._retry_after, self._framed, self._fields = None, False, 0
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

    def _refuse(self, reason: str, detail: str = "") -> None:
        """The response broke a rule (:mod:`worker.protocol_errors`): fail the request."""
        if reason == HEAD_TOO_LARGE:
            detail = f"over {self._max_head} bytes"
        elif reason == FIELD_TOO_LARGE:
            detail = f"over {self._max_field} bytes"
        elif reason == TOO_MANY_HEADERS:
            detail = f"over {self._max_fields}"
        self._report(self.endpoint, reason)
        self._fail(BadResponse(reason, detail))

    def _stray(self) -> None:
        """Bytes after a complete answer: the connection is unusable, the answer stands."""
        if not self.closed:
            self._report(self.endpoint, STRAY)
        self.abort()

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
