"""The Python client of the EMQ HTTP API, for tenants and operators.

:class:`Client` has one method per route and returns the API's JSON as plain dicts. Every error
response becomes the matching :mod:`emq.core.errors` class (one table, :data:`ERRORS`), so callers
catch ``NotFound`` or ``BacklogFull`` whether they run next to the API or across the network.

:class:`Producer` batches under the hood: ``await producer.send(job)`` costs one small append;
jobs are gathered into batches of up to ``max_batch`` (or whatever arrived within ``linger_s``),
and up to ``max_in_flight`` batches travel at once.

Retries (:class:`Backoff`, the one policy of both): an enqueue answered 503 or not answered at
all (connection refused or reset, timeout) is sent again with exponential backoff and full
jitter until ``retry_for_s`` has passed; a 429 after its Retry-After. A job is never dropped
silently: after the deadline its error is raised (Client) or set on its future (Producer). A
retried request whose first attempt was in fact stored stores the jobs twice, unless they carry
an ``idempotency_key`` (then the API answers them as duplicates): give jobs keys when a
duplicate delivery matters. The Producer's states::

    OPEN --aclose()/__aexit__--> CLOSING (pending jobs still delivered) --> CLOSED

    client = Client("http://127.0.0.1:8080", token)
    async with client, client.producer("acme", "orders") as producer:
        job_id = await producer.send({"url": "https://example.com/hook", "body": {"n": 1}})
"""

from __future__ import annotations

import asyncio
import io
import json
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import quote

import aiohttp

from emq.core import errors

MAX_BATCH_JOBS = 1000  # the API's default limit of jobs per request
JSON_TYPE = "application/json"
DEFAULT_RETRY_FOR_S = 60.0
FIRST_RETRY_S = 0.1
MAX_RETRY_S = 5.0

_T = TypeVar("_T")

# ----------------------------------------------------------------------------- error mapping


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


# ----------------------------------------------------------------------------- retries


class Backoff:
    """When to send an enqueue again, within a deadline of ``retry_for_s`` from the first try.

    Retried: :class:`~emq.core.errors.BackendUnavailable` (a 503, or no answer: refused, reset,
    timed out), after ``FIRST_RETRY_S * 2**n`` capped at ``MAX_RETRY_S`` with full jitter (so
    many clients cut off together do not return together), and :class:`~emq.core.errors.BacklogFull`
    after its Retry-After. Anything else is final (a 4xx will not change by itself).
    """

    def __init__(self, retry_for_s: float, *, rand: Callable[[], float] = random.random) -> None:
        if retry_for_s < 0:
            raise ValueError("retry_for_s must be at least 0")
        self._deadline = time.monotonic() + retry_for_s
        self._rand = rand
        self.attempts = 0

    def delay_for(self, error: BaseException) -> float | None:
        """Seconds to wait before the next try after ``error``, or None: give up (raise it)."""
        if isinstance(error, errors.BacklogFull):
            delay = error.retry_after_s
        elif isinstance(error, errors.BackendUnavailable):
            delay = min(MAX_RETRY_S, FIRST_RETRY_S * 2**self.attempts) * self._rand()
        else:
            return None
        if time.monotonic() + delay > self._deadline:
            return None
        self.attempts += 1
        return delay

    async def run(self, call: Callable[[], Awaitable[_T]]) -> _T:
        """``await call()``, again after each retryable error until the deadline."""
        while True:
            try:
                return await call()
            except (errors.BackendUnavailable, errors.BacklogFull) as e:
                delay = self.delay_for(e)
                if delay is None:
                    raise
                await asyncio.sleep(delay)


# ----------------------------------------------------------------------------- client


def _path(*parts: str) -> str:
    return "/".join(quote(p, safe="") for p in parts)


def _batches(jobs: Sequence[object], size: int) -> list[Sequence[object]]:
    return [jobs[i : i + size] for i in range(0, len(jobs), size)]


