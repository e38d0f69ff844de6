"""The push executor: one aiohttp session delivering signed requests, guarded against SSRF.

One ``ClientSession`` per process (connection reuse, one DNS cache), no cookie jar, no default
headers, redirects never followed, a connect timeout and a total timeout (the whole request:
connect, write, head and the body read to its end), and at most ``max_response_bytes`` of a
response read (a receiver cannot make us buffer a huge body). Concurrency is bounded by the
caller: the worker's sender pool (``worker/senders.py``) and each topic's endpoint concurrency,
with ``EMQ_WORKER_MAX_IN_FLIGHT`` over all.

Conformance (ARCHITECTURE.md invariant 9, docs/design/push-client.md), as far as aiohttp's
public API allows:

* the answer counts once its body is read to its end (or past ``max_response_bytes``: the
  connection is then closed); a body cut short is a failure;
* a connection that received anything after its last answer while it idled (a whole response
  queued, a parse error) is closed before a request is written on it, and the push moves to
  another connection (:class:`_FreshConnectionRequest`); a complete second response in the
  same read closes the connection when the answer is released (aiohttp's own check);
* the head is bounded: each line and field (``max_response_field_bytes``), the field count
  (``max_response_headers``); a header name that is not a token (whitespace before the colon)
  is refused after aiohttp's parse. The reason phrase is ignored (RFC 9112 4), as the lean
  client does.

What aiohttp does not let us refuse (its C parser sets llhttp's lenient flags outside Python's
development mode, with no option to turn them off): a bare LF as a line end. And a partial
response after an answer (in the same read or while idle) is dropped, not seen, when aiohttp
builds the next response's parser: it is never parsed as an answer (its rest, arriving later,
fails the next request as a protocol error), but the connection is reused once.

What a push can end in: a :class:`PushResult` (an answer, a timeout, a protocol error or a
transport failure: the caller retries), or a non-retryable :class:`~emq.core.errors
.DeliveryError`: ``DestinationRefused`` (the SSRF guard) or ``Undeliverable`` (a URL or header
HTTP cannot carry: the same checks as at enqueue, :mod:`emq.core.outbound`, plus whatever
aiohttp refuses while writing the request). Anything else escaping is a bug; the caller counts
it as a failed attempt.

The request's ``gate`` is not asked: aiohttp opens a connection inside the request, with no
point between the connect and the write to ask at. A push that waited for a new connection is
written whatever the wait (a receiver may see those of a slow connect's wait together); the
lean client (the default) asks (:mod:`worker.http1.pusher`).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import re
import ssl
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
from aiohttp import http_exceptions
from yarl import URL

from emq.core.errors import DeliveryError, DestinationRefused, InvalidInput, Undeliverable
from emq.core.interfaces import Pusher, PushRequest, PushResult
from emq.core.outbound import push_url
from worker.protocol_errors import (
    FIELD_TOO_LARGE,
    MALFORMED,
    STRAY,
    TOO_MANY_HEADERS,
    ProtocolErrors,
    message,
)
from worker.settings import WorkerSettings
from worker.ssrf import AddressPolicy, GuardedResolver

log = logging.getLogger(__name__)

MAX_RETRY_AFTER_S = 24 * 3600.0
URL_CACHE_SIZE = 4096  # parsed and checked URLs kept (a topic's jobs mostly share a few URLs)
# A push whose pooled connection turned out to have received bytes while idle moves to another
# one (nothing was written): this many times at most, then it fails as a protocol error.
FRESH_CONNECTION_TRIES = 3
# Header names joined by "\n": a character that is not a token's (a space before the colon).
_NAME_FORBIDDEN = re.compile(rb"[^!#$%&'*+\-.^_`|~0-9A-Za-z\n]")


class _StrayBytes(Exception):
    """The connection picked for a request received bytes while it idled: nothing written."""


class _FreshConnectionRequest(aiohttp.ClientRequest):
    """Refuses, before writing, a pooled connection that received anything after its last
    answer: a response queued while it idled, a parse error, a body still open. (aiohttp's
    pool checks only that the transport is open; ``should_close`` is the protocol's public
    account of all three.)"""

    async def send(self, conn: Any) -> aiohttp.ClientResponse:
        protocol = conn.protocol
        if protocol is not None and protocol.should_close:
            raise _StrayBytes
        response: aiohttp.ClientResponse = await super().send(conn)
        return response


class _CheckedResponse(aiohttp.ClientResponse):
    """A response whose head is checked for what aiohttp's lenient parser lets through
    (:func:`_check_head`) before anyone reads it; refused, its connection is closed (a response
    without a body has given its connection back to the pool by then). Keeps its connection's
    protocol (``protocol``) for the body's checks."""

    protocol: Any = None

    async def start(self, connection: Any) -> aiohttp.ClientResponse:
        self.protocol = connection.protocol
        await super().start(connection)
        try:
            _check_head(self)
        except _Refused:
            if self.protocol is not None:
                self.protocol.close()
            self.close()
            raise
        return self


