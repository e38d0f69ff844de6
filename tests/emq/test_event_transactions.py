"""Events published into a transaction, with the in-memory adapters: the publisher's ``store``
seam (issue 30) stores the deliveries instead of the queues' put, skips its own backlog guard,
and a repeated idempotent event keeps the deliveries recorded first, which are the ones a
release keeps."""

from __future__ import annotations

from collections.abc import Sequence

from adapters.memory_config import MemoryConfigStore
from adapters.memory_queue import MemoryQueueBackend
from adapters.memory_subscriptions import MemorySubscriptionStore
from adapters.memory_transactions import MemoryTransactionStore
from emq.api.enqueue import BacklogGuard
from emq.api.events import Event, EventPublisher
from emq.core.interfaces import PutItem, PutResult
from emq.core.model import Namespace, Tenant, Topic, TopicRef
from emq.core.subscriptions import Subscription, new_key_id, new_subscription_id
from emq.core.transactions import (
    Source,
    Transaction,
    TransactionLimits,
    TxState,
    new_transaction_id,
)

REF = TopicRef(Namespace.ONLINE, "acme", "billing")
LIMITS = TransactionLimits(max_jobs=100, max_open=5)


class Recording(MemoryQueueBackend):
    def __init__(self) -> None:
        super().__init__()
        self.puts: list[list[PutItem]] = []
        self.stored: list[str] = []

    async def put(self, items: Sequence[PutItem]) -> list[PutResult]:
        self.puts.append(list(items))
        results = await super().put(items)
        self.stored += [r.job_id for r in results if not r.duplicate]
        return results


async def _world() -> tuple[MemorySubscriptionStore, Recording, EventPublisher, list[str]]:
    config = MemoryConfigStore()
    await config.create_tenant(Tenant("acme", "Acme", "x", 0.0))
    await config.create_topic(Topic(REF, 300, 3, max_backlog=1))  # one job: a put is refused
    subs, queues = MemorySubscriptionStore(), Recording()
    ids = []
    for n in range(2):
        sub = Subscription(new_subscription_id(), f"https://h{n}.example/hook", ("*",), {},
                           True, new_key_id(), created_at=float(n))  # fmt: skip
        await subs.create(REF, sub, 1000)
        ids.append(sub.id)
    publisher = EventPublisher(config, subs, queues, guard=BacklogGuard(queues))
    return subs, queues, publisher, ids


async def test_a_store_replaces_the_put_and_its_guard() -> None:
    subs, queues, publisher, sub_ids = await _world()
    stored: list[list[PutItem]] = []

    async def store(items: list[PutItem]) -> list[PutResult]:
        stored.append(items)
        return [PutResult(i.job_id) for i in items]

    published = await publisher.publish(REF, [Event("a.b"), Event("c.d")], store=store)
    assert [(p.deliveries, p.duplicates) for p in published] == [(2, 0), (2, 0)]
    assert queues.puts == [] and len(stored) == 1 and len(stored[0]) == 4  # one call, all four
    record = await subs.event(REF, published[0].event_id)
    assert record.deliveries == dict(zip(sub_ids, [i.job_id for i in stored[0][:2]], strict=True))


async def test_a_repeated_idempotent_event_keeps_the_deliveries_the_release_keeps() -> None:
    subs, queues, publisher, sub_ids = await _world()
    txs = MemoryTransactionStore(queues)
    tx = Transaction(new_transaction_id(), REF, "https://shop.example/tx", 60, 0)
    await txs.create(tx, LIMITS)

    async def store(items: list[PutItem]) -> list[PutResult]:
        await txs.prepare(REF, tx.id, items, LIMITS)
        return [PutResult(i.job_id) for i in items]

    event = Event("invoice.paid", idempotency_key="once")
    (first,) = await publisher.publish(REF, [event], store=store)
    recorded = (await subs.event(REF, first.event_id)).deliveries
    (repeat,) = await publisher.publish(REF, [event], store=store)  # a retry in the transaction
    assert repeat.event_id == first.event_id and (repeat.deliveries, repeat.duplicates) == (2, 0)
    assert (await txs.get(REF, tx.id)).jobs == 4
    assert (await subs.event(REF, first.event_id)).deliveries == recorded  # the first ones
    await txs.decide(REF, tx.id, TxState.COMMITTED, Source.PRODUCER, "")
    await txs.release(REF, tx.id)
    assert len([i for put in queues.puts for i in put]) == 4  # all four released...
    assert sorted(queues.stored) == sorted(recorded.values())  # ...the first two stored
    assert set(recorded) == set(sub_ids)