class Client:
    """One tenant's (or the admin's) connection to the EMQ API.

    One ``aiohttp.ClientSession`` per client, created on first use; pass ``session`` to share
    one (the client then leaves it open). ``namespace`` is the default for topic routes (else the
    API's own default); each topic method can override it.
    """

    def __init__(
        self,
        api_url: str,
        token: str,
        *,
        namespace: str | None = None,
        timeout_s: float = 30,
        session: aiohttp.ClientSession | None = None,
        retry_for_s: float = DEFAULT_RETRY_FOR_S,
    ) -> None:
        if retry_for_s < 0:
            raise ValueError("retry_for_s must be at least 0")
        self.api_url = api_url.rstrip("/")
        self.retry_for_s = retry_for_s  # enqueues only: other routes are not retried
        self.namespace = namespace
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session = session
        self._owns_session = session is None

    async def __aenter__(self) -> Self:
        self._http()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the session if this client opened it."""
        if self._session is not None and self._owns_session:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    # ------------------------------------------------------------------ transport

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        raw: bytes | None = None,
        query: Mapping[str, str] | None = None,
    ) -> object:
        """Send one request and return its decoded JSON; an error status raises its EMQ error.

        ``body`` is encoded as JSON; ``raw`` is sent as already-encoded JSON.
        """
        if body is not None:
            raw = json.dumps(body, separators=(",", ":")).encode()
        headers = self._headers | ({"Content-Type": JSON_TYPE} if raw is not None else {})
        url = f"{self.api_url}/{path}"
        try:
            # A BytesIO is written in chunks; plain bytes over 1 MB would block the loop (and warn).
            data = io.BytesIO(raw) if raw is not None else None
            async with self._http().request(
                method, url, data=data, params=query, headers=headers
            ) as response:
                payload = await _decode(response)
                if response.status >= 400:
                    retry_after = response.headers.get("Retry-After")
                    raise error_from_response(response.status, payload, retry_after)
                return payload
        except aiohttp.ClientError as e:
            raise errors.BackendUnavailable(f"cannot reach the EMQ API at {url}: {e}") from e
        except TimeoutError as e:
            timeout = self._timeout.total
            raise errors.BackendUnavailable(f"no answer from {url} within {timeout} s") from e

    async def _object(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        raw: bytes | None = None,
        query: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """:meth:`request` for the routes that answer a JSON object (all of them)."""
        result = await self.request(method, path, body=body, raw=raw, query=query)
        if not isinstance(result, dict):
            raise ApiError(
                200, "http_error", f"expected a JSON object from {path}: {result!r:.200}"
            )
        return result

    def _topic_query(self, namespace: str | None) -> dict[str, str]:
        ns = namespace or self.namespace
        return {"namespace": ns} if ns else {}

    def _topic_path(self, tenant: str, topic: str, *rest: str) -> str:
        return _path("v1", "tenants", tenant, "topics", topic, *rest)

    # ------------------------------------------------------------------ tenants (admin)

    async def create_tenant(self, tenant: str, name: str | None = None) -> dict[str, Any]:
        """Create a tenant; the answer carries its API token, shown this once."""
        body = {"tenant": tenant} | ({"name": name} if name is not None else {})
        return await self._object("POST", "v1/tenants", body=body)

    async def list_tenants(self) -> list[dict[str, Any]]:
        result = await self._object("GET", "v1/tenants")
        return list(result["tenants"])

    # ------------------------------------------------------------------ topics

    async def create_topic(
        self,
        tenant: str,
        topic: str,
        qps: int,
        *,
        namespace: str | None = None,
        retry: Mapping[str, Any] | None = None,
        endpoint_concurrency: int | None = None,
        max_backlog: int | None = None,
        priority_mode: str | None = None,
        dlq_max_entries: int | None = None,
        dlq_max_age_s: int | None = None,
    ) -> dict[str, Any]:
        """Create a topic (admin); the answer has its groups and its signing secret."""
        options = {
            "namespace": namespace or self.namespace,
            "retry": dict(retry) if retry is not None else None,
            "endpoint_concurrency": endpoint_concurrency,
            "max_backlog": max_backlog,
            "priority_mode": priority_mode,
            "dlq_max_entries": dlq_max_entries,
            "dlq_max_age_s": dlq_max_age_s,
        }
        body = {"topic": topic, "qps": qps} | {k: v for k, v in options.items() if v is not None}
        path = _path("v1", "tenants", tenant, "topics")
        return await self._object("POST", path, body=body)

    async def list_topics(
        self, tenant: str, *, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        path = _path("v1", "tenants", tenant, "topics")
        result = await self._object("GET", path, query=self._topic_query(namespace))
        return list(result["topics"])

    async def get_topic(
        self, tenant: str, topic: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        """The topic's settings, groups and backlog (per priority and per group)."""
        path = self._topic_path(tenant, topic)
        return await self._object("GET", path, query=self._topic_query(namespace))

    async def update_topic(
        self, tenant: str, topic: str, *, namespace: str | None = None, **changes: Any
    ) -> dict[str, Any]:
        """Change a topic live (admin): ``qps``, ``paused``, ``retry``, ``max_backlog``..."""
        path = self._topic_path(tenant, topic)
        query = self._topic_query(namespace)
        return await self._object("PATCH", path, body=changes, query=query)

    async def set_quota(
        self, tenant: str, topic: str, qps: int, *, namespace: str | None = None
    ) -> dict[str, Any]:
        return await self.update_topic(tenant, topic, namespace=namespace, qps=qps)

    async def pause(
        self, tenant: str, topic: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        return await self.update_topic(tenant, topic, namespace=namespace, paused=True)

    async def resume(
        self, tenant: str, topic: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        return await self.update_topic(tenant, topic, namespace=namespace, paused=False)

    # ------------------------------------------------------------------ jobs

    async def enqueue(
        self,
        tenant: str,
        topic: str,
        job_or_jobs: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """Enqueue one job (a dict) or many (a list, sent in requests of up to 1000 jobs).

        Returns ``{"ids": [...], "duplicates": n}``. Each request is retried (see
        :class:`Backoff`) for up to ``retry_for_s``. Batches go one after the other; if one
        fails for good, its error is raised and the batches before it stay accepted.
        """
        path = self._topic_path(tenant, topic, "jobs")
        query = self._topic_query(namespace)

        def post(body: object) -> Callable[[], Awaitable[dict[str, Any]]]:
            return lambda: self._object("POST", path, body=body, query=query)

        if isinstance(job_or_jobs, Mapping):
            return await Backoff(self.retry_for_s).run(post(job_or_jobs))
        ids: list[str] = []
        duplicates = 0
        for batch in _batches(job_or_jobs, MAX_BATCH_JOBS):
            answer = await Backoff(self.retry_for_s).run(post({"jobs": list(batch)}))
            ids += answer["ids"]
            duplicates += answer["duplicates"]
        return {"ids": ids, "duplicates": duplicates}

    async def enqueue_encoded(
        self, tenant: str, topic: str, jobs: Sequence[bytes], *, namespace: str | None = None
    ) -> dict[str, Any]:
        """Enqueue jobs already encoded as JSON objects, in one request, not retried (the
        Producer's path: it retries on its own)."""
        raw = b'{"jobs":[' + b",".join(jobs) + b"]}"
        path = self._topic_path(tenant, topic, "jobs")
        query = self._topic_query(namespace)
        return await self._object("POST", path, raw=raw, query=query)

    def producer(
        self,
        tenant: str,
        topic: str,
        *,
        namespace: str | None = None,
        max_batch: int = MAX_BATCH_JOBS,
        linger_s: float = 0.02,
        max_in_flight: int = 4,
        retry_for_s: float | None = None,
    ) -> Producer:
        """A :class:`Producer` sending to one topic through this client (retrying for the
        client's ``retry_for_s`` unless given)."""
        return Producer(
            self,
            tenant,
            topic,
            namespace=namespace,
            max_batch=max_batch,
            linger_s=linger_s,
            max_in_flight=max_in_flight,
            retry_for_s=self.retry_for_s if retry_for_s is None else retry_for_s,
        )

    # ------------------------------------------------------------------ dead letters

    async def dlq_list(
        self,
        tenant: str,
        topic: str,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """One page of dead letters: ``{"dead": [...], "next_cursor": str | None}``."""
        query = self._topic_query(namespace)
        if limit is not None:
            query["limit"] = str(limit)
        if cursor is not None:
            query["cursor"] = cursor
        path = self._topic_path(tenant, topic, "dlq")
        return await self._object("GET", path, query=query)

    async def job_status(
        self, tenant: str, topic: str, job_id: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        """One job's state and, while it waits, why (README, "Job status")."""
        path = self._topic_path(tenant, topic, "jobs", job_id)
        return await self._object("GET", path, query=self._topic_query(namespace))

    async def dlq_replay(
        self,
        tenant: str,
        topic: str,
        *,
        ids: Sequence[str] | None = None,
        limit: int | None = None,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """Put dead letters back on the topic (``ids``, or up to ``limit`` of them)."""
        body: dict[str, Any] = {}
        if ids is not None:
            body["ids"] = list(ids)
        if limit is not None:
            body["limit"] = limit
        path = self._topic_path(tenant, topic, "dlq", "replay")
        query = self._topic_query(namespace)
        return await self._object("POST", path, body=body, query=query)

    # ------------------------------------------------------------------ operations

    async def health(self) -> dict[str, Any]:
        """``/healthz``: ``{"status": "ok", "redis": "ok", ...}``; 503 raises BackendUnavailable."""
        return await self._object("GET", "healthz")


async def _decode(response: aiohttp.ClientResponse) -> object:
    text = await response.text()
    if response.content_type != JSON_TYPE:
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


# ----------------------------------------------------------------------------- producer

_FIELD_INDEX = re.compile(r"^jobs\[(\d+)\](?:\.(.*))?$")


@dataclass(slots=True)
class _Pending:
    job: bytes
    future: asyncio.Future[str]


class Producer:
    """Sends jobs to one topic in batches, several batches in flight.

    ``send`` appends the job to the open batch and awaits the job's own future. The batch is
    cut when it holds ``max_batch`` jobs or ``linger_s`` after its first job, and handed to one
    of ``max_in_flight`` sender tasks (a bounded queue between them: when every sender is busy,
    the ``send`` that fills a batch waits, which is the back-pressure). Background tasks are
    fixed: the senders and one linger timer, never a task per job.

    A 429 (backlog full), a 503 and a request that got no answer are retried (see
    :class:`Backoff`) for at most ``retry_for_s`` per batch; then the batch's futures get the
    last error. A job the API rejects (``jobs[i]...``) fails only that job's future; the rest
    of its batch is sent again (the API writes nothing of a rejected batch). Any other error
    fails the futures of that batch. With ``max_in_flight > 1`` batches may overtake each
    other: use 1 when jobs with the same ``key`` must keep their order.
    """

    def __init__(
        self,
        client: Client,
        tenant: str,
        topic: str,
        *,
        namespace: str | None = None,
        max_batch: int = MAX_BATCH_JOBS,
        linger_s: float = 0.02,
        max_in_flight: int = 4,
        retry_for_s: float = 60.0,
    ) -> None:
        if not 1 <= max_batch <= MAX_BATCH_JOBS:
            raise ValueError(f"max_batch must be between 1 and {MAX_BATCH_JOBS}")
        if max_in_flight < 1 or linger_s < 0:
            raise ValueError("max_in_flight must be at least 1 and linger_s at least 0")
        self._client = client
        self._target = (tenant, topic, namespace)
        self._max_batch = max_batch
        self._linger_s = linger_s
        self._max_in_flight = max_in_flight
        self._retry_for_s = retry_for_s
        self._open: list[_Pending] = []
        self._deadline = 0.0  # when the open batch must be cut
        self._cuts = 0  # how many batches were cut: tells the timer its batch is gone
        self._ready: asyncio.Queue[list[_Pending] | None] | None = None
        self._timer_wake = asyncio.Event()
        self._unfinished = 0  # batches cut but not yet answered
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self.accepted = 0  # jobs the API stored
        self.duplicates = 0  # jobs the API recognised by their idempotency key
        self.failed = 0  # jobs whose future got an error
        self.requests = 0  # batch requests sent (a 429'd or partly rejected batch is sent again)
        self.throttled = 0  # 429 answers (each retried after its Retry-After, within budget)
        self.unavailable = 0  # 503s and unanswered requests (each retried, within budget)

    async def __aenter__(self) -> Self:
        self._start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def _start(self) -> asyncio.Queue[list[_Pending] | None]:
        if self._ready is None:
            self._ready = asyncio.Queue(maxsize=self._max_in_flight)
            self._tasks = [asyncio.create_task(self._timer(), name="emq-producer-linger")]
            self._tasks += [
                asyncio.create_task(self._sender(), name=f"emq-producer-sender-{i}")
                for i in range(self._max_in_flight)
            ]
        return self._ready

    # ------------------------------------------------------------------ the caller's side

    async def send(self, job: Mapping[str, Any]) -> str:
        """Enqueue ``job`` in a batch; returns its id once the API accepted the batch."""
        return await (await self.submit(job))

    async def submit(self, job: Mapping[str, Any]) -> asyncio.Future[str]:
        """Add ``job`` to a batch and return its future without waiting for the answer.

        Raises ``TypeError`` at once for a job that is not JSON. Waits only when every sender
        is busy and the batch is full (back-pressure).
        """
        if self._closed:
            raise RuntimeError("the producer is closed")
        self._start()
        encoded = json.dumps(job, separators=(",", ":")).encode()
        item = _Pending(encoded, asyncio.get_running_loop().create_future())
        self._open.append(item)
        if len(self._open) == 1:
            self._deadline = asyncio.get_running_loop().time() + self._linger_s
            self._timer_wake.set()
        if len(self._open) >= self._max_batch:
            await self._hand_over(self._cut())
        return item.future

    async def flush(self) -> None:
        """Send the open batch now and wait until every batch cut so far is answered."""
        if self._open:
            await self._hand_over(self._cut())
        await self._idle.wait()

    async def aclose(self) -> None:
        """Deliver everything pending, then stop the background tasks. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._ready is None:
            return
        try:
            await self.flush()
        finally:
            for _ in range(self._max_in_flight):
                await self._ready.put(None)
            self._tasks[0].cancel()  # the linger timer has nothing left to do
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _cut(self) -> list[_Pending]:
        batch, self._open = self._open, []
        self._cuts += 1
        self._unfinished += 1
        self._idle.clear()
        return batch

    async def _hand_over(self, batch: list[_Pending]) -> None:
        assert self._ready is not None
        await self._ready.put(batch)

    # ------------------------------------------------------------------ background tasks

    async def _timer(self) -> None:
        """Cuts the open batch ``linger_s`` after its first job (unless it was cut already)."""
        loop = asyncio.get_running_loop()
        while True:
            await self._timer_wake.wait()
            self._timer_wake.clear()
            cuts = self._cuts
            delay = self._deadline - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if cuts == self._cuts and self._open:
                await self._hand_over(self._cut())

    async def _sender(self) -> None:
        assert self._ready is not None
        while (batch := await self._ready.get()) is not None:
            try:
                await self._deliver(batch)
            finally:
                self._unfinished -= 1
                if self._unfinished == 0:
                    self._idle.set()

    async def _deliver(self, batch: list[_Pending]) -> None:
        """Send one batch until it is answered, re-sending after 429s, 503s, unanswered
        requests (within ``retry_for_s``) and rejected jobs."""
        backoff = Backoff(self._retry_for_s)
        while batch:
            try:
                answer = await self._post(batch)
            except (errors.BacklogFull, errors.BackendUnavailable) as e:
                if isinstance(e, errors.BacklogFull):
                    self.throttled += 1
                else:
                    self.unavailable += 1
                delay = backoff.delay_for(e)
                if delay is None:
                    self._fail(batch, e)
                    return
                await asyncio.sleep(delay)
            except errors.InvalidInput as e:
                batch = self._drop_rejected(batch, e)
            except asyncio.CancelledError:
                self._fail(batch, errors.BackendUnavailable("producer stopped before an answer"))
                raise
            except Exception as e:
                self._fail(batch, e)
                return
            else:
                self._succeed(batch, answer)
                return

    async def _post(self, batch: list[_Pending]) -> dict[str, Any]:
        tenant, topic, namespace = self._target
        jobs = [item.job for item in batch]
        self.requests += 1
        return await self._client.enqueue_encoded(tenant, topic, jobs, namespace=namespace)

    def _drop_rejected(self, batch: list[_Pending], e: errors.InvalidInput) -> list[_Pending]:
        """Fail the one job the API named and return the rest; else fail the whole batch."""
        match = _FIELD_INDEX.match(e.field or "")
        if match is None or int(match[1]) >= len(batch):
            self._fail(batch, e)
            return []
        index = int(match[1])
        self._fail([batch[index]], type(e)(match[2], e.message))
        return batch[:index] + batch[index + 1 :]

    def _succeed(self, batch: list[_Pending], answer: Mapping[str, Any]) -> None:
        ids, duplicates = answer.get("ids"), answer.get("duplicates", 0)
        if not isinstance(ids, list) or len(ids) != len(batch):
            self._fail(
                batch, ApiError(202, "http_error", f"expected {len(batch)} ids: {answer!r:.200}")
            )
            return
        self.accepted += len(ids) - duplicates
        self.duplicates += duplicates
        for item, job_id in zip(batch, ids, strict=True):
            if not item.future.done():
                item.future.set_result(job_id)

    def _fail(self, batch: list[_Pending], error: BaseException) -> None:
        self.failed += len(batch)
        for item in batch:
            if not item.future.done():
                item.future.set_exception(error)


__all__ = [
    "ERRORS",
    "ApiError",
    "Backoff",
    "Client",
    "Producer",
    "describe",
    "error_from_response",
]
