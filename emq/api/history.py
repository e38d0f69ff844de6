"""The API's share of traffic history: jobs enqueued per topic per interval (source "api")."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator

from aiohttp import web

from emq.core.errors import BackendUnavailable
from emq.core.interfaces import HistoryRow, HistoryStore
from emq.core.model import Topic, TopicRef
from emq.core.supervision import start_supervised
from emq.core.tasks import raise_if_cancelling

log = logging.getLogger(__name__)


class EnqueueHistory:
    def __init__(self, store: HistoryStore, interval_s: float) -> None:
        self._store = store
        self._interval = max(1, int(interval_s))
        self._counts: dict[TopicRef, tuple[int, Topic]] = {}

    def add(self, topic: Topic, n: int) -> None:
        before = self._counts.get(topic.ref, (0, topic))[0]
        self._counts[topic.ref] = (before + n, topic)

    async def run(self) -> None:
        while True:
            raise_if_cancelling()  # (a cancel the Redis driver swallowed in the last flush)
            now = time.time()
            boundary = (math.floor(now / self._interval) + 1) * self._interval
            await asyncio.sleep(boundary - now)
            await self.flush(int(boundary) - self._interval)

    async def flush(self, interval_start: int | None = None) -> None:
        counts, self._counts = self._counts, {}
        if not counts:
            return
        start = (
            interval_start
            if interval_start is not None
            else int(time.time()) // self._interval * self._interval
        )
        rows = [
            HistoryRow(
                interval_start=start,
                interval_s=self._interval,
                namespace=ref.namespace.value,
                tenant=ref.tenant,
                topic=ref.topic,
                source="api",
                enqueued=n,
                quota=topic.qps,
                groups=topic.groups,
            )
            for ref, (n, topic) in counts.items()
        ]
        try:
            await self._store.record(rows)
        except BackendUnavailable as e:
            log.warning("enqueue history of %d topics not recorded (%s)", len(rows), e)

    async def context(self, app: web.Application) -> AsyncIterator[None]:
        """aiohttp ``cleanup_ctx``: record while the app runs, flush what is left at the end."""
        task = start_supervised("api enqueue history", self.run)
        yield
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await self.flush()