class _Refused(Exception):
    """The response broke a rule aiohttp's parser let through."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(message(reason, detail))
        self.reason = reason


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER_S)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return min(max(0.0, when.timestamp() - now), MAX_RETRY_AFTER_S)


def _meta(
    headers: Mapping[str, str], raw_after: str | None, body: bytes, keep: int
) -> tuple[bytes | None, bytes | None, bytes | None, bytes | None]:
    """What the attempt log keeps of an answer (:attr:`PushResult.meta`)."""
    ctype, clen = headers.get("Content-Type"), headers.get("Content-Length")
    return (
        None if raw_after is None else raw_after.encode("latin-1", "replace"),
        None if ctype is None else ctype.encode("latin-1", "replace"),
        None if clen is None else clen.encode("latin-1", "replace"),
        body[:keep] if keep else None,
    )


class PushExecutor(Pusher):
    """Sends :class:`PushRequest` s; use as ``async with`` or call :meth:`start`/:meth:`aclose`."""

    def __init__(
        self,
        settings: WorkerSettings,
        policy: AddressPolicy,
        ssl_context: ssl.SSLContext | None = None,  # None: the system's CAs, verified
    ) -> None:
        self._settings = settings
        self._policy = policy
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._session: aiohttp.ClientSession | None = None
        self._urls: dict[str, URL] = {}
        self.protocol_errors = ProtocolErrors()  # (worker.protocol_errors: the metric)

    async def start(self) -> None:
        if self._session is not None:
            return
        connector = aiohttp.TCPConnector(
            resolver=GuardedResolver(self._policy),
            limit=0,  # the sender pool is the limit
            ttl_dns_cache=10,
            enable_cleanup_closed=True,
            ssl=self._ssl,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            # A host that never answers the SYN (or a resolver that never answers) ends at the
            # connect timeout: ``connect`` covers resolving and connecting, ``sock_connect`` the
            # TCP (and TLS) handshake of each address tried; an endpoint that accepts and never
            # answers ends at ``total``. Either way the sender pool detaches the push once it
            # runs long, and a timeout halves the endpoint's slots (worker/senders.py).
            # The total timeout is the push's own (asyncio.timeout around the whole request,
            # its body read included: aiohttp's total covers a body read only while it waits).
            timeout=aiohttp.ClientTimeout(
                total=None,
                connect=self._settings.connect_timeout_s,
                sock_connect=self._settings.connect_timeout_s,
            ),
            max_line_size=self._settings.max_response_field_bytes,
            max_field_size=self._settings.max_response_field_bytes,
            max_headers=self._settings.max_response_headers,
            request_class=_FreshConnectionRequest,
            response_class=_CheckedResponse,
            skip_auto_headers=("User-Agent",),
            auto_decompress=False,
            trust_env=False,  # never route pushes through an environment proxy
        )

    async def __aenter__(self) -> PushExecutor:
        await self.start()
        return self

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def _url(self, text: str) -> URL:
        """Parse ``text`` as the API checked it and refuse an IP-literal host the policy refuses;
        cache what passes (parsing and checking cost as much as a tenth of a push)."""
        try:
            url = push_url(text)
        except InvalidInput as e:  # a job that bypassed the API: it can never be sent
            raise Undeliverable(f"undeliverable: {e}") from None
        self._policy.check_host(url.host or "")
        if len(self._urls) >= URL_CACHE_SIZE:
            self._urls.clear()
        self._urls[text] = url
        return url

    async def push(self, request: PushRequest) -> PushResult:
        if self._session is None:
            await self.start()
        assert self._session is not None
        url = self._urls.get(request.url)
        if url is None:
            url = self._url(request.url)
        start = time.perf_counter()
        try:
            async with asyncio.timeout(self._settings.request_timeout_s):
                for _ in range(FRESH_CONNECTION_TRIES):
                    try:
                        status, retry_after, meta = await self._request(request, url)
                        elapsed = time.perf_counter() - start
                        return PushResult(status, elapsed, retry_after, meta=meta)
                    except _StrayBytes:
                        self.protocol_errors.count(request.endpoint, STRAY)
                raise _Refused(STRAY, "on every pooled connection tried")
        except DeliveryError:
            raise
        except _Refused as e:
            if e.reason != STRAY:
                self.protocol_errors.count(request.endpoint, e.reason)
            return PushResult(0, time.perf_counter() - start, error=str(e))
        except TimeoutError:
            return PushResult(0, time.perf_counter() - start, error="timed out")
        except aiohttp.ClientConnectorError as e:
            if isinstance(e.os_error, DestinationRefused):
                raise e.os_error from None
            return PushResult(0, time.perf_counter() - start, error=f"connect failed: {e}")
        except aiohttp.InvalidURL as e:
            raise Undeliverable(f"undeliverable: invalid URL {e}") from None
        except (aiohttp.ClientError, OSError, asyncio.IncompleteReadError) as e:
            reason = _protocol_reason(e)
            if reason is not None:
                self.protocol_errors.count(request.endpoint, reason)
                error = message(reason, _parser_words(e))
            else:
                error = f"{type(e).__name__}: {e}"
            return PushResult(0, time.perf_counter() - start, error=error)
        except ValueError as e:
            # aiohttp refusing what it was asked to write ("Forbidden control character detected
            # in headers", a header that is not UTF-8): the same request fails every time.
            raise Undeliverable(f"undeliverable: {type(e).__name__}: {e}") from None

    async def _request(
        self, request: PushRequest, url: URL
    ) -> tuple[int, float | None, tuple[bytes | None, bytes | None, bytes | None, bytes | None]]:
        """One request on one connection: its status, Retry-After and what the attempt log
        keeps of it (:func:`_meta`), once its body is read to its end (or past the cap: the
        connection is then closed, not reused)."""
        assert self._session is not None
        async with self._session.request(
            request.method,
            url,
            headers=request.headers,
            data=request.body,
            allow_redirects=False,
        ) as response:
            assert isinstance(response, _CheckedResponse)
            protocol = response.protocol
            # A body that ends at the close: a reset is not its end. The protocol's ``closed``
            # future (made when first asked) fails on an unclean close.
            closing = (
                protocol.closed if protocol is not None and _close_delimited(response) else None
            )
            left = self._settings.max_response_bytes
            keep, kept = request.excerpt_bytes, b""
            while left >= 0:
                chunk = await response.content.read(left + 1 if left else 1)
                if not chunk:
                    break  # the end of the body
                left -= len(chunk)
                if len(kept) < keep:
                    kept += chunk[: keep - len(kept)]
            if left < 0:
                response.close()  # past the cap: the rest is not worth the wire
            elif closing is not None and closing.done() and closing.exception() is not None:
                raise aiohttp.ClientPayloadError(f"body cut short: {closing.exception()}")
            if protocol is not None and len(protocol):
                # A second response queued behind this one: aiohttp closes the connection
                # when the answer is released; counted here.
                self.protocol_errors.count(request.endpoint, STRAY)
            raw_after = response.headers.get("Retry-After")
            retry_after = parse_retry_after(raw_after, time.time())
            return response.status, retry_after, _meta(response.headers, raw_after, kept, keep)


def _close_delimited(response: aiohttp.ClientResponse) -> bool:
    """The response's body ends when the connection closes (no length, not chunked)."""
    headers = response.headers
    return "Content-Length" not in headers and "Transfer-Encoding" not in headers


