"""Puts coalesced: the enqueue requests of one event-loop iteration reach Redis as one put.

Under load, an API process reads many requests per loop iteration (one ``epoll`` wake-up hands
it the bytes of dozens of connections), and each single-job request would cost its own Redis
pipeline: about a third of the API's CPU per request in a profile (redis-py's Python and the
write system call). :class:`CoalescedPuts` gathers the puts made until the loop turns over
(``call_soon``) and sends them as one :meth:`~emq.core.interfaces.JobProducer.put` (one per
lane: see :class:`CoalescedPuts`), whose APPEND script stores all the plain jobs of a slot in
one command; each caller gets its own slice of the results. Nothing waits on a timer: a lone
request goes out on the next iteration, as soon as it would have.

What each caller sees is what its own put would have given: its results in its items' order,
durable when it returns; the puts of one flush run in their callers' order, so a client that
waits for its 202 before sending the next job of a key keeps that order. A failed flush fails
each of its callers with the same error (a broken Redis fails them all alike anyway). A flush
carries at most ``MAX_ITEMS`` items before another one starts, so batch requests do not build
one huge pipeline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from emq.core.interfaces import BackendHealth, JobProducer, PutItem, PutResult
from emq.core.model import GroupRef, QueueRef

MAX_ITEMS = 2000  # items per flush: bounds one pipeline's size (and its replies' memory)

_Waiting = tuple[Sequence[PutItem], "asyncio.Future[list[PutResult]]"]


class _Lane:
    """The puts waiting for the next flush, of one kind."""

    __slots__ = ("items", "waiting")

    def __init__(self) -> None:
        self.waiting: list[_Waiting] = []
        self.items = 0


class CoalescedPuts(JobProducer):
    """``queues`` with its puts coalesced per loop iteration (the rest passed through).

    Two lanes: puts whose every job has an idempotency key are flushed apart from the others,
    so that they keep the store's one transparent retry on a broken connection (sending them
    twice stores nothing twice; a put with a plain job in it is never sent twice).
    """

    def __init__(self, queues: JobProducer) -> None:
        self._queues = queues
        self._lanes = {True: _Lane(), False: _Lane()}  # by "every job has an idempotency key"
        self._flushes: set[asyncio.Task[None]] = set()  # referenced until done

    @property
    def health(self) -> BackendHealth:  # type: ignore[override]
        return self._queues.health

    async def ping(self) -> None:
        await self._queues.ping()

    async def backlog(self, queues: Sequence[QueueRef]) -> list[int]:
        return await self._queues.backlog(queues)

    async def delayed(self, groups: Sequence[GroupRef]) -> list[int]:
        return await self._queues.delayed(groups)

    async def put(self, items: Sequence[PutItem]) -> list[PutResult]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[PutResult]] = loop.create_future()
        lane = self._lanes[all(item.idempotency_key is not None for item in items)]
        if not lane.waiting:
            loop.call_soon(self._flush, lane)
        elif lane.items + len(items) > MAX_ITEMS:
            self._flush(lane)
            loop.call_soon(self._flush, lane)
        lane.waiting.append((items, done))
        lane.items += len(items)
        return await done

    def _flush(self, lane: _Lane) -> None:
        waiting, lane.waiting, lane.items = lane.waiting, [], 0
        if waiting:
            task = asyncio.create_task(self._send(waiting))
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)

    async def _send(self, waiting: list[_Waiting]) -> None:
        if len(waiting) == 1:  # alone: no concatenation, no slicing
            items, done = waiting[0]
            batch = items
        else:
            batch = [item for items, _ in waiting for item in items]
        try:
            results = await self._queues.put(batch)
        except BaseException as e:
            for _, done in waiting:
                if done.done():  # its caller has gone (a cancelled request)
                    continue
                if isinstance(e, Exception):
                    done.set_exception(e)
                else:  # cancelled (the server shutting down): so are its callers
                    done.cancel()
            if not isinstance(e, Exception):
                raise
            return
        start = 0
        for items, done in waiting:
            end = start + len(items)
            if not done.done():
                done.set_result(results[start:end])
            start = end
