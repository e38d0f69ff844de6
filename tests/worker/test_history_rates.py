"""Delivered/s per topic, published every second for the API and the demo's live view."""

from __future__ import annotations

from adapters.redis_history import MemoryHistoryStore
from emq.core.model import Namespace, Topic, TopicRef
from worker.groups import TopicState
from worker.history import HistoryRecorder
from worker.metrics import WorkerMetrics


class Recorded(MemoryHistoryStore):
    """Keeps what every publication carried."""

    def __init__(self) -> None:
        super().__init__()
        self.published: list[dict[str, float]] = []

    async def publish_rates(self, source, rates) -> None:  # type: ignore[no-untyped-def]
        self.published.append(dict(rates))
        await super().publish_rates(source, rates)


async def test_only_moving_topics_are_published_and_a_stop_once_as_zero() -> None:
    refs = [TopicRef(Namespace.ONLINE, "acme", name) for name in ("busy", "idle")]
    topics = {ref: TopicState(Topic(ref, 100)) for ref in refs}
    busy = topics[refs[0]]
    store = Recorded()
    recorder = HistoryRecorder("w1", 10, store, WorkerMetrics())

    async def second(delivered: int) -> dict[str, float]:
        busy.stats.delivered += delivered
        recorder.sync_metrics(topics)
        await recorder._publish_rates()
        return store.published[-1] if store.published else {}

    rates = await second(50)
    assert set(rates) == {"online/acme/busy"}  # the idle topic never moved: never published
    assert rates["online/acme/busy"] > 0
    assert await second(0) == {"online/acme/busy": 0.0}  # stopped: published once as 0
    count = len(store.published)
    await second(0)
    assert len(store.published) == count  # both idle: nothing was published
    assert await store.rate("online/acme/busy") == 0.0


async def test_delivery_latency_is_published_as_what_each_second_added() -> None:
    ref = TopicRef(Namespace.ONLINE, "acme", "busy")
    busy = TopicState(Topic(ref, 100))
    topics = {ref: busy}
    store = MemoryHistoryStore()
    recorder = HistoryRecorder("w1", 10, store, WorkerMetrics())
    recorder.latency_every_s = 0  # every second, as the rates

    async def second(latencies_s: list[float]) -> None:
        for s in latencies_s:
            busy.stats.delivered += 1
            busy.delivered_after(s)
        recorder.sync_metrics(topics)
        await recorder._publish_rates()

    await second([0.05] * 99 + [3.0])
    await second([])  # nothing new: nothing added twice
    await second([0.05] * 100)
    window = (await store.latency_window([str(ref)]))[str(ref)]
    assert sum(window) == 200


async def test_a_topic_taken_again_adds_its_new_counts() -> None:
    ref = TopicRef(Namespace.ONLINE, "acme", "busy")
    store = MemoryHistoryStore()
    recorder = HistoryRecorder("w1", 10, store, WorkerMetrics())
    first = TopicState(Topic(ref, 100))
    for _ in range(5):
        first.delivered_after(0.05)
    recorder.latency_every_s = 0
    recorder._delivering.add(first)
    await recorder._publish_latency()
    again = TopicState(Topic(ref, 100))  # released and taken back: its counts start over
    again.delivered_after(0.05)
    recorder._delivering.add(again)
    await recorder._publish_latency()
    assert sum((await store.latency_window([str(ref)]))[str(ref)]) == 6


async def test_latency_is_published_every_few_seconds_with_what_they_added() -> None:
    ref = TopicRef(Namespace.ONLINE, "acme", "busy")
    busy = TopicState(Topic(ref, 100))
    topics = {ref: busy}
    store = MemoryHistoryStore()
    recorder = HistoryRecorder("w1", 10, store, WorkerMetrics())
    recorder.latency_every_s = 3600  # one publication now, the next one much later

    async def second() -> int:
        busy.stats.delivered += 10
        for _ in range(10):
            busy.delivered_after(0.05)
        recorder.sync_metrics(topics)
        await recorder._publish_rates()
        window = await store.latency_window([str(ref)])
        return sum(window.get(str(ref), []))

    assert await second() == 10  # the first one goes at once
    assert await second() == 10  # then nothing until latency_every_s has passed
    recorder._next_latency = 0.0  # ... as if it had
    assert await second() == 30  # the held deliveries went with it: none lost
