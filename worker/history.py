"""Traffic history: per topic, per interval, what this worker saw (the capacity planner's input).

Every ``history_interval_s`` (aligned to the wall clock) the recorder writes one row per topic
that had any activity or backlog: deliveries, failures, retries, dead letters, p50/p99 push
latency, the jobs buffered and waiting for quota, the quota and the group count. It also moves the
Prometheus counters forward by the same deltas, so the two never disagree.

Once a second it publishes each moving topic's delivered/s and, every ``LATENCY_EVERY_S`` when
the store is also a :class:`~emq.core.latency.LatencyBoard`, the enqueue-to-delivery latency
counts its deliveries added since (the console's p50/p99 over the last minute, added up across
the fleet by the board).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from emq.core.errors import BackendUnavailable
from emq.core.interfaces import HistoryRow, HistoryStore
from emq.core.latency import LatencyBoard
from emq.core.model import TopicRef
from worker.groups import LatencyHistogram, TopicState, TopicStats
from worker.metrics import WorkerMetrics
from worker.outage import Outage

log = logging.getLogger(__name__)
LATENCY_EVERY_S = 5.0


@dataclass(slots=True)
class _Seen:
    stats: TopicStats
    latency: LatencyHistogram


class HistoryRecorder:
    def __init__(
        self,
        source: str,
        interval_s: float,
        store: HistoryStore | None,
        metrics: WorkerMetrics,
        outage: Outage | None = None,
    ) -> None:
        # History is best effort: a row or a rate that can't be written is dropped, not
        # retried; the outage only decides what gets logged (once per outage).
        self._outage = outage or Outage()
        self._source = source
        self._interval = max(1, int(interval_s))
        self._store = store
        self._metrics = metrics
        self._seen: dict[TopicRef, _Seen] = {}
        self._metric_seen: dict[TopicRef, _Seen] = {}
        self._rates: dict[str, float] = {}  # delivered/s to publish at the next second
        self._moving: set[TopicState] = set()  # topics whose last published rate was not 0
        self._board = store if isinstance(store, LatencyBoard) else None
        # TopicState.e2e when last counted, with the list it was read from: a topic taken
        # again gets a new state whose counts start over (the list, not the state, is kept:
        # a dropped topic's state holds its buffers)
        self._e2e_seen: dict[TopicRef, tuple[list[int], list[int]]] = {}
        self._latency: dict[str, list[int]] = {}  # deliveries' latency counts to publish
        self._delivering: set[TopicState] = set()  # topics that delivered since then
        # The board's window is a minute: publishing every few seconds keeps it as useful for
        # a fraction of the round trips (a worker with 1000 busy topics sends ~3000 commands).
        self.latency_every_s = LATENCY_EVERY_S
        self._next_latency = 0.0
        self._last_sync = time.monotonic()

    async def run(self, topics: Mapping[TopicRef, TopicState]) -> None:
        next_metrics = time.monotonic()
        while True:
            now = time.time()
            boundary = (math.floor(now / self._interval) + 1) * self._interval
            while time.time() < boundary:
                await asyncio.sleep(min(1.0, max(0.0, boundary - time.time())))
                if time.monotonic() >= next_metrics:
                    self.sync_metrics(topics)
                    await self._publish_rates()
                    next_metrics = time.monotonic() + 1.0
            await self.flush(topics, boundary - self._interval)

    async def flush(
        self, topics: Mapping[TopicRef, TopicState], start: float | None = None
    ) -> None:
        interval_start = int(
            start if start is not None else time.time() // self._interval * self._interval
        )
        rows = [r for r in (self._row(t, interval_start) for t in list(topics.values())) if r]
        self.sync_metrics(topics)
        if rows and self._store is not None:
            try:
                await self._store.record(rows)
            except BackendUnavailable as e:
                self._outage.noted("history recorder", e)
                log.debug("history of %d topics not recorded (%s)", len(rows), e)
            else:
                self._outage.resumed("history recorder")

    async def _publish_rates(self) -> None:
        await self._publish_latency()
        if self._store is None or not self._rates:
            return
        try:
            await self._store.publish_rates(self._source, self._rates)
        except BackendUnavailable as e:
            self._outage.noted("rate publisher", e)
        else:
            self._outage.resumed("rate publisher")

    async def _publish_latency(self) -> None:
        now = time.monotonic()
        if self._board is None or not self._delivering or now < self._next_latency:
            return
        self._next_latency = now + self.latency_every_s
        delivering, self._delivering = self._delivering, set()
        for state in delivering:
            self._note_latency(state)
        latency, self._latency = self._latency, {}  # best effort: not re-sent after a failure
        if not latency:
            return
        try:
            await self._board.add_latency(latency)
        except BackendUnavailable as e:
            self._outage.noted("latency publisher", e)
        else:
            self._outage.resumed("latency publisher")

    def _note_latency(self, state: TopicState) -> None:
        """Add what ``state``'s latency counts gained to the next publication (O(buckets))."""
        now = state.e2e
        seen = self._e2e_seen.get(state.ref)
        if seen is None or seen[0] is not now:
            gained = list(now)
        else:
            gained = [a - b for a, b in zip(now, seen[1], strict=True)]
        self._e2e_seen[state.ref] = (now, list(now))
        if not any(gained):
            return
        kept = self._latency.get(state.endpoint)
        if kept is None:
            self._latency[state.endpoint] = gained
        else:
            self._latency[state.endpoint] = [a + b for a, b in zip(kept, gained, strict=True)]

    def _row(self, state: TopicState, interval_start: int) -> HistoryRow | None:
        delta, latency = _delta(state, self._seen)
        backlog = sum(g.buffered() for g in state.groups.values())
        if not (delta.delivered or delta.failed or delta.dead_lettered or backlog):
            return None
        ref = state.ref
        return HistoryRow(
            interval_start=interval_start,
            interval_s=self._interval,
            namespace=ref.namespace.value,
            tenant=ref.tenant,
            topic=ref.topic,
            source=self._source,
            delivered=delta.delivered,
            throttled_backlog=backlog,
            failed=delta.failed,
            retried=delta.retried,
            dead_lettered=delta.dead_lettered,
            p50_ms=latency.quantile(0.5),
            p99_ms=latency.quantile(0.99),
            quota=state.topic.qps,
            groups=state.topic.groups,
        )

    def sync_metrics(self, topics: Mapping[TopicRef, TopicState]) -> None:
        """Move the Prometheus counters forward; note delivered/s per topic for publishing."""
        m = self._metrics
        buffered = in_flight = 0
        now = time.monotonic()
        elapsed = max(1e-3, now - self._last_sync)
        self._last_sync = now
        # Only moving topics are published, and a topic that stops once more with 0: readers
        # ignore entries older than a few seconds, so an idle topic reads as 0 without one.
        # An idle topic costs one comparison here: publishing and diffing 10 000 idle topics
        # every second was most of what an idle worker did.
        rates: dict[str, float] = {}
        moving: set[TopicState] = set()
        for state in list(topics.values()):
            for g in state.groups.values():
                buffered += g.buffered()
            in_flight += state.in_flight
            version = state.stats.version()
            if version == state.metrics_version:
                if state in self._moving:
                    rates[state.endpoint] = 0.0
                continue
            state.metrics_version = version
            delta, _ = _delta(state, self._metric_seen)
            if delta.delivered:
                rates[state.endpoint] = delta.delivered / elapsed
                moving.add(state)
                if self._board is not None:
                    self._delivering.add(state)  # its counts are read when published
            elif state in self._moving:
                rates[state.endpoint] = 0.0
            if delta is not _NOTHING:
                self._count(state.ref, delta)
        self._rates, self._moving = rates, moving
        m.buffered.set(buffered)
        m.in_flight.set(in_flight)

    def _count(self, ref: TopicRef, delta: TopicStats) -> None:
        m = self._metrics
        labels = m.labels(ref)
        for counter, n in (
            (m.delivered, delta.delivered),
            (m.failed, delta.failed),
            (m.retried, delta.retried),
            (m.dead, delta.dead_lettered),
        ):
            if n:
                counter.labels(*labels).inc(n)


