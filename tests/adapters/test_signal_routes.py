"""Hints addressed to owners (adapters.redis_queue.signals), on a real Redis and a real Cluster.

Each worker reads its own inbox and the shared keys only; a put announces a group to its
owner's inbox; hints for groups nobody routes (the old layout, a writer without routes) stay on
the shared keys that everyone reads; a misaddressed hint is handed on to the shared keys; a
reindex moves a group's shared due entry into its owner's index.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from adapters.redis_queue import RedisQueueBackend, connect
from emq.core.interfaces import PutItem, Scheduled
from emq.core.model import GroupRef, Namespace, Priority, TopicRef
from emq.core.naming import RedisKeys
from emq.core.signals import DUE_HINT_HORIZON_S, SignalRoutes
from tests.adapters.conftest import _delete_prefix, _url

BASE_MS = 1_700_000_000_000


def group(topic: str, index: int = 0) -> GroupRef:
    return TopicRef(Namespace.ONLINE, "acme", topic).group(index)


G1, G2, G3 = group("one"), group("two"), group("three")


class Fleet:
    """A producer with routes and two addressed workers, each owning what ``owned`` says."""

    def __init__(self, producer: RedisQueueBackend, raw: aioredis.Redis | RedisCluster) -> None:
        self.producer = producer
        self.raw = raw
        self.workers: dict[str, RedisQueueBackend] = {}
        self.owned: dict[str, set[str]] = {}

    def routes(self) -> SignalRoutes:
        assert self.producer._routes is not None
        return self.producer._routes

    async def put(self, g: GroupRef, due_ms: int | None = None) -> None:
        await self.producer.put([PutItem(g.queue(Priority.MEDIUM), "j", b"{}", due_ms=due_ms)])


@pytest.fixture(params=("redis", "cluster"))
async def fleet(request: pytest.FixtureRequest, test_id: str) -> AsyncIterator[Fleet]:
    url = _url(request.param, request)
    assert url is not None
    cluster = request.param == "cluster"
    routes = SignalRoutes({str(G1): "w1", str(G2): "w2"})
    raw = RedisCluster.from_url(url) if cluster else aioredis.Redis.from_url(url)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(raw.aclose)
        stack.push_async_callback(_delete_prefix, raw, test_id)
        producer = await connect(url, cluster=cluster, prefix=test_id, routes=routes)
        stack.push_async_callback(producer.aclose)
        f = Fleet(producer, raw)
        for name, groups in (("w1", {str(G1)}), ("w2", {str(G2)})):
            worker = await connect(url, cluster=cluster, prefix=test_id)
            stack.push_async_callback(worker.aclose)
            f.owned[name] = set(groups)
            worker.address_to(name, f.owned[name].__contains__)
            f.workers[name] = worker
        yield f


async def test_a_worker_reads_only_its_own_signals_and_the_shared_ones(fleet: Fleet) -> None:
    w1, w2 = fleet.workers["w1"], fleet.workers["w2"]
    c1, _ = await w1.wait_ready(None, 0)
    c2, _ = await w2.wait_ready(None, 0)
    for g in (G1, G2, G3):  # G3 has no route: the shared stream, as in the old layout
        await fleet.put(g)
    c1, names1 = await w1.wait_ready(c1, 1)
    c2, names2 = await w2.wait_ready(c2, 1)
    if set(names1) != {str(G1), str(G3)}:  # on a Cluster the shared read may come first
        c1, more = await w1.wait_ready(c1, 1)
        names1 += more
    if set(names2) != {str(G2), str(G3)}:
        c2, more = await w2.wait_ready(c2, 1)
        names2 += more
    assert set(names1) == {str(G1), str(G3)}
    assert set(names2) == {str(G2), str(G3)}
    keys = RedisKeys(fleet.producer._keys.prefix)
    assert await fleet.raw.xlen(keys.inbox("w1")) == 1
    assert await fleet.raw.xlen(keys.inbox("w2")) == 1
    assert await fleet.raw.xlen(keys.ready()) == 1
    assert await w1.wait_ready(c1, 0.05) == (c1, [])  # nothing read twice


async def test_a_cursor_is_checked(fleet: Fleet) -> None:
    from emq.core.errors import InvalidInput

    with pytest.raises(InvalidInput):
        await fleet.workers["w1"].wait_ready("1-0", 0)
    with pytest.raises(InvalidInput):
        await fleet.workers["w1"].wait_ready("1-0 nope", 0)


async def test_due_entries_go_to_the_owners_index(fleet: Fleet) -> None:
    w1, w2 = fleet.workers["w1"], fleet.workers["w2"]
    await fleet.put(G1, BASE_MS)
    await fleet.put(G2, BASE_MS + 5)
    assert await w1.due_groups(BASE_MS + 10, 10) == [str(G1)]
    assert await w2.due_groups(BASE_MS + 10, 10) == [str(G2)]
    keys = fleet.producer._keys
    assert await fleet.raw.zcard(keys.due_index()) == 0
    assert await w1.promote_due(G1, BASE_MS + 10, 10) == 1
    await w1.reindex_delayed([G1])
    assert await w1.due_groups(BASE_MS + 10, 10) == []


async def test_old_layout_due_entries_move_to_the_owner_on_reindex(fleet: Fleet) -> None:
    w2 = fleet.workers["w2"]
    fleet.routes().replace({})  # a writer that knows no owner: the shared index (old layout)
    await fleet.put(G2, BASE_MS)
    keys = fleet.producer._keys
    assert await fleet.raw.zcard(keys.due_index()) == 1
    assert await w2.due_groups(BASE_MS, 10) == [str(G2)]  # read from the shared index
    assert await fleet.workers["w1"].due_groups(BASE_MS, 10) == [str(G2)]  # everyone sees it
    await w2.reindex_delayed([G2])
    assert await fleet.raw.zcard(keys.due_index()) == 0
    assert await fleet.raw.zscore(keys.due_inbox("w2"), str(G2)) == BASE_MS
    assert await fleet.workers["w1"].due_groups(BASE_MS, 10) == []
    assert await w2.due_groups(BASE_MS, 10) == [str(G2)]
    assert await w2.promote_due(G2, BASE_MS, 10) == 1  # nothing lost on the way


async def test_misaddressed_hints_are_handed_on_to_the_owner(fleet: Fleet) -> None:
    """The routes still name w1 for G1, but it moved to w2 (a rebalance the writer lags)."""
    w1, w2 = fleet.workers["w1"], fleet.workers["w2"]
    fleet.owned["w1"].discard(str(G1))
    fleet.owned["w2"].add(str(G1))
    c1, _ = await w1.wait_ready(None, 0)
    c2, _ = await w2.wait_ready(None, 0)
    await fleet.put(G1)
    await fleet.put(G1, BASE_MS)
    c1, names = await w1.wait_ready(c1, 1)
    assert names == []  # not its group: handed on to the shared stream
    c2, names = await w2.wait_ready(c2, 1)
    assert names == [str(G1)]
    assert await w1.due_groups(BASE_MS, 10) == []  # handed on to the shared index
    assert await w2.due_groups(BASE_MS, 10) == [str(G1)]
    await w2.reindex_delayed([G1])
    keys = fleet.producer._keys
    assert await fleet.raw.zscore(keys.due_inbox("w2"), str(G1)) == BASE_MS
    assert await fleet.raw.zcard(keys.due_inbox("w1")) == 0
    assert await fleet.raw.zcard(keys.due_index()) == 0


async def test_a_worker_signals_and_indexes_its_own_groups_for_itself(fleet: Fleet) -> None:
    """Retries and promotions of an owned group go to the worker's own inbox, routes or not."""
    w1 = fleet.workers["w1"]
    c1, _ = await w1.wait_ready(None, 0)
    await w1.claim(G1, 5)
    from emq.core.interfaces import Scheduled

    await w1.schedule(G1, 5, [Scheduled(Priority.HIGH, b'{"id":"r1"}', BASE_MS)])
    keys = fleet.producer._keys
    assert await fleet.raw.zscore(keys.due_inbox("w1"), str(G1)) == BASE_MS
    assert await w1.promote_due(G1, BASE_MS, 10) == 1
    _, names = await w1.wait_ready(c1, 1)
    assert names == [str(G1)]
    assert await fleet.raw.xlen(keys.ready()) == 0


