"""One contract for every :class:`~emq.core.interfaces.QueueBackend`: memory, Redis, Redis Cluster.

Each test runs three times (the ``subject`` fixture's params). Where a behaviour can only be
observed differently (an idempotency window expires on the injected clock in memory; on Redis the
marker's TTL is what proves it), the test says so.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio.cluster import RedisCluster

from adapters.memory_queue import MemoryQueueBackend
from adapters.redis_queue import RedisQueueBackend, connect
from emq.core.errors import BackendUnavailable, Fenced, InvalidInput
from emq.core.interfaces import ZERO_OFFSET, DeadLetter, Entry, Offset, PutItem, QueueBackend
from emq.core.model import DlqRetention, GroupRef, Namespace, Priority, QueueRef, TopicRef
from emq.core.naming import RedisKeys
from emq.stack import free_port
from tests.adapters.conftest import IDEMPOTENCY_WINDOW_S, Subject
from tests.adapters.owner_ops import trim, write_checkpoint

HIGH, MEDIUM, LOW = Priority.HIGH, Priority.MEDIUM, Priority.LOW


def group(topic: str = "orders", index: int = 0) -> GroupRef:
    return TopicRef(Namespace.ONLINE, "acme", topic).group(index)


def queue(topic: str = "orders", priority: Priority = MEDIUM, index: int = 0) -> QueueRef:
    return group(topic, index).queue(priority)


def items(q: QueueRef, n: int, tag: str = "j") -> list[PutItem]:
    return [PutItem(q, f"{tag}{i}", f"payload-{tag}{i}".encode()) for i in range(n)]


def now_ms() -> int:
    return int(time.time() * 1000)


async def read_all(backend: QueueBackend, q: QueueRef, after: Offset = ZERO_OFFSET) -> list[Entry]:
    return (await backend.read({q: after}, 10_000)).get(q, [])


async def put_n(backend: QueueBackend, q: QueueRef, n: int, tag: str = "j") -> list[Offset]:
    results = await backend.put(items(q, n, tag))
    offsets = [r.offset for r in results]
    assert None not in offsets
    return [o for o in offsets if o is not None]


def letter(priority: Priority, payload: bytes, status: int | None = 500) -> DeadLetter:
    return DeadLetter("", priority, payload, "HTTP 500", status, 8, 1_700_000_000_000)


# --------------------------------------------------------------------------- put and read


async def test_put_then_read_in_order_with_growing_offsets(backend: QueueBackend) -> None:
    q = queue()
    results = await backend.put(items(q, 5))
    assert [r.job_id for r in results] == [f"j{i}" for i in range(5)]
    assert not any(r.duplicate for r in results)
    offsets = [r.offset for r in results]
    assert all(o is not None for o in offsets)
    assert offsets == sorted(offsets) and len(set(offsets)) == 5  # type: ignore[type-var]
    entries = await read_all(backend, q)
    assert [e.offset for e in entries] == offsets
    assert [e.payload for e in entries] == [f"payload-j{i}".encode() for i in range(5)]
    more = await put_n(backend, q, 2, "k")
    assert more[0] > entries[-1].offset  # offsets keep growing across puts
    after = await read_all(backend, q, entries[-1].offset)
    assert [e.payload for e in after] == [b"payload-k0", b"payload-k1"]
    assert await backend.put([]) == []


async def test_batch_put_across_200_queues_returns_results_in_order(backend: QueueBackend) -> None:
    queues = [queue(f"t{i % 67}", (HIGH, MEDIUM, LOW)[i % 3], i % 2) for i in range(200)]
    batch = [PutItem(q, f"id{n}", f"p{n}".encode()) for n in range(3) for q in queues]
    results = await backend.put(batch)
    assert [r.job_id for r in results] == [item.job_id for item in batch]
    got = await backend.read(dict.fromkeys(queues, ZERO_OFFSET), 10)
    assert len(got) == 200
    for item, result in zip(batch, results, strict=True):
        entries = got[item.queue]
        assert result.offset in [e.offset for e in entries]
        assert next(e.payload for e in entries if e.offset == result.offset) == item.payload
    for q in queues:  # per queue, input order is stream order
        assert [e.payload for e in got[q]] == [f"p{n}".encode() for n in range(3)]


async def test_mixed_batch_keeps_each_queues_input_order(backend: QueueBackend) -> None:
    q = queue()
    batch = [
        PutItem(q, "a", b"a"),
        PutItem(q, "b", b"b", idempotency_key="kb"),
        PutItem(q, "c", b"c"),
        PutItem(q, "d", b"d", due_ms=now_ms() + 60_000),
        PutItem(q, "e", b"e"),
    ]
    results = await backend.put(batch)
    assert [r.job_id for r in results] == ["a", "b", "c", "d", "e"]
    assert results[3].offset is None
    assert [e.payload for e in await read_all(backend, q)] == [b"a", b"b", b"c", b"e"]


async def test_read_many_queues_in_one_call(backend: QueueBackend) -> None:
    busy = [queue("a", HIGH), queue("b", LOW), queue("c", MEDIUM, 3)]
    idle = queue("idle")
    for i, q in enumerate(busy):
        await put_n(backend, q, 3 + i)
    first = await backend.read({**dict.fromkeys(busy, ZERO_OFFSET), idle: ZERO_OFFSET}, 2)
    assert set(first) == set(busy)  # queues with nothing new are left out
    assert all(len(entries) == 2 for entries in first.values())
    nxt = await backend.read({q: first[q][-1].offset for q in busy}, 100)
    assert [len(nxt[q]) for q in busy] == [1, 2, 3]
    assert await backend.read({q: nxt[q][-1].offset for q in busy}, 100) == {}
    assert await backend.read({}, 10) == {}


async def test_unread_names_the_queues_with_an_entry_after_their_offset(
    backend: QueueBackend,
) -> None:
    # The worker's sweep: which owned queues hold a job past what was fetched (a lost signal)?
    busy = [queue("a", HIGH), queue("b", LOW), queue("c", MEDIUM, 3)]
    never = queue("never")  # no stream at all
    offsets = {q: await put_n(backend, q, 2 + i) for i, q in enumerate(busy)}
    asked = {**dict.fromkeys(busy, ZERO_OFFSET), never: ZERO_OFFSET}
    assert await backend.unread(asked) == set(busy)
    # Past the last entry: nothing; past the one before it: the last one is unread.
    caught_up = {q: o[-1] for q, o in offsets.items()}
    assert await backend.unread({**caught_up, never: ZERO_OFFSET}) == set()
    behind = {**caught_up, busy[1]: offsets[busy[1]][-2]}
    assert await backend.unread(behind) == {busy[1]}
    await put_n(backend, busy[2], 1, "late")  # appended after the consumer caught up
    assert await backend.unread(caught_up) == {busy[2]}
    assert await backend.unread({}) == set()
    # Many queues in one call (more than one script's worth on Redis).
    many = [queue(f"m{i}") for i in range(1100)]
    await backend.put([PutItem(q, "x", b"x") for q in many[::7]])
    assert await backend.unread(dict.fromkeys(many, ZERO_OFFSET)) == set(many[::7])


# --------------------------------------------------------------------------- idempotency


async def test_duplicate_returns_the_first_job_and_stores_nothing(subject: Subject) -> None:
    backend, q = subject.backend, queue()
    first = await backend.put([PutItem(q, "first", b"one", idempotency_key="k1")])
    assert not first[0].duplicate and first[0].offset is not None
    again = await backend.put(
        [
            PutItem(q, "second", b"two", idempotency_key="k1"),
            PutItem(q.group.queue(HIGH), "third", b"three", idempotency_key="k1"),
            PutItem(q, "fourth", b"four", idempotency_key="k1", due_ms=now_ms()),
        ]
    )
    assert [(r.job_id, r.duplicate, r.offset) for r in again] == [("first", True, None)] * 3
    assert [e.payload for e in await read_all(backend, q)] == [b"one"]
    assert await read_all(backend, q.group.queue(HIGH)) == []
    assert await backend.delayed([q.group]) == [0]
    # the marker lives with the group: another group may use the same key
    other = await backend.put([PutItem(queue("other"), "x", b"x", idempotency_key="k1")])
    assert not other[0].duplicate


async def test_a_duplicate_within_one_batch_is_caught(backend: QueueBackend) -> None:
    q = queue()
    results = await backend.put(
        [PutItem(q, "a", b"a", idempotency_key="k"), PutItem(q, "b", b"b", idempotency_key="k")]
    )
    assert [(r.job_id, r.duplicate) for r in results] == [("a", False), ("a", True)]
    assert len(await read_all(backend, q)) == 1


async def test_idempotency_window_expires(subject: Subject) -> None:
    backend, q = subject.backend, queue()
    await backend.put([PutItem(q, "first", b"one", idempotency_key="k1")])
    if subject.raw is None:  # memory: the window runs on the injected clock
        subject.clock.advance(IDEMPOTENCY_WINDOW_S - 1)
        assert (await backend.put([PutItem(q, "x", b"x", idempotency_key="k1")]))[0].duplicate
        subject.clock.advance(1)
        later = await backend.put([PutItem(q, "second", b"two", idempotency_key="k1")])
        assert later[0].job_id == "second" and not later[0].duplicate
        assert len(await read_all(backend, q)) == 2
    else:  # Redis expires the marker itself: its TTL is the window
        ttl = await subject.raw.ttl(subject.keys.idempotency(q.group, "k1"))
        assert IDEMPOTENCY_WINDOW_S - 5 <= ttl <= IDEMPOTENCY_WINDOW_S


# --------------------------------------------------------------------------- delayed jobs


async def test_delayed_jobs_wait_until_promoted(backend: QueueBackend) -> None:
    g, due = group(), now_ms() + 60_000
    results = await backend.put(
        [
            PutItem(g.queue(HIGH), "h", b"high-job", due_ms=due),
            PutItem(g.queue(LOW), "l", b"low-job", due_ms=due + 1),
        ]
    )
    assert [(r.job_id, r.offset, r.duplicate) for r in results] == [
        ("h", None, False),
        ("l", None, False),
    ]
    assert await backend.delayed([g, group("other")]) == [2, 0]
    assert await backend.read(dict.fromkeys(g.queues(), ZERO_OFFSET), 10) == {}
    assert await backend.promote_due(g, due - 1, 100) == 0
    assert await backend.promote_due(g, due, 100) == 1
    assert [e.payload for e in await read_all(backend, g.queue(HIGH))] == [b"high-job"]
    assert await read_all(backend, g.queue(LOW)) == []
    assert await backend.promote_due(g, due + 1, 100) == 1
    assert [e.payload for e in await read_all(backend, g.queue(LOW))] == [b"low-job"]
    assert await backend.promote_due(g, due + 10, 100) == 0
    assert await backend.delayed([g]) == [0]
    assert await read_all(backend, g.queue(MEDIUM)) == []


async def test_promotion_is_ordered_limited_and_never_duplicates(backend: QueueBackend) -> None:
    g, base = group(), now_ms()
    batch = [
        PutItem(g.queue(MEDIUM), f"j{i}", f"p{i:02}".encode(), due_ms=base + i) for i in range(30)
    ]
    await backend.put(batch[::-1])  # stored out of order: due time decides
    assert await backend.promote_due(g, base + 100, 5) == 5
    assert await backend.promote_due(g, base + 100, 0) == 0
    moved = await asyncio.gather(*(backend.promote_due(g, base + 100, 4) for _ in range(10)))
    assert sum(moved) == 25
    payloads = [e.payload for e in await read_all(backend, g.queue(MEDIUM))]
    assert payloads == [f"p{i:02}".encode() for i in range(30)]
    assert await backend.delayed([g]) == [0]


# --------------------------------------------------------------------------- checkpoints


async def test_checkpoints_only_move_forward(backend: QueueBackend) -> None:
    q = queue()
    offsets = await put_n(backend, q, 5)
    assert await backend.read_checkpoint(q) is None
    await backend.claim(q.group, 1)
    await write_checkpoint(backend, q, offsets[2], 1)
    ckpt = await backend.read_checkpoint(q)
    assert ckpt is not None and (ckpt.offset, ckpt.epoch) == (offsets[2], 1)
    await write_checkpoint(backend, q, offsets[1], 1)  # backwards: ignored
    await write_checkpoint(backend, q, offsets[2], 1)  # same: ignored
    assert (await backend.read_checkpoint(q)).offset == offsets[2]  # type: ignore[union-attr]
    await backend.claim(q.group, 2)
    await write_checkpoint(backend, q, offsets[4], 2)
    ckpt = await backend.read_checkpoint(q)
    assert ckpt is not None and (ckpt.offset, ckpt.epoch) == (offsets[4], 2)
    assert await backend.read_checkpoint(q.group.queue(HIGH)) is None


async def test_a_fenced_owner_changes_nothing(backend: QueueBackend) -> None:
    q = queue()
    offsets = await put_n(backend, q, 6)
    await backend.claim(q.group, 1)
    await write_checkpoint(backend, q, offsets[3], 1)
    await backend.claim(q.group, 2)
    await backend.claim(q.group, 2)  # re-claiming the current epoch is fine
    with pytest.raises(Fenced):
        await write_checkpoint(backend, q, offsets[5], 1)
    with pytest.raises(Fenced):
        await trim(backend, q, 1, 0)
    with pytest.raises(Fenced):
        await backend.dead_letter(q.group, 1, [letter(MEDIUM, b"x")])
    with pytest.raises(Fenced):
        await backend.claim(q.group, 1)
    ckpt = await backend.read_checkpoint(q)
    assert ckpt is not None and (ckpt.offset, ckpt.epoch) == (offsets[3], 1)
    assert len(await read_all(backend, q)) == 6
    assert await backend.list_dead(q.group, None, 10) == []
    assert await backend.backlog([q]) == [2]
    other = queue("other")  # fencing is per group
    await write_checkpoint(backend, other, Offset(1, 0), 1)


# --------------------------------------------------------------------------- backlog and trim


async def test_backlog_before_and_after_checkpoints_and_trims(backend: QueueBackend) -> None:
    q, idle = queue(), queue("idle")
    assert await backend.backlog([q, idle]) == [0, 0]
    offsets = await put_n(backend, q, 10)
    assert await backend.backlog([q, idle]) == [10, 0]
    await write_checkpoint(backend, q, offsets[3], 1)
    assert await backend.backlog([q]) == [6]
    assert await trim(backend, q, 1, 0) == 4
    assert await backend.backlog([q]) == [6]
    await write_checkpoint(backend, q, offsets[9], 1)
    assert await backend.backlog([q]) == [0]
    assert await trim(backend, q, 1, 0) == 6
    more = await put_n(backend, q, 3)
    assert more[0] > offsets[-1]  # an emptied queue keeps growing its offsets
    assert await backend.backlog([q, idle, q]) == [3, 0, 3]


async def test_trim_keeps_retain_committed_entries_and_nothing_above(backend: QueueBackend) -> None:
    q = queue()
    assert await trim(backend, q, 1, 0) == 0  # no checkpoint: nothing is finished
    offsets = await put_n(backend, q, 10)
    assert await trim(backend, q, 1, 0) == 0
    await write_checkpoint(backend, q, offsets[5], 1)  # entries 0..5 are finished
    assert await trim(backend, q, 1, 2) == 4
    assert [e.offset for e in await read_all(backend, q)] == offsets[4:]
    assert await trim(backend, q, 1, 2) == 0
    assert await trim(backend, q, 1, 5) == 0  # fewer than retain committed: keep them all
    assert await trim(backend, q, 1, 0) == 2
    assert [e.offset for e in await read_all(backend, q)] == offsets[6:]
    await write_checkpoint(backend, q, offsets[9], 1)
    assert await trim(backend, q, 1, 1) == 3
    assert [e.offset for e in await read_all(backend, q)] == offsets[9:]


# --------------------------------------------------------------------------- dead letters


async def test_dead_letters_list_page_and_replay(backend: QueueBackend) -> None:
    g = group()
    await backend.claim(g, 3)
    letters = [letter(HIGH, b"h1"), letter(LOW, b"l1", None), letter(HIGH, b"h2")]
    await backend.dead_letter(g, 3, letters)
    await backend.dead_letter(g, 3, [])
    listed = await backend.list_dead(g, None, 10)
    assert [(d.priority, d.payload, d.status) for d in listed] == [
        (HIGH, b"h1", 500),
        (LOW, b"l1", None),
        (HIGH, b"h2", 500),
    ]
    assert all(d.error == "HTTP 500" and d.attempts == 8 for d in listed)
    assert all(d.failed_at_ms == 1_700_000_000_000 for d in listed)
    ids = [d.id for d in listed]
    assert [Offset.parse(i) for i in ids] == sorted(Offset.parse(i) for i in ids)
    assert [d.id for d in await backend.list_dead(g, ids[0], 1)] == [ids[1]]
    assert await backend.list_dead(g, ids[2], 10) == []
    assert await backend.list_dead(group("other"), None, 10) == []

    assert await backend.replay_dead(g, [ids[1], ids[1]], 10) == 1  # one move per letter
    assert [e.payload for e in await read_all(backend, g.queue(LOW))] == [b"l1"]
    assert [d.id for d in await backend.list_dead(g, None, 10)] == [ids[0], ids[2]]
    assert await backend.replay_dead(g, None, 1) == 1
    assert await backend.replay_dead(g, None, 10) == 1
    assert [e.payload for e in await read_all(backend, g.queue(HIGH))] == [b"h1", b"h2"]
    assert await backend.list_dead(g, None, 10) == []
    assert await backend.replay_dead(g, None, 10) == 0
    assert await backend.replay_dead(g, [ids[0]], 10) == 0
    with pytest.raises(InvalidInput):
        await backend.replay_dead(g, ["+"], 10)
    with pytest.raises(InvalidInput):
        await backend.list_dead(g, "nope", 10)


async def payloads_dead(backend: QueueBackend, g: GroupRef) -> list[bytes]:
    return [d.payload for d in await backend.list_dead(g, None, 1000)]


async def test_a_dead_letter_append_keeps_the_newest_max_entries(backend: QueueBackend) -> None:
    g = group()
    await backend.claim(g, 2)
    keep3 = DlqRetention(max_entries=3)
    await backend.dead_letter(g, 2, [letter(HIGH, f"a{i}".encode()) for i in range(5)], keep3)
    assert await payloads_dead(backend, g) == [b"a2", b"a3", b"a4"]  # exactly, the new ones too
    await backend.dead_letter(g, 2, [letter(LOW, b"b0")], keep3)
    assert await payloads_dead(backend, g) == [b"a3", b"a4", b"b0"]
    await backend.claim(g, 3)
    with pytest.raises(Fenced):  # a fenced append neither adds nor trims
        await backend.dead_letter(g, 2, [letter(LOW, b"stale")], DlqRetention(max_entries=1))
    assert await payloads_dead(backend, g) == [b"a3", b"a4", b"b0"]
    assert await backend.trim_dead([(g, 2, DlqRetention(max_entries=1))]) == 0  # fenced
    assert await backend.trim_dead([(g, 3, DlqRetention(max_entries=1))]) == 2  # no letter needed
    assert await payloads_dead(backend, g) == [b"b0"]


async def add_aged_letter(subject: Subject, g: GroupRef, payload: bytes, age_s: int) -> None:
    """A dead letter ``age_s`` old. In memory the injected clock moves on after it; on Redis
    (whose ids come from its own clock) it is written with an id from ``age_s`` ago."""
    if subject.raw is None:
        await subject.backend.dead_letter(g, 1, [letter(HIGH, payload)])
        subject.clock.advance(age_s)
        return
    fields = {"priority": "high", "payload": payload, "error": "HTTP 500", "status": "500"}
    fields |= {"attempts": "8", "failed_at": "1700000000000"}
    await subject.raw.xadd(subject.keys.dlq(g), fields, id=f"{now_ms() - age_s * 1000}-0")


async def test_dead_letters_older_than_max_age_are_trimmed(subject: Subject) -> None:
    backend, g = subject.backend, group()
    await backend.claim(g, 1)
    await add_aged_letter(subject, g, b"old", 3600)
    await backend.dead_letter(g, 1, [letter(HIGH, b"new")])  # default retention: 14 days
    assert await payloads_dead(backend, g) == [b"old", b"new"]
    hour = DlqRetention(max_age_s=3600 - 60)
    # A quiet DLQ ages out on the periodic trim, one round trip for many groups (and slots).
    others = [(group(f"quiet{i}"), 1, hour) for i in range(5)]
    assert await backend.trim_dead([(g, 1, hour), *others]) == 1
    assert await payloads_dead(backend, g) == [b"new"]
    assert await backend.trim_dead([(g, 1, hour)]) == 0
    assert await backend.trim_dead([]) == 0


async def test_a_dead_letter_append_trims_letters_past_max_age(subject: Subject) -> None:
    backend, g = subject.backend, group()
    await backend.claim(g, 1)
    await add_aged_letter(subject, g, b"old", 7200)
    await backend.dead_letter(g, 1, [letter(LOW, b"new")], DlqRetention(max_age_s=3600))
    assert await payloads_dead(backend, g) == [b"new"]


# --------------------------------------------------------------------------- failures


async def test_unreachable_store_is_backend_unavailable(subject: Subject, test_id: str) -> None:
    q = queue()
    down: QueueBackend
    if subject.kind == "memory":
        down = MemoryQueueBackend()
        await down.aclose()
    else:
        url = f"redis://127.0.0.1:{free_port()}/0"  # nobody listens there
        cluster = subject.kind == "cluster"
        with pytest.raises(BackendUnavailable):
            await connect(url, cluster=cluster, prefix=test_id)
        client = RedisCluster.from_url(url) if cluster else aioredis.Redis.from_url(url)
        down = RedisQueueBackend(client, RedisKeys(test_id))
    async with down:
        with pytest.raises(BackendUnavailable):
            await down.put(items(q, 2))
        with pytest.raises(BackendUnavailable):
            await down.read({q: ZERO_OFFSET}, 10)
        with pytest.raises(BackendUnavailable):
            await write_checkpoint(down, q, Offset(1, 0), 1)
        with pytest.raises(BackendUnavailable):
            await down.list_dead(q.group, None, 10)
    await down.aclose()  # closing twice is harmless


async def test_idle_queues_cost_no_stream_key(subject: Subject) -> None:
    backend, g = subject.backend, group("idle")
    await backend.read(dict.fromkeys(g.queues(), ZERO_OFFSET), 10)
    assert await backend.backlog(list(g.queues())) == [0, 0, 0]
    assert await backend.delayed([g]) == [0]
    await backend.promote_due(g, now_ms(), 10)
    await backend.claim(g, 1)
    if subject.raw is not None:
        for q in g.queues():
            assert await subject.raw.exists(subject.keys.stream(q)) == 0


# --------------------------------------------------------------------------- property


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(1, 6)),
        st.tuples(st.just("commit"), st.integers(0, 30)),
        st.tuples(st.just("trim"), st.integers(0, 3)),
    ),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=_OPS)
async def test_backlog_is_puts_minus_committed(
    backend: QueueBackend, ops: list[tuple[str, int]]
) -> None:
    q = queue(f"p{uuid.uuid4().hex[:10]}")  # a fresh queue per example
    offsets: list[Offset] = []
    committed = 0
    for op, n in ops:
        if op == "put":
            offsets += await put_n(backend, q, n)
        elif op == "commit" and offsets:
            upto = min(n, len(offsets) - 1)
            await write_checkpoint(backend, q, offsets[upto], 1)
            committed = max(committed, upto + 1)
        elif op == "trim":
            await trim(backend, q, 1, n)
            kept = await read_all(backend, q)
            assert [e.offset for e in kept] == offsets[len(offsets) - len(kept) :]
            assert len(offsets) - len(kept) <= committed
        assert await backend.backlog([q]) == [len(offsets) - committed]
