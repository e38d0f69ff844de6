"""The Producer: ``await producer.send(job)`` in a loop, sent in batches.

What ``send`` promises: it returns once the job is queued locally (it encodes the job and
appends it to the open batch); it waits only when the local queue is full, which is the
back-pressure. A batch is cut when it holds ``max_batch`` jobs or ``linger_s`` after its first
job, and up to ``max_in_flight`` batches travel at once, so at most about
``(2 * max_in_flight + 1) * max_batch`` jobs are held locally. ``flush()`` (and ``aclose()``, and
the end of ``async with``) waits until every job sent before it is answered and raises
:class:`~emq.client.errors.JobsRejected` listing the jobs the API did not accept, each with its
reason; every other job is stored. Nothing is dropped silently.

Per job, a caller who wants the id or the error of each job uses ``submit`` (a future) or
``send_and_wait`` (the id, once its batch is accepted: one batch per linger, so slow in a
loop). Errors of submitted jobs are theirs alone: ``flush`` does not raise them again.

Retries (:class:`~emq.client.backoff.Backoff`): a 429, a 503 and a request that got no answer
are sent again for at most ``retry_for_s`` per batch, then its jobs fail with the last error. A
job the API rejects (``jobs[i]...``) fails alone; the rest of its batch is sent again (the API
writes nothing of a rejected batch). A retried batch whose first attempt was stored but not
answered would be stored twice, so ``idempotent=True`` gives every job without an
``idempotency_key`` a unique one and the API answers the repeat as duplicates; it costs the API
one script and one marker per job (see ``emq bench enqueue``), hence off by default.

States::

    OPEN --aclose()/__aexit__--> CLOSING (pending jobs still delivered) --> CLOSED
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import orjson

from emq.client.backoff import DEFAULT_RETRY_FOR_S, Backoff
from emq.client.errors import ApiError, JobsRejected, Rejected
from emq.core import errors

if TYPE_CHECKING:
    from emq.client.client import Client

log = logging.getLogger(__name__)

MAX_BATCH_JOBS = 1000  # the API's default limit of jobs per request
DEFAULT_LINGER_S = 0.005
DEFAULT_IN_FLIGHT = 4
_ENCODE = orjson.OPT_NON_STR_KEYS  # like json.dumps: {1: "a"} is {"1": "a"}
_FIELD_INDEX = re.compile(r"^jobs\[(\d+)\](?:\.(.*))?$")


@dataclass(slots=True)
class _Pending:
    job: bytes
    future: asyncio.Future[str] | None  # None: sent by send(); a failure goes to the report


class Producer:
    """Sends jobs to one topic in batches, several batches in flight (see the module).

    Background tasks are fixed: ``max_in_flight`` senders and one linger timer, never a task
    per job. With ``max_in_flight > 1`` batches may overtake each other: use 1 when jobs with
    the same ``key`` must keep their order.
    """

    def __init__(
        self,
        client: Client,
        tenant: str,
        topic: str,
        *,
        namespace: str | None = None,
        max_batch: int = MAX_BATCH_JOBS,
        linger_s: float = DEFAULT_LINGER_S,
        max_in_flight: int = DEFAULT_IN_FLIGHT,
        retry_for_s: float = DEFAULT_RETRY_FOR_S,
        idempotent: bool = False,
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
        self._key_prefix = f"emq-{secrets.token_hex(8)}-" if idempotent else None
        self._keys_given = 0
        self._open: list[_Pending] = []
        self._deadline = 0.0  # when the open batch must be cut
        self._cuts = 0  # how many batches were cut: tells the timer its batch is gone
        self._ready: asyncio.Queue[list[_Pending] | None] | None = None
        self._timer_wake = asyncio.Event()
        self._unfinished = 0  # batches cut but not yet answered
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks: list[asyncio.Task[None]] = []
        self._rejected: list[Rejected] = []  # send()'s failures, until flush() reports them
        self._closed = False
        self.accepted = 0  # jobs the API stored
        self.duplicates = 0  # jobs the API recognised by their idempotency key
        self.failed = 0  # jobs not accepted (reported by flush() or set on their future)
        self.requests = 0  # batch requests sent (a 429'd or partly rejected batch is sent again)
        self.throttled = 0  # 429 answers (each retried after its Retry-After, within budget)
        self.unavailable = 0  # 503s and unanswered requests (each retried, within budget)

    async def __aenter__(self) -> Self:
        self._start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if e is None:
            await self.aclose()
            return
        try:  # the block's own error goes on; the jobs it had sent are still delivered
            await self.aclose()
        except JobsRejected as rejected:
            log.error("emq producer for %s/%s: %s", *self._target[:2], rejected)
            e.add_note(f"and the EMQ producer reports: {rejected}")

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

    async def send(self, job: Mapping[str, Any]) -> None:
        """Queue ``job``; returns once it is queued locally (waits while the queue is full).

        Raises ``TypeError`` at once for a job that is not JSON. Whether the API accepted it,
        ``flush()``/``aclose()`` tell (:class:`~emq.client.errors.JobsRejected`).
        """
        self._add(job, None)
        if len(self._open) >= self._max_batch:
            await self._hand_over(self._cut())

    async def submit(self, job: Mapping[str, Any]) -> asyncio.Future[str]:
        """Queue ``job`` like :meth:`send` and return its future: the job's id once its batch
        is accepted, or its error (which ``flush`` then does not report again)."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._add(job, future)
        if len(self._open) >= self._max_batch:
            await self._hand_over(self._cut())
        return future

    async def send_and_wait(self, job: Mapping[str, Any]) -> str:
        """Queue ``job`` and return its id once its batch is accepted (or raise its error)."""
        return await (await self.submit(job))

    async def flush(self) -> None:
        """Send the open batch now, wait until every batch cut so far is answered, and raise
        :class:`~emq.client.errors.JobsRejected` for the jobs of :meth:`send` not accepted
        since the last report."""
        if self._open:
            await self._hand_over(self._cut())
        await self._idle.wait()
        self._report()

    async def aclose(self) -> None:
        """Deliver everything pending, stop the background tasks, then report as
        :meth:`flush` does. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._ready is None:
            return
        try:
            if self._open:
                await self._hand_over(self._cut())
            await self._idle.wait()
        finally:
            for _ in range(self._max_in_flight):
                await self._ready.put(None)
            self._tasks[0].cancel()  # the linger timer has nothing left to do
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._report()

    def _add(self, job: Mapping[str, Any], future: asyncio.Future[str] | None) -> None:
        if self._closed:
            raise RuntimeError("the producer is closed")
        if self._ready is None:
            self._start()
        if self._key_prefix is not None and "idempotency_key" not in job:
            self._keys_given += 1
            job = {**job, "idempotency_key": f"{self._key_prefix}{self._keys_given}"}
        self._open.append(_Pending(orjson.dumps(job, option=_ENCODE), future))
        if len(self._open) == 1:
            self._deadline = asyncio.get_running_loop().time() + self._linger_s
            self._timer_wake.set()

    def _cut(self) -> list[_Pending]:
        batch, self._open = self._open, []
        self._cuts += 1
        self._unfinished += 1
        self._idle.clear()
        return batch

    async def _hand_over(self, batch: list[_Pending]) -> None:
        assert self._ready is not None
        await self._ready.put(batch)  # waits while every sender is busy: the back-pressure
        await asyncio.sleep(0)  # a sender starts this request while the caller fills the next

    def _report(self) -> None:
        if self._rejected:
            rejected, self._rejected = self._rejected, []
            raise JobsRejected(rejected)

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
            if item.future is not None and not item.future.done():
                item.future.set_result(job_id)

    def _fail(self, batch: list[_Pending], error: BaseException) -> None:
        self.failed += len(batch)
        for item in batch:
            if item.future is None:
                self._rejected.append(Rejected(orjson.loads(item.job), error))
            elif not item.future.done():
                item.future.set_exception(error)
