"""What only the Redis backend has: Cluster slots, the script cache, restarts, memory use."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from adapters.redis_conn import translated as _translated
from adapters.redis_queue import connect
from emq.core.errors import BackendUnavailable, Fenced
from emq.core.interfaces import ZERO_OFFSET, DeadLetter, PutItem
from emq.core.model import GroupRef, Namespace, Priority, TopicRef
from emq.core.naming import RedisKeys
from emq.stack import Service, free_port
from tests.adapters.conftest import Subject
from tests.adapters.owner_ops import trim, write_checkpoint


def groups_on_distinct_slots(keys: RedisKeys, n: int) -> list[GroupRef]:
    found: dict[int, GroupRef] = {}
    i = 0
    while len(found) < n:
        g = TopicRef(Namespace.ONLINE, "acme", f"topic{i}").group(i % 4)
        found.setdefault(key_slot(keys.stream(g.queue(Priority.HIGH)).encode()), g)
        i += 1
    return list(found.values())


async def test_every_method_works_across_slots_without_crossslot(
    cluster_subject: Subject,
) -> None:
    backend, raw, keys = cluster_subject.backend, cluster_subject.raw, cluster_subject.keys
    assert isinstance(raw, RedisCluster)
    groups = groups_on_distinct_slots(keys, 12)
    await raw.initialize()
    nodes = {raw.get_node_from_key(keys.stream(g.queue(Priority.LOW))) for g in groups}
    assert len(nodes) == 3  # the groups really are spread over every shard
    now = int(time.time() * 1000)
    batch = []
    for n, g in enumerate(groups):
        batch += [
            PutItem(g.queue(Priority.HIGH), f"a{n}", b"plain"),
            PutItem(g.queue(Priority.LOW), f"b{n}", b"idem", idempotency_key=f"k{n}"),
            PutItem(g.queue(Priority.MEDIUM), f"c{n}", b"later", due_ms=now - 1),
        ]
    results = await backend.put(batch)
    assert [r.job_id for r in results] == [i.job_id for i in batch]
    queues = [q for g in groups for q in g.queues()]
    read = await backend.read(dict.fromkeys(queues, ZERO_OFFSET), 10)
    assert len(read) == 2 * len(groups)
    assert await backend.delayed(groups) == [1] * len(groups)
    for g in groups:
        assert await backend.promote_due(g, now, 10) == 1
        await backend.claim(g, 7)
        for q in g.queues():
            entries = read.get(q) or (await backend.read({q: ZERO_OFFSET}, 10))[q]
            await write_checkpoint(backend, q, entries[-1].offset, 7)
            assert await backend.read_checkpoint(q) is not None
            assert await trim(backend, q, 7, 0) == 1
        letter = DeadLetter("", Priority.HIGH, b"dead", "gone", 410, 3, now)
        await backend.dead_letter(g, 7, [letter])
        assert len(await backend.list_dead(g, None, 10)) == 1
        assert await backend.replay_dead(g, None, 10) == 1
    assert await backend.backlog(queues) == [1, 0, 0] * len(groups)  # the replayed letters


async def test_a_lost_script_cache_is_reloaded(redis_subject: Subject) -> None:
    # A restarted or failed-over node has no scripts: NOSCRIPT must not fail a call.
    backend, raw = redis_subject.backend, redis_subject.raw
    assert raw is not None
    q = TopicRef(Namespace.ONLINE, "acme", "t").group(0).queue(Priority.HIGH)
    await backend.put([PutItem(q, "a", b"a")])
    await raw.script_flush()  # on a Cluster client: every primary
    results = await backend.put([PutItem(q, "b", b"b"), PutItem(q, "c", b"c", idempotency_key="k")])
    assert all(r.offset is not None for r in results)
    await raw.script_flush()
    assert await backend.backlog([q]) == [3]
    entries = (await backend.read({q: ZERO_OFFSET}, 10))[q]
    assert [e.payload for e in entries] == [b"a", b"b", b"c"]


async def memory_usage(subject: Subject, key: str) -> int:
    assert subject.raw is not None
    usage = await subject.raw.memory_usage(key, samples=0)
    assert usage is not None
    return int(usage)


async def test_an_emptied_queue_costs_a_few_hundred_bytes(redis_subject: Subject) -> None:
    backend, keys = redis_subject.backend, redis_subject.keys
    q = TopicRef(Namespace.ONLINE, "acme", "t").group(0).queue(Priority.LOW)
    results = await backend.put([PutItem(q, f"j{i}", b"x" * 200) for i in range(50)])
    last = results[-1].offset
    assert last is not None
    await write_checkpoint(backend, q, last, 1)
    assert await trim(backend, q, 1, 0) == 50
    emptied = await memory_usage(redis_subject, keys.stream(q))
    checkpoint = await memory_usage(redis_subject, keys.checkpoint(q))
    print(f"{redis_subject.kind}: emptied stream {emptied} B, checkpoint {checkpoint} B")
    assert emptied < 1024, emptied
    assert checkpoint < 256, checkpoint


async def test_a_restarted_redis_keeps_everything_and_serves_again(
    tmp_path: Path, test_id: str
) -> None:
    # A fault test: Redis stops (AOF fsynced on SIGTERM) and comes back; the same backend object
    # reports BackendUnavailable meanwhile and then works again (reconnect, scripts reloaded).
    server = Service("redis", "redis.sh", tmp_path / "redis", free_port())
    server.start()
    try:
        backend = await connect(f"redis://{server.address}/0", cluster=False, prefix=test_id)
        async with backend:
            q = TopicRef(Namespace.ONLINE, "acme", "t").group(0).queue(Priority.MEDIUM)
            results = await backend.put([PutItem(q, f"j{i}", b"x") for i in range(5)])
            await backend.claim(q.group, 4)
            await write_checkpoint(backend, q, results[1].offset or ZERO_OFFSET, 4)
            server.stop()
            with pytest.raises(BackendUnavailable):
                await backend.backlog([q])
            server.start()
            assert await backend.backlog([q]) == [3]
            more = await backend.put([PutItem(q, "k", b"y", idempotency_key="once")])
            assert more[0].offset is not None and more[0].offset > (
                results[-1].offset or ZERO_OFFSET
            )
            with pytest.raises(Fenced):
                await write_checkpoint(backend, q, more[0].offset, 3)
    finally:
        server.stop()


def test_a_closed_transport_leaked_by_the_driver_reads_as_unavailable() -> None:
    """redis/redis-py#4287: a write on a connection the peer closed raises asyncio's torn-down
    transport as AttributeError; at our seam that is "Redis unavailable", while the same error
    raised by our own code stays what it is (a bug)."""
    leak = compile("None.writelines([])", "/venv/lib/python3.11/asyncio/streams.py", "exec")
    closed = pytest.raises(BackendUnavailable, match="connection closed during put")
    with closed, _translated("put"):
        exec(leak)
    with pytest.raises(AttributeError), _translated("put"):
        None.writelines([])  # type: ignore[attr-defined]