# What an idle topic gained: shared, never modified (most topics of a big worker are idle, and
# copying their histograms every second cost more than everything else an idle worker does).
_NOTHING = TopicStats()
_NO_LATENCY = LatencyHistogram()


def _unchanged(now: TopicStats, before: TopicStats) -> bool:
    return (
        now.delivered == before.delivered
        and now.failed == before.failed
        and now.retried == before.retried
        and now.dead_lettered == before.dead_lettered
        and now.latency.counts == before.latency.counts
    )


def _delta(state: TopicState, seen: dict[TopicRef, _Seen]) -> tuple[TopicStats, LatencyHistogram]:
    """What ``state``'s counters gained since the last call with this ``seen`` map.

    The result is read-only: an idle topic gets the shared ``_NOTHING`` and ``_NO_LATENCY``.
    """
    now = state.stats
    before = seen.get(state.ref)
    if before is not None and _unchanged(now, before.stats):
        return _NOTHING, _NO_LATENCY
    if before is None and _unchanged(now, _NOTHING):
        return _NOTHING, _NO_LATENCY  # nothing counted yet: no snapshot to keep either
    snapshot = _Seen(replace(now, latency=now.latency.copy()), now.latency.copy())
    seen[state.ref] = snapshot
    if before is None:
        return replace(now, latency=now.latency.copy()), now.latency.copy()
    b = before.stats
    delta = TopicStats(
        now.delivered - b.delivered,
        now.failed - b.failed,
        now.retried - b.retried,
        now.dead_lettered - b.dead_lettered,
    )
    return delta, now.latency.minus(before.latency)
