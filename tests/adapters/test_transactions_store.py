"""The transaction store's contract, on real Redis and in memory (issue 30): a transaction's
jobs are in no queue before its commit is stored, all of them (exactly once) after a release,
even one cut short after its first group and finished by another caller; a rollback deletes
them; two runners never both take one check-back or one topic; a topic written to while a
runner held it stays in the index."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from redis.crc import key_slot

from adapters.memory_queue import MemoryQueueBackend
from adapters.memory_transactions import MemoryTransactionStore
from adapters.redis_transactions import RedisTransactionStore, _Share
from emq.compose import open_queues, open_transactions
from emq.core.errors import BackendUnavailable, PayloadTooLarge
from emq.core.interfaces import ZERO_OFFSET, PutItem, QueueBackend
from emq.core.model import Namespace, Priority, TopicRef
from emq.core.naming import RedisKeys
from emq.core.settings import Settings
from emq.core.transactions import (
    Source,
    TooManyTransactions,
    Transaction,
    TransactionClosed,
    TransactionLimits,
    TransactionStore,
    TxState,
    new_transaction_id,
    prepared_head,
)

TOPIC = TopicRef(Namespace.ONLINE, "acme", "orders")


def test_a_transactions_groups_and_records_are_on_different_slots() -> None:
    """What makes the Cluster case a real one: the topic's transactions and each of its groups
    hash to slots of their own, so no step may touch two of them."""
    keys = RedisKeys("t")
    names = [keys.stream(TOPIC.group(g).queue(Priority.HIGH)) for g in range(3)]
    names.append(keys.transaction(TOPIC, "tx_x", "rec"))
    assert len({key_slot(n.encode()) for n in names}) == 4


LIMITS = TransactionLimits(max_jobs=10, max_open=3)


@pytest.fixture(params=["memory", "redis", "cluster"])
async def stores(
    request: pytest.FixtureRequest, settings: Settings
) -> AsyncIterator[tuple[TransactionStore, QueueBackend]]:
    """The store and its queues: in memory, on the session's Redis, on its Redis Cluster (a
    topic's groups on several shards: every script must keep to one slot)."""
    if request.param == "memory":
        queues: QueueBackend = MemoryQueueBackend()
        yield MemoryTransactionStore(queues), queues
        return
    if request.param == "cluster":
        url = str(request.getfixturevalue("redis_cluster").url)
        settings = replace(settings, redis_url=url, redis_cluster=True)
    queues = await open_queues(settings)
    store = open_transactions(settings)
    yield store, queues
    await store.aclose()
    await queues.aclose()


def jobs(n: int, groups: int = 3, **extra: Any) -> list[PutItem]:
    out = []
    for i in range(n):
        job_id = f"msg_{time.time_ns()}{i}"
        payload = json.dumps({"id": job_id, "t": 0, "job": {"url": "https://e.x/"}}).encode()
        queue = TOPIC.group(i % groups).queue(Priority.MEDIUM if i % 2 else Priority.HIGH)
        out.append(PutItem(queue, job_id, payload, **extra))
    return out


async def visible(queues: QueueBackend, groups: int = 3) -> list[str]:
    """Job ids a worker could read now, every queue of the topic from its start."""
    found = []
    for g in range(groups):
        read = await queues.read({q: ZERO_OFFSET for q in TOPIC.group(g).queues()}, 1000)
        found += [json.loads(e.payload)["id"] for entries in read.values() for e in entries]
    return sorted(found)


async def opened(store: TransactionStore, timeout_s: int = 60) -> Transaction:
    now = int(time.time() * 1000)
    tx = Transaction(new_transaction_id(), TOPIC, "https://p.example/check", timeout_s, now,
                     next_check_ms=now + timeout_s * 1000)  # fmt: skip
    await store.create(tx, LIMITS)
    return tx


async def cut_short(store: TransactionStore, tx_id: str) -> None:
    """A release that dies after its first group: what the committing process leaves."""
    if isinstance(store, MemoryTransactionStore):
        store.fail_release_after = 1
        with pytest.raises(BackendUnavailable):
            await store.release(TOPIC, tx_id)
        store.fail_release_after = None
        return
    assert isinstance(store, RedisTransactionStore)
    (raw,) = await store._run([("LRANGE", store._part(TOPIC, tx_id, "jobs"), 0, -1)], "test")
    share = _Share(TOPIC.group(0))
    for element in raw:
        group, due, key = prepared_head(element)
        if group == 0:
            share.add(element, due, key, store._keys)
    await store._write([share.command(store, tx_id)], "test")


