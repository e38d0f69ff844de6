"""What happens after a push: done, retried later, or dead-lettered, durably before it counts.

* 2xx: finished at once.
* Any other answer, a timeout or a connection failure: attempt ``n`` failed. If the topic's
  retry policy allows another attempt, the job is re-scheduled in the group's delayed set, due
  after ``Retry-After`` (429/503 that carry one) or the jittered backoff; otherwise it goes to the
  group's DLQ with the status, the error and the attempts.
* Refused by the SSRF guard, or a request that cannot be sent as given (a URL or header HTTP
  cannot carry, an entry that cannot be decoded): straight to the DLQ, never retried.

A job is marked finished (so the checkpoint may pass it) only after its retry or dead letter is
durably written, with the group's owner epoch: a fenced write means the group now belongs to
someone else, and the worker drops it. Writes are batched per group and flushed by one task.
Waiting for quota happens before the push, in the buffers, so it never consumes an attempt.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from emq.core.errors import BackendUnavailable, Fenced
from emq.core.interfaces import DeadLetter, GroupOwner, PushResult, PutItem, Scheduled
from emq.core.model import Envelope
from worker import callbacks
from worker.groups import Buffered, GroupState
from worker.joblog import JobLog
from worker.outage import Outage

log = logging.getLogger(__name__)

RETRY_AFTER_STATUSES = frozenset({429, 503})


@dataclass(slots=True)
class _Pending:
    retries: list[tuple[Buffered, Scheduled]] = field(default_factory=list)
    dead: list[tuple[Buffered, DeadLetter]] = field(default_factory=list)
    # Final outcomes' callback jobs (worker.callbacks): their jobs finish once these are put.
    callbacks: list[tuple[Buffered, PutItem]] = field(default_factory=list)


class Outcomes:
    """Classifies push results and owns the durable writes they need."""

    def __init__(
        self,
        queues: GroupOwner,
        finish: Callable[[GroupState, Buffered], None],
        drop: Callable[[GroupState, str], None],
        *,
        rand: Callable[[], float] = random.random,
        outage: Outage | None = None,
        joblog: JobLog | None = None,
    ) -> None:
        self._queues = queues
        self._joblog = joblog or JobLog(None, "")
        self._outage = outage or Outage()
        self._finish = finish
        self._drop = drop
        self._rand = rand
        self._pending: dict[GroupState, _Pending] = {}
        self._wakeup = asyncio.Event()

    def pending(self) -> int:
        return sum(len(p.retries) + len(p.dead) + len(p.callbacks) for p in self._pending.values())

    def delivered(self, group: GroupState, item: Buffered, result: PushResult) -> None:
        state = group.topic
        stats = state.stats
        stats.delivered += 1
        stats.latency.add(result.elapsed_s * 1000)
        state.push_sum_s += result.elapsed_s
        now_ms = int(time.time() * 1000)
        job_id, enqueued, attempt = item.accepted()
        latency_ms = now_ms - enqueued if enqueued is not None else 0
        state.delivered_after(latency_ms / 1000)
        self._joblog.delivered(
            group, job_id, now_ms, attempt + 1, result.status, latency_ms, result, item
        )
        url = callbacks.callback_url(state.topic, item.job_dict(), "delivered")
        if url is None:
            self._finish(group, item)
        else:
            self._callback(group, item, url, "delivered", attempt + 1, result.status, None, result)

    def _callback(
        self,
        group: GroupState,
        item: Buffered,
        url: str,
        outcome: str,
        attempts: int,
        status: int | None,
        error: str | None,
        result: PushResult | None,
    ) -> None:
        """Put ``item``'s callback before it finishes (see worker.callbacks)."""
        put = callbacks.callback_item(group, item, url, outcome, attempts, status, error, result)
        self._add(group).callbacks.append((item, put))

    def failed(self, group: GroupState, item: Buffered, result: PushResult) -> None:
        """A non-2xx answer or a transport failure."""
        env = item.envelope
        attempts = env.attempt + 1
        policy = group.topic.topic.retry
        reason = f"HTTP {result.status}" if result.status else (result.error or "failed")
        group.topic.stats.failed += 1
        if attempts >= policy.max_attempts:
            self.dead(group, item, reason, result.status or None, attempts, result)
            return
        wait = policy.backoff_s(attempts, self._rand())
        if result.status in RETRY_AFTER_STATUSES and result.retry_after_s is not None:
            wait = result.retry_after_s
        again = Envelope(env.id, env.job, env.enqueued_ms, attempts, env.signer)
        due = int((time.time() + wait) * 1000)
        group.topic.stats.retried += 1
        honoured = wait == result.retry_after_s and result.status in RETRY_AFTER_STATUSES
        self._joblog.retry(group, item, attempts, result.status, reason, due, honoured, result)
        self._add(group).retries.append((item, Scheduled(item.queue.priority, again.encode(), due)))

    def defer(self, group: GroupState, item: Buffered, due_ms: int) -> None:
        """A job its endpoint cannot take for a while (worker.endpoints: too many parked, or
        disabled): back to the group's delayed set as stored, due at ``due_ms``, its attempts
        untouched (waiting for an endpoint never burns one)."""
        scheduled = Scheduled(item.queue.priority, item.payload, due_ms)
        self._add(group).retries.append((item, scheduled))

    def dead(
        self,
        group: GroupState,
        item: Buffered,
        error: str,
        status: int | None,
        attempts: int,
        result: PushResult | None = None,
    ) -> None:
        letter = DeadLetter(
            "",
            item.queue.priority,
            item.payload,  # as stored: a job that cannot be decoded or re-encoded still fits
            error,
            status,
            attempts,
            int(time.time() * 1000),
        )
        group.topic.stats.dead_lettered += 1
        self._joblog.dead(group, item, attempts, status, error, result)
        self._add(group).dead.append((item, letter))
        url = callbacks.callback_url(group.topic.topic, item.job_dict(), "dead")
        if url is not None:
            self._callback(group, item, url, "dead", attempts, status, error, result)

    async def _put_callbacks(self, group: GroupState, pending: _Pending) -> None:
        """Put the callbacks (idempotent: a repeat after a crash is a duplicate, not stored),
        then finish their jobs."""
        if group.dropped:
            pending.callbacks = []  # its next owner pushes the jobs again, and puts them then
            return
        puts = cast(callbacks.Puts, self._queues)
        await puts.put([put for _, put in pending.callbacks])
        for item, _ in pending.callbacks:
            self._finish(group, item)
        pending.callbacks = []

    def _add(self, group: GroupState) -> _Pending:
        pending = self._pending.get(group)
        if pending is None:
            pending = self._pending[group] = _Pending()
        self._wakeup.set()
        return pending

    async def run(self, interval_s: float = 0.02) -> None:
        """Flush pending writes as they come (at most every ``interval_s``)."""
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            await self.flush()
            await asyncio.sleep(interval_s)

    async def flush(self) -> None:
        """Write every pending retry and dead letter; failed writes stay pending."""
        batch, self._pending = self._pending, {}
        if batch:
            await asyncio.gather(*(self._write(g, p) for g, p in batch.items()))

    async def _write(self, group: GroupState, pending: _Pending) -> None:
        try:
            if pending.retries:
                await self._queues.schedule(group.ref, group.epoch, [s for _, s in pending.retries])
                for item, _ in pending.retries:
                    self._finish(group, item)
                pending.retries = []
            if pending.dead:
                letters = [d for _, d in pending.dead]
                retention = group.topic.topic.dlq_retention  # trimmed in the same step
                await self._queues.dead_letter(group.ref, group.epoch, letters, retention)
                waiting = {id(item) for item, _ in pending.callbacks}
                for item, _ in pending.dead:
                    if id(item) not in waiting:  # (else once its callback is put)
                        self._finish(group, item)
                pending.dead = []
            if pending.callbacks:
                await self._put_callbacks(group, pending)
        except Fenced as e:
            self._drop(group, f"fenced while writing retries: {e}")
        except BackendUnavailable as e:
            # Kept pending (before what came meanwhile); the job stays unfinished until written.
            merged = self._add(group)
            merged.retries[:0] = pending.retries
            merged.dead[:0] = pending.dead
            merged.callbacks[:0] = pending.callbacks
            await self._outage.pause("retry and dead-letter writer", e)
        else:
            self._outage.resumed("retry and dead-letter writer")
