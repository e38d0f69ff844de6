"""The push executor: one aiohttp session delivering signed requests, guarded against SSRF.

One ``ClientSession`` per process (connection reuse, one DNS cache), no cookie jar, no default
headers, redirects never followed, a connect timeout and a total timeout, and at most
``max_response_bytes`` of a response read (a receiver cannot make us buffer a huge body).
Concurrency is bounded by the caller: the worker's sender pool (``worker/senders.py``) and each
topic's endpoint concurrency, with ``EMQ_WORKER_MAX_IN_FLIGHT`` over all.

What a push can end in: a :class:`PushResult` (an answer, a timeout or a transport failure: the
caller retries), or a non-retryable :class:`~emq.core.errors.DeliveryError`: ``DestinationRefused``
(the SSRF guard) or ``Undeliverable`` (a URL or header HTTP cannot carry: the same checks as at
enqueue, :mod:`emq.core.outbound`, plus whatever aiohttp refuses while writing the request).
Anything else escaping is a bug; the caller counts it as a failed attempt.

The request's ``gate`` is not asked: aiohttp opens a connection inside the request, with no
point between the connect and the write to ask at. A push that waited for a new connection is
written whatever the wait (a receiver may see those of a slow connect's wait together); the
lean client (the default) asks (:mod:`worker.http1.pusher`).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import ssl
import time
from collections.abc import Mapping

import aiohttp
from yarl import URL

from emq.core.errors import DeliveryError, DestinationRefused, InvalidInput, Undeliverable
from emq.core.interfaces import Pusher, PushRequest, PushResult
from emq.core.outbound import push_url
from worker.settings import WorkerSettings
from worker.ssrf import AddressPolicy, GuardedResolver

log = logging.getLogger(__name__)

MAX_RETRY_AFTER_S = 24 * 3600.0
URL_CACHE_SIZE = 4096  # parsed and checked URLs kept (a topic's jobs mostly share a few URLs)


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
            timeout=aiohttp.ClientTimeout(
                total=self._settings.request_timeout_s,
                connect=self._settings.connect_timeout_s,
                sock_connect=self._settings.connect_timeout_s,
            ),
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
            async with self._session.request(
                request.method,
                url,
                headers=request.headers,
                data=request.body,
                allow_redirects=False,
            ) as response:
                body = await response.content.read(self._settings.max_response_bytes)
                raw_after = response.headers.get("Retry-After")
                retry_after = parse_retry_after(raw_after, time.time())
                meta = _meta(response.headers, raw_after, body, request.excerpt_bytes)
                elapsed = time.perf_counter() - start
                return PushResult(response.status, elapsed, retry_after, meta=meta)
        except DeliveryError:
            raise
        except TimeoutError:
            return PushResult(0, time.perf_counter() - start, error="timed out")
        except aiohttp.ClientConnectorError as e:
            if isinstance(e.os_error, DestinationRefused):
                raise e.os_error from None
            return PushResult(0, time.perf_counter() - start, error=f"connect failed: {e}")
        except aiohttp.InvalidURL as e:
            raise Undeliverable(f"undeliverable: invalid URL {e}") from None
        except (aiohttp.ClientError, OSError, asyncio.IncompleteReadError) as e:
            return PushResult(0, time.perf_counter() - start, error=f"{type(e).__name__}: {e}")
        except ValueError as e:
            # aiohttp refusing what it was asked to write ("Forbidden control character detected
            # in headers", a header that is not UTF-8): the same request fails every time.
            raise Undeliverable(f"undeliverable: {type(e).__name__}: {e}") from None
