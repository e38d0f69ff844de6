"""What the worker tells the job-status lookup: job outcomes and, per group, why jobs wait.

Off the hot path: an outcome is one tuple appended to a list (the record is built at flush
time; a delivery's is a plain 5-tuple made in C, the rarer outcomes a :class:`JobRecord`); the
list is written in one round trip just before each checkpoint (so a job the checkpoint passed
has its record written), and dropped, not retried, when Redis cannot take it (records are
informational; at most :data:`MAX_PENDING` are held). Snapshots of the groups
with work (buffered or in flight) are published once a second.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

import orjson

from emq.core.errors import BackendUnavailable
from emq.core.interfaces import PushResult
from emq.core.jobs import EndpointWait, GroupSnapshot, JobRecord, JobStore, QueueSnapshot
from emq.core.model import GroupRef
from worker import attempt_log
from worker.groups import Buffered, GroupState, priority_index

log = logging.getLogger(__name__)

MAX_PENDING = 200_000  # records held while Redis is away; the oldest are dropped beyond
SNAPSHOT_INTERVAL_S = 1.0


class JobLog:
    def __init__(self, store: JobStore | None, worker_id: str) -> None:
        self._store = store
        self.enabled = store is not None and store.ttl_s > 0
        self._worker = worker_id
        # JobRecords, and deliveries as (job id, at ms, attempt, status, latency ms), in order
        self._pending: list[tuple[Any, ...]] = []
        # The attempts of the rarer outcomes (retry, dead): (record, result, group, item); a
        # delivery's ride in its tuple (worker.attempt_log)
        self._more: list[tuple[JobRecord, PushResult | None, GroupState, Buffered]] = []
        self.dropped = 0

    def _add(self, entry: tuple[Any, ...]) -> None:
        if not entry[0]:
            return  # an unreadable entry has no id to look it up by
        pending = self._pending
        pending.append(entry)
        if len(pending) > MAX_PENDING:
            self._shed()

    def _shed(self) -> None:
        pending = self._pending
        excess = len(pending) - MAX_PENDING
        del pending[:excess]
        self.dropped += excess
        del self._more[: max(0, len(self._more) - MAX_PENDING)]

    def delivered(
        self,
        group: GroupState,
        job_id: str,
        now_ms: int,
        attempts: int,
        status: int,
        ms: int,
        result: PushResult | None = None,
        item: Buffered | None = None,
    ) -> None:
        if self.enabled and job_id:  # (_add inlined: one per delivered job)
            pending = self._pending
            pending.append((job_id, now_ms, attempts, status, ms, result, group, item))
            if len(pending) > MAX_PENDING:
                self._shed()

    def retry(
        self,
        group: GroupState,
        item: Buffered,
        attempt: int,
        status: int | None,
        error: str,
        next_ms: int,
        retry_after: bool,
        result: PushResult | None = None,
    ) -> None:
        if self.enabled:
            now_ms = int(time.time() * 1000)
            record = JobRecord(
                item.job_id(),
                "retry_wait",
                now_ms,
                attempt,
                status or None,
                error,
                None,
                next_ms,
                retry_after,
            )
            self._add(record)
            self._more.append((record, result, group, item))

    def dead(
        self,
        group: GroupState,
        item: Buffered,
        attempts: int,
        status: int | None,
        error: str,
        result: PushResult | None = None,
    ) -> None:
        if self.enabled:
            now_ms = int(time.time() * 1000)
            record = JobRecord(item.job_id(), "dead", now_ms, attempts, status, error)
            self._add(record)
            self._more.append((record, result, group, item))

    async def flush(self) -> None:
        """Write the pending records, with their attempts, index entries and kept deliveries
        (one round trip); on failure they are dropped."""
        if not self._pending or self._store is None:
            return
        batch, self._pending = self._pending, []
        more, self._more = self._more, []
        records = [
            (
                r[0],
                _encode(r)
                if isinstance(r, JobRecord)
                else attempt_log.delivered_record(r)
                if len(r) == 8 and r[5] is not None
                else _DELIVERED % r[1:5],
            )
            for r in batch
        ]
        try:
            writes = attempt_log.writes(batch, more)
            if writes.empty:
                await self._store.record(records)
            else:
                await self._store.record(records, writes.attempts, writes.index, writes.kept)
        except BackendUnavailable as e:
            log.debug("%d job records not written (%s)", len(records), e)

    async def trim(self, every_s: float = 5.0) -> None:
        """Keep the attempt log within its budget (every ``every_s``; any worker may)."""
        if self._store is None or not self.enabled:
            return
        while True:
            await asyncio.sleep(every_s)
            try:
                await self._store.trim_attempts()
            except BackendUnavailable as e:
                log.debug("attempt log not trimmed (%s)", e)

    async def run(self, groups: Mapping[str, GroupState]) -> None:
        """Publish the snapshots of the groups with work, once a second."""
        if self._store is None:
            return
        while True:
            await asyncio.sleep(SNAPSHOT_INTERVAL_S)
            snaps = self.snapshots(groups, time.time())
            try:
                await self._store.publish(snaps)
            except BackendUnavailable as e:
                log.debug("group snapshots not published (%s)", e)

    def snapshots(
        self, groups: Mapping[str, GroupState], now: float
    ) -> list[tuple[GroupRef, bytes]]:
        out = []
        for g in list(groups.values()):
            rates = g.topic.rates
            parked = rates is not None and rates.parked > 0 and rates.has_parked(g)
            if g.dropped or not (g.buffered() or g.in_flight or parked):
                continue
            out.append((g.ref, self.snapshot_json(g, now)))
        return out

    def snapshot_json(self, g: GroupState, now: float) -> bytes:
        """``snapshot(g, now).to_dict()`` as JSON, built directly: every group with work, every
        second, so its cost grows with the groups owned (27 us a group the long way, a fifth
        of a core for 6670 groups; ``emq bench dispatch --workload W7``)."""
        buffers = g.buffers
        counter = g.counter
        quota_until = None
        buffered = buffers is not None and (buffers[0] or buffers[1] or buffers[2])
        if buffered and counter.available(now) == 0:
            quota_until = int((now + counter.wait_s(now)) * 1000)
        queues = {}
        for i, (q, p) in enumerate(g.progress.items()):  # (high, medium, low: buffers' order)
            buffer = buffers[i] if buffers is not None else None
            head = str(buffer[0].offset) if buffer else None
            queues[q.priority.value] = [str(p.committed), str(p.last_fetched), head]
        doc = {
            "w": self._worker,
            "at": int(now * 1000),
            "qu": quota_until,
            "ef": g.topic.room() <= 0,
            "q": queues,
        }
        rates = g.topic.rates
        if rates is not None and rates.watching:  # an endpoint is not open: say which
            doc["ep"] = rates.waits(g, time.monotonic(), now)
        return orjson.dumps(doc)

    def snapshot(self, g: GroupState, now: float) -> GroupSnapshot:
        quota_until = None
        if g.buffered() and g.counter.available(now) == 0:
            quota_until = int((now + g.counter.wait_s(now)) * 1000)
        buffers = g.buffers
        queues = {}
        for q, p in g.progress.items():
            buffer = buffers[priority_index(q)] if buffers is not None else None
            head = str(buffer[0].offset) if buffer else None
            queues[q.priority.value] = QueueSnapshot(str(p.committed), str(p.last_fetched), head)
        rates = g.topic.rates
        waits = {}
        if rates is not None and rates.watching:
            waits = {
                name: EndpointWait.from_list(v)
                for name, v in rates.waits(g, time.monotonic(), now).items()
            }
        return GroupSnapshot(
            self._worker, int(now * 1000), quota_until, g.topic.room() <= 0, queues, waits
        )


# A delivery's record, formatted directly: the worker writes one per delivered job, and the
# format is 8x cheaper than building the dict and encoding it (JobRecord.from_dict reads the
# fields it lacks as their defaults).
_DELIVERED = b'{"s":"delivered","at":%d,"n":%d,"st":%d,"lat":%d}'


def _encode(r: JobRecord) -> bytes:
    if r.state == "delivered" and r.status is not None and r.latency_ms is not None:
        return _DELIVERED % (r.at_ms, r.attempt, r.status, r.latency_ms)
    return orjson.dumps(r.to_dict())