async def test_the_memory_backend_ignores_addressing() -> None:
    """One process: nothing to address; a worker addressed all the same reads every signal."""
    from adapters.memory_queue import MemoryQueueBackend

    async with MemoryQueueBackend() as memory:
        memory.address_to("w1", lambda name: False)
        cursor, _ = await memory.wait_ready(None, 0)
        await memory.put([PutItem(G2.queue(Priority.MEDIUM), "j", b"{}")])
        assert (await memory.wait_ready(cursor, 1))[1] == [str(G2)]


async def test_addressing_switched_off_keeps_the_shared_layout(
    request: pytest.FixtureRequest, test_id: str
) -> None:
    """``EMQ_SIGNAL_ROUTES=false``: routes given or not, every hint goes to the shared keys."""
    url = _url("redis", request)
    assert url is not None
    raw = aioredis.Redis.from_url(url)
    routes = SignalRoutes({str(G1): "w1"})
    producer = await connect(url, cluster=False, prefix=test_id, routes=routes, addressed=False)
    worker = await connect(url, cluster=False, prefix=test_id, addressed=False)
    try:
        worker.address_to("w1", lambda name: True)
        cursor, _ = await worker.wait_ready(None, 0)
        assert " " not in cursor  # the shared stream's cursor: not addressed
        await producer.put([PutItem(G1.queue(Priority.MEDIUM), "j", b"{}", due_ms=BASE_MS)])
        await producer.put([PutItem(G1.queue(Priority.MEDIUM), "k", b"{}")])
        keys = RedisKeys(test_id)
        # (the job due at once is announced too: a due hint, on the shared stream as well)
        assert await raw.xlen(keys.ready()) == 2 and await raw.zcard(keys.due_index()) == 1
        assert await raw.exists(keys.inbox("w1"), keys.due_inbox("w1")) == 0
        hints: list[int] = []
        worker.watch_due(hints.append)
        assert (await worker.wait_ready(cursor, 1))[1] == [str(G1)]
        assert hints == [BASE_MS]  # (the shared stream's due hint, read by its one reader)
    finally:
        await producer.aclose()
        await worker.aclose()
        await _delete_prefix(raw, test_id)
        await raw.aclose()