def _check_head(response: aiohttp.ClientResponse) -> None:
    """Refuse what aiohttp's lenient parser let through: a header name that is not a token
    (whitespace before the colon)."""
    if response.raw_headers:
        names = b"\n".join(name for name, _ in response.raw_headers)
        if _NAME_FORBIDDEN.search(names):
            raise _Refused(MALFORMED, "invalid header token")


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and its causes (aiohttp wraps a parser's error in one or two of its own)."""
    chain: list[BaseException] = []
    seen: BaseException | None = error
    while seen is not None and len(chain) < 8:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def _protocol_reason(error: BaseException) -> str | None:
    """The protocol error behind an aiohttp failure (its cause chain), if it was one."""
    chain = _chain(error)
    if any(isinstance(e, http_exceptions.LineTooLong) for e in chain):
        return FIELD_TOO_LARGE
    parsing = [e for e in chain if isinstance(e, http_exceptions.HttpProcessingError)]
    if not parsing:
        return None
    words = " ".join(str(e.message) for e in parsing)
    if isinstance(parsing[-1], http_exceptions.ContentLengthError) or "Not enough data" in words:
        return None  # a body cut short: the connection's end, not a malformed response
    return TOO_MANY_HEADERS if "Too many headers" in words else MALFORMED


def _parser_words(error: BaseException) -> str:
    """aiohttp's own words for a protocol error: its first line, short."""
    parsing = [e for e in _chain(error) if isinstance(e, http_exceptions.HttpProcessingError)]
    words = str(parsing[-1].message if parsing else error).strip()
    return " ".join(words.split("\n", 1)[0].split())[:100].lower().rstrip(":")
