"""The API's enqueue history stops with its app even when a cancel is swallowed inside a
Redis call (the driver did, in CI: the app's cleanup waited on the task until pytest-timeout
ended the test). Deterministic: a store whose ``record`` swallows the cancel, as redis-py did."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiohttp import web

from adapters.redis_history import MemoryHistoryStore
from emq.api.history import EnqueueHistory
from emq.core.interfaces import HistoryRow
from emq.core.model import Namespace, Topic, TopicRef

TOPIC = Topic(TopicRef(Namespace.ONLINE, "acme", "orders"), 10, 1)


class _SwallowsOneCancel(MemoryHistoryStore):
    """Its first ``record`` waits, and returns normally when cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.recording = asyncio.Event()
        self.swallowed = 0

    async def record(self, rows: Sequence[HistoryRow]) -> None:
        if self.swallowed:
            return await super().record(rows)
        self.recording.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.swallowed += 1  # (and not raised again: what the driver did)


async def test_a_cancel_swallowed_in_a_flush_still_stops_the_history_with_its_app() -> None:
    store = _SwallowsOneCancel()
    history = EnqueueHistory(store, interval_s=1)
    running = history.context(web.Application())
    await anext(running)
    history.add(TOPIC, 3)
    await asyncio.wait_for(store.recording.wait(), 5)  # (the next interval's flush: < 1 s)
    history.add(TOPIC, 2)
    async with asyncio.timeout(5):  # the cleanup: cancel the task, wait for it, flush the rest
        assert await anext(running, None) is None
    assert store.swallowed == 1
    assert [r.enqueued for r in store.rows] == [2]  # what came after the lost flush: recorded