async def test_a_worker_trims_its_inbox_and_keeps_it_alive(fleet: Fleet) -> None:
    """Read signals leave the inbox; the inbox keys expire unless their worker renews them."""
    w1 = fleet.workers["w1"]
    c1, _ = await w1.wait_ready(None, 0)
    for _ in range(3):
        await fleet.put(G1)
    await fleet.put(G1, BASE_MS)
    c1, names = await w1.wait_ready(c1, 1)
    assert names == [str(G1)]
    keys = fleet.producer._keys
    w1._upkeep_at = 0.0  # the next call does the upkeep (every UPKEEP_S otherwise)
    assert await w1.wait_ready(c1, 0) == (c1, [])
    assert await fleet.raw.xlen(keys.inbox("w1")) == 1  # the last one read marks the cursor
    for key in (keys.inbox("w1"), keys.due_inbox("w1")):
        assert 0 < await fleet.raw.ttl(key) <= 3600


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def read_hints(worker: RedisQueueBackend, cursor: str) -> str:
    """Read ``worker``'s signals (both streams on a Cluster: two reads) into its watcher."""
    cursor, _ = await worker.wait_ready(cursor, 0.2)
    cursor, _ = await worker.wait_ready(cursor, 0)
    return cursor


async def test_a_job_parked_for_soon_is_hinted_to_its_owner_and_no_other(fleet: Fleet) -> None:
    """GroupOwner.watch_due: a job the API parks for within the horizon reaches its owner's
    watcher through its inbox (field ``d``); one due later is left to the owner's own look;
    the owner's own parking is told at once, with nothing written to its inbox."""
    w1, w2 = fleet.workers["w1"], fleet.workers["w2"]
    hints: dict[str, list[int]] = {"w1": [], "w2": []}
    assert w1.watch_due(hints["w1"].append) and w2.watch_due(hints["w2"].append)
    c1, _ = await w1.wait_ready(None, 0)
    c2, _ = await w2.wait_ready(None, 0)
    soon, later = now_ms() + 300, now_ms() + int(DUE_HINT_HORIZON_S * 1000) + 5000
    await fleet.put(G1, soon)
    await fleet.put(G2, later)
    c1 = await read_hints(w1, c1)
    c2 = await read_hints(w2, c2)
    assert hints == {"w1": [soon], "w2": []}
    assert await w2.due_scan(now_ms(), 10) == ([], later)  # (the owner's look finds it)
    keys = RedisKeys(fleet.producer._keys.prefix)
    inbox = await fleet.raw.xlen(keys.inbox("w1"))
    retry = now_ms() + 200
    await w1.schedule(G1, 0, [Scheduled(Priority.HIGH, b"{}", retry)])
    assert hints["w1"] == [soon, retry]  # at once, without a read
    assert await fleet.raw.xlen(keys.inbox("w1")) == inbox


async def test_a_malformed_signal_counts_for_nothing(fleet: Fleet) -> None:
    """A ready signal is a hint: one without ``g`` or with a ``d`` that is no number names no
    group and hints nothing, and its reader goes on."""
    w1 = fleet.workers["w1"]
    hints: list[int] = []
    w1.watch_due(hints.append)
    c1, _ = await w1.wait_ready(None, 0)
    keys = RedisKeys(fleet.producer._keys.prefix)
    await fleet.raw.xadd(keys.inbox("w1"), {"d": "soon"})
    await fleet.raw.xadd(keys.inbox("w1"), {"x": "1"})
    await fleet.put(G1)
    c1, names = await w1.wait_ready(c1, 0.5)
    assert names == [str(G1)] and hints == []
