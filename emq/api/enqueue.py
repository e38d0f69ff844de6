"""Accepting jobs: validation, group choice, backlog guard and the durable put.

Group choice: a job with a ``key`` goes to the group the key hashes to (jump consistent hash, so
raising a quota that adds groups moves as few keys as possible); a job with only an
``idempotency_key`` hashes that instead (its de-duplication marker then lives with it on one
Redis slot); keyless jobs are spread round-robin from a random start, so a batch of ``n`` jobs
lands evenly on the groups.

A batch is validated whole before anything is written: a rejected request changes nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import orjson

from capacity.keyhash import jump_hash as jump_hash  # (where the API and benches find it)
from emq.core import schema
from emq.core.errors import BacklogFull
from emq.core.interfaces import ConfigStore, JobProducer, PutItem
from emq.core.jobs import placed_job_ids
from emq.core.model import (
    PRIORITIES,
    GroupRef,
    Job,
    JobLimits,
    Priority,
    QueueRef,
    Topic,
    TopicRef,
)


@dataclass(frozen=True, slots=True)
class Accepted:
    """The answer to an enqueue: one id per job (the first job's id for a duplicate)."""

    ids: list[str]
    duplicates: int


def encode_envelope(job_id: str, job: Job, now_ms: int) -> bytes:
    """``Envelope(job_id, job, now_ms).encode()``, by orjson: the same JSON document (its
    strings were checked for lone surrogates by the job's validation), in a tenth of the time,
    which a batch of 1000 jobs pays 1000 times."""
    return orjson.dumps({"id": job_id, "t": now_ms, "job": job.to_dict()})


def parse_jobs(raw: Sequence[object], limits: JobLimits, *, batch: bool) -> list[Job]:
    """Validate every job; errors name the job's index in a batch (``jobs[3].url``)."""
    if batch:
        return schema.validate(schema.JobBatchIn, {"jobs": raw}).parsed(limits)
    return [schema.validate(schema.JobIn, item).job(limits) for item in raw]


def parse_body(body: object, limits: JobLimits) -> list[Job]:
    """An enqueue request's decoded JSON: one job, or ``{"jobs": [...]}``."""
    if isinstance(body, Mapping) and "jobs" in body:
        return schema.validate(schema.JobBatchIn, body).parsed(limits)
    return [schema.validate(schema.JobIn, body).job(limits)]


class BacklogGuard:
    """Refuses jobs for a topic whose backlog is above its ``max_backlog``.

    Counting a topic's backlog costs one pipelined Redis round trip, too much for every request
    at thousands of requests per second. The count is refreshed at most every ``refresh_s`` and,
    in between, raised by what this process accepted, so it errs towards refusing early.
    """

    def __init__(self, queues: JobProducer, refresh_s: float = 1.0) -> None:
        self._queues = queues
        self._refresh_s = refresh_s
        self._counts: dict[TopicRef, tuple[float, int]] = {}
        self._locks: dict[TopicRef, asyncio.Lock] = {}

    async def backlog(self, topic: Topic) -> int:
        entry = self._counts.get(topic.ref)
        if entry is None or time.monotonic() - entry[0] > self._refresh_s:
            lock = self._locks.setdefault(topic.ref, asyncio.Lock())
            async with lock:  # one refresh per topic at a time; the others reuse it
                entry = self._counts.get(topic.ref)
                if entry is None or time.monotonic() - entry[0] > self._refresh_s:
                    entry = (time.monotonic(), await self.count(topic))
                    self._counts[topic.ref] = entry
        return entry[1]

    async def count(self, topic: Topic) -> int:
        groups = topic.group_refs()
        queued = await self._queues.backlog([q for g in groups for q in g.queues()])
        delayed = await self._queues.delayed(groups)
        return sum(queued) + sum(delayed)

    async def check(self, topic: Topic, adding: int) -> None:
        backlog = await self.backlog(topic)
        if backlog + adding > topic.max_backlog:
            retry_after = max(1.0, (backlog + adding - topic.max_backlog) / topic.qps)
            raise BacklogFull(
                f"topic {topic.ref} has {backlog} jobs waiting (max_backlog {topic.max_backlog})",
                retry_after_s=min(retry_after, 3600.0),
            )

    def accepted(self, topic: Topic, n: int) -> None:
        entry = self._counts.get(topic.ref)
        if entry is not None:
            self._counts[topic.ref] = (entry[0], entry[1] + n)


class Enqueuer:
    """Turns validated jobs into durable queue entries."""

    def __init__(
        self,
        config: ConfigStore,
        queues: JobProducer,
        *,
        limits: JobLimits | None = None,
        guard: BacklogGuard | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._queues = queues
        self.limits = limits or JobLimits()
        self._guard = guard or BacklogGuard(queues)
        self._clock = clock
        self._spread: dict[TopicRef, itertools.count[int]] = {}

    async def enqueue(self, ref: TopicRef, raw: Sequence[object], *, batch: bool) -> Accepted:
        """Validate, place and store ``raw`` jobs for topic ``ref``; all or nothing."""
        topic = await self._config.get_topic(ref)
        return await self._store(topic, parse_jobs(raw, self.limits, batch=batch))

    async def accept(self, ref: TopicRef, body: object) -> Accepted:
        """The same for an enqueue request's body (one job, or ``{"jobs": [...]}``)."""
        topic = await self._config.get_topic(ref)
        return await self._store(topic, parse_body(body, self.limits))

    async def _store(self, topic: Topic, jobs: Sequence[Job]) -> Accepted:
        await self._guard.check(topic, len(jobs))
        items = self._place(topic, jobs)
        results = await self._queues.put(items)
        stored = sum(1 for r in results if not r.duplicate)
        self._guard.accepted(topic, stored)
        return Accepted([r.job_id for r in results], len(results) - stored)

    def place(self, topic: Topic, jobs: Sequence[Job]) -> list[PutItem]:
        """The queue entries of validated ``jobs``, placed as an enqueue places them (the
        transactions' prepare stores them instead of putting them)."""
        return self._place(topic, jobs)

    def _place(self, topic: Topic, jobs: Sequence[Job]) -> list[PutItem]:
        now_ms = int(self._clock() * 1000)
        spread = self._spread.get(topic.ref)
        if spread is None:
            spread = self._spread[topic.ref] = itertools.count(random.randrange(1 << 16))
        places = [(self._group_index(job, topic.groups, spread), job.priority) for job in jobs]
        ids = placed_job_ids(now_ms, places)  # findable by its id
        queues: dict[tuple[int, Priority], QueueRef] = {}  # one QueueRef per queue of the batch
        items = []
        for job, job_id, place in zip(jobs, ids, places, strict=True):
            queue = queues.get(place)
            if queue is None:
                queue = queues[place] = GroupRef(topic.ref, place[0]).queue(place[1])
            items.append(
                PutItem(
                    queue=queue,
                    job_id=job_id,
                    payload=encode_envelope(job_id, job, now_ms),
                    idempotency_key=job.idempotency_key,
                    due_ms=now_ms + int(job.delay_s * 1000) if job.delay_s > 0 else None,
                )
            )
        return items

    @staticmethod
    def _group_index(job: Job, groups: int, spread: itertools.count[int]) -> int:
        if groups == 1:
            return 0
        pin = job.key if job.key is not None else job.idempotency_key
        if pin is not None:
            return jump_hash(pin, groups)
        return next(spread) % groups


async def topic_backlog(queues: JobProducer, topic: Topic) -> dict[str, object]:
    """Backlog per priority and per group, and delayed jobs: the 'show topic' numbers."""
    groups = topic.group_refs()
    counts = await queues.backlog([q for g in groups for q in g.queues()])
    delayed = await queues.delayed(groups)
    per_group = []
    totals = dict.fromkeys((p.value for p in PRIORITIES), 0)
    for i, g in enumerate(groups):
        row = {p.value: counts[3 * i + k] for k, p in enumerate(PRIORITIES)}
        for name, n in row.items():
            totals[name] += n
        per_group.append({"index": g.index, "backlog": row, "delayed": delayed[i]})
    return {"backlog": totals, "delayed": sum(delayed), "per_group": per_group}