async def test_commit_release_cut_short_then_finished(stores: Any) -> None:
    store, queues = stores
    tx = await opened(store)
    items = jobs(6)
    await store.prepare(TOPIC, tx.id, items[:4], LIMITS)
    await store.prepare(TOPIC, tx.id, items[4:], LIMITS)
    assert await visible(queues) == []
    assert await store.prepared_jobs(TOPIC) == 6
    assert await store.find_job(TOPIC, items[5].job_id) == tx.id
    done, changed = await store.decide(TOPIC, tx.id, TxState.COMMITTED, Source.PRODUCER, "")
    assert changed and done.state is TxState.COMMITTED and not done.released
    assert await visible(queues) == []  # decided, nothing released yet
    await cut_short(store, tx.id)
    assert await visible(queues) == sorted(i.job_id for i in items if i.queue.group.index == 0)
    assert (await store.pending(TOPIC, int(time.time() * 1000)))[1] == [tx.id]
    for _ in range(2):  # a runner finishes it; repeating it appends nothing twice
        assert (await store.release(TOPIC, tx.id)).released
    assert await visible(queues) == sorted(i.job_id for i in items)
    assert await store.prepared_jobs(TOPIC) == 0
    assert await store.find_job(TOPIC, items[5].job_id) is None
    assert (await store.pending(TOPIC, int(time.time() * 1000)))[1] == []
    again, changed = await store.decide(TOPIC, tx.id, TxState.ROLLED_BACK, Source.PRODUCER, "")
    assert not changed and again.state is TxState.COMMITTED
    assert [e.event for e in again.log] == ["created", "prepared", "prepared", "decided",
                                            "released"]  # fmt: skip


async def test_rollback_limits_and_closed(stores: Any) -> None:
    store, queues = stores
    tx = await opened(store)
    await store.prepare(TOPIC, tx.id, jobs(8), LIMITS)
    with pytest.raises(PayloadTooLarge):
        await store.prepare(TOPIC, tx.id, jobs(3), LIMITS)
    assert (await store.get(TOPIC, tx.id)).jobs == 8
    other = TopicRef(Namespace.ONLINE, "acme", "other")
    assert await store.counts([TOPIC, other]) == [(1, 8), (0, 0)]  # (open, prepared jobs)
    done, changed = await store.decide(TOPIC, tx.id, TxState.ROLLED_BACK, Source.CHECK_BACK, "x")
    assert changed and (done.source, done.detail) == (Source.CHECK_BACK, "x")
    assert await store.prepared_jobs(TOPIC) == 0
    assert (await store.release(TOPIC, tx.id)).state is TxState.ROLLED_BACK
    assert await visible(queues) == []
    with pytest.raises(TransactionClosed) as closed:
        await store.prepare(TOPIC, tx.id, jobs(1), LIMITS)
    assert closed.value.transaction.state is TxState.ROLLED_BACK
    assert await store.counts([TOPIC]) == [(0, 0)]
    for _ in range(LIMITS.max_open):
        await opened(store)
    with pytest.raises(TooManyTransactions):
        await opened(store)
    assert len(await store.latest(TOPIC, 10)) == 4


async def test_two_runners_take_each_check_and_topic_once(stores: Any) -> None:
    store, _ = stores
    tx = await opened(store, timeout_s=1)
    now = tx.next_check_ms
    assert await store.due_topics(now - 10, 10) == []
    assert await store.due_topics(now, 10) == [TOPIC]
    claims = await asyncio.gather(*(store.claim_topic(TOPIC, now, 5000) for _ in range(2)))
    assert sum(c is not None for c in claims) == 1
    claim = next(c for c in claims if c is not None)
    due, releasing, later = await store.pending(TOPIC, now)
    assert (due, releasing, later) == ([tx.id], [], None)
    checks = await asyncio.gather(*(store.claim_check(TOPIC, tx.id, now, 5000) for _ in range(2)))
    assert [c.checks for c in checks if c is not None] == [1]
    await store.note_check(TOPIC, tx.id, now + 700, "check 1: check_url answered unknown")
    assert (await store.get(TOPIC, tx.id)).next_check_ms == now + 700
    await opened(store)  # written while the runner holds the topic: its generation moves on
    await store.settle_topic(claim, None)
    assert await store.due_topics(now + 60_000, 10) == [TOPIC]  # not dropped
    claim = await store.claim_topic(TOPIC, now + 60_000, 5000)
    assert claim is not None
    await store.settle_topic(claim, None)
    assert await store.due_topics(now + 10**9, 10) == []


async def test_release_keeps_keys_and_due_times(stores: Any) -> None:
    """A prepared job's idempotency key is checked when it is released (a key used meanwhile
    makes it a duplicate, left out); one with a due time waits in its group's delayed set."""
    store, queues = stores
    tx = await opened(store)
    (keyed,) = jobs(1, groups=1, idempotency_key="order-7:paid")
    (later,) = jobs(1, groups=1, due_ms=int(time.time() * 1000) + 600_000)
    (plain,) = jobs(1, groups=1)
    await store.prepare(TOPIC, tx.id, [keyed, later, plain], LIMITS)
    (first,) = jobs(1, groups=1, idempotency_key="order-7:paid")
    assert not (await queues.put([first]))[0].duplicate  # the key, used outside meanwhile
    await store.decide(TOPIC, tx.id, TxState.COMMITTED, Source.PRODUCER, "")
    assert (await store.release(TOPIC, tx.id)).released
    assert await visible(queues, groups=1) == sorted([first.job_id, plain.job_id])
    assert await queues.delayed([TOPIC.group(0)]) == [1]
