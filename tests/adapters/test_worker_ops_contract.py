"""The worker's backend operations, one contract for memory, Redis and Redis Cluster.

Scheduling retries (fenced), the due index (which groups have delayed jobs due), batched
checkpoint writes and trims that report the fenced groups instead of raising, and the ready
signal a worker blocks on instead of polling idle queues. Each test runs three times (the
``subject`` fixture's params); on the Cluster the groups used are spread over all three shards.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from adapters.memory_queue import MemoryQueueBackend
from adapters.redis_queue import RedisQueueBackend, connect
from emq.core.errors import BackendUnavailable, Fenced, InvalidInput
from emq.core.interfaces import (
    ZERO_OFFSET,
    DeadLetter,
    Entry,
    Offset,
    PutItem,
    QueueBackend,
    Scheduled,
)
from emq.core.model import GroupRef, Namespace, Priority, QueueRef, TopicRef
from emq.core.naming import RedisKeys
from emq.stack import free_port
from tests.adapters.conftest import Subject

HIGH, MEDIUM, LOW = Priority.HIGH, Priority.MEDIUM, Priority.LOW
BASE_MS = 1_700_000_000_000  # due times are given explicitly: no clock is involved


def group(topic: str = "orders", index: int = 0) -> GroupRef:
    return TopicRef(Namespace.ONLINE, "acme", topic).group(index)


def spread_groups(n: int) -> list[GroupRef]:
    """``n`` groups on distinct Cluster slots (with n >= 6 these cover all three shards)."""
    found: dict[int, GroupRef] = {}
    i = 0
    while len(found) < n:
        g = group(f"topic{i}", i % 4)
        # the slot depends on the hash tag only, so any prefix gives the same one
        found.setdefault(key_slot(RedisKeys("x").epoch(g).encode()), g)
        i += 1
    return list(found.values())


async def assert_on_every_shard(subject: Subject, groups: list[GroupRef]) -> None:
    if subject.kind == "cluster":
        assert isinstance(subject.raw, RedisCluster)
        await subject.raw.initialize()
        nodes = {subject.raw.get_node_from_key(subject.keys.epoch(g)) for g in groups}
        assert len(nodes) == 3


async def read_all(backend: QueueBackend, q: QueueRef) -> list[Entry]:
    return (await backend.read({q: ZERO_OFFSET}, 10_000)).get(q, [])


async def put_n(backend: QueueBackend, q: QueueRef, n: int) -> list[Offset]:
    results = await backend.put([PutItem(q, f"j{i}", f"p{i}".encode()) for i in range(n)])
    return [r.offset for r in results if r.offset is not None]


async def drain(backend: QueueBackend, cursor: str) -> tuple[str, list[str]]:
    """Whatever was signalled after ``cursor``, without waiting."""
    return await backend.wait_ready(cursor, 0)


# --------------------------------------------------------------------------- schedule


async def test_schedule_parks_for_the_owner_and_a_fenced_one_writes_nothing(
    backend: QueueBackend,
) -> None:
    g = group()
    await backend.claim(g, 2)
    await backend.schedule(g, 2, [Scheduled(HIGH, b"a", BASE_MS), Scheduled(LOW, b"b", BASE_MS)])
    await backend.schedule(g, 2, [Scheduled(HIGH, b"a", BASE_MS)])  # re-sent: parked once
    await backend.schedule(g, 3, [])  # a newer epoch is not fenced
    assert await backend.delayed([g]) == [2]
    assert await backend.due_groups(BASE_MS, 10) == [str(g)]
    other = group("other")
    await backend.claim(other, 5)
    with pytest.raises(Fenced):
        await backend.schedule(other, 4, [Scheduled(HIGH, b"late", BASE_MS - 1)])
    assert await backend.delayed([other]) == [0]
    assert await backend.due_groups(BASE_MS + 10**9, 10) == [str(g)]  # nor was it indexed


async def test_scheduled_jobs_become_due_in_their_priority_stream(backend: QueueBackend) -> None:
    g = group()
    await backend.schedule(
        g,
        1,
        [
            Scheduled(LOW, b"low", BASE_MS + 20),
            Scheduled(HIGH, b"high", BASE_MS + 10),
            Scheduled(MEDIUM, b"medium", BASE_MS + 5),
        ],
    )
    assert await backend.due_groups(BASE_MS + 4, 10) == []
    assert await backend.promote_due(g, BASE_MS + 4, 10) == 0
    assert await backend.due_groups(BASE_MS + 5, 10) == [str(g)]
    assert await backend.promote_due(g, BASE_MS + 10, 10) == 2
    assert [e.payload for e in await read_all(backend, g.queue(HIGH))] == [b"high"]
    assert [e.payload for e in await read_all(backend, g.queue(MEDIUM))] == [b"medium"]
    assert await read_all(backend, g.queue(LOW)) == []
    await backend.reindex_delayed([g])
    assert await backend.due_groups(BASE_MS + 19, 10) == []  # now indexed at the low job's time
    assert await backend.due_groups(BASE_MS + 20, 10) == [str(g)]
    assert await backend.promote_due(g, BASE_MS + 20, 10) == 1
    assert [e.payload for e in await read_all(backend, g.queue(LOW))] == [b"low"]


# --------------------------------------------------------------------------- due index


async def test_a_delayed_put_is_due_only_once_due_and_gone_after_reindex(
    subject: Subject,
) -> None:
    backend, groups = subject.backend, spread_groups(6)
    await assert_on_every_shard(subject, groups)
    due = {g: BASE_MS + 100 * n for n, g in enumerate(groups)}
    await backend.put(
        [PutItem(g.queue(MEDIUM), f"d{n}", b"later", due_ms=due[g]) for n, g in enumerate(groups)]
    )
    await backend.put([PutItem(groups[0].queue(HIGH), "x", b"sooner", due_ms=BASE_MS - 50)])
    assert await backend.due_groups(BASE_MS - 51, 10) == []
    assert await backend.due_groups(BASE_MS - 50, 10) == [str(groups[0])]  # lowered, like ZADD LT
    assert await backend.due_groups(BASE_MS + 250, 10) == [str(g) for g in groups[:3]]
    assert await backend.due_groups(BASE_MS + 10**6, 2) == [str(g) for g in groups[:2]]
    assert await backend.due_groups(BASE_MS + 10**6, 0) == []
    # due_scan: the same, and when the promoter must look next (the earliest entry after now)
    assert await backend.due_scan(BASE_MS - 51, 10) == ([], BASE_MS - 50)
    assert await backend.due_scan(BASE_MS + 250, 10) == (
        [str(g) for g in groups[:3]],
        due[groups[3]],
    )
    assert await backend.due_scan(BASE_MS + 10**6, 10) == ([str(g) for g in groups], None)
    for g in groups[:3]:
        assert await backend.promote_due(g, BASE_MS + 250, 10) >= 1
    await backend.reindex_delayed([*groups[:3], groups[0]])
    assert await backend.due_groups(BASE_MS + 10**6, 10) == [str(g) for g in groups[3:]]
    await backend.reindex_delayed(groups[3:])  # nothing changed: nothing moves
    await backend.reindex_delayed([])
    assert await backend.due_groups(BASE_MS + 10**6, 10) == [str(g) for g in groups[3:]]
    assert [e.payload for e in await read_all(backend, groups[0].queue(HIGH))] == [b"sooner"]


async def test_reindex_moves_the_entry_to_the_next_job_and_keeps_a_lowered_one(
    backend: QueueBackend,
) -> None:
    g = group()
    await backend.put([PutItem(g.queue(LOW), "b", b"b", due_ms=BASE_MS + 500)])
    await backend.schedule(g, 1, [Scheduled(LOW, b"a", BASE_MS)])
    assert await backend.promote_due(g, BASE_MS, 10) == 1
    assert await backend.due_groups(BASE_MS, 10) == [str(g)]  # stale until reindexed: harmless
    await backend.reindex_delayed([g])
    assert await backend.due_groups(BASE_MS + 499, 10) == []
    await backend.schedule(g, 1, [Scheduled(LOW, b"c", BASE_MS + 100)])
    assert await backend.due_groups(BASE_MS + 100, 10) == [str(g)]
    await backend.reindex_delayed([g])
    assert await backend.due_groups(BASE_MS + 100, 10) == [str(g)]


@pytest.mark.parametrize("parked_before", [True, False])
async def test_a_job_parked_during_reindex_keeps_its_earlier_entry(
    redis_subject: Subject, monkeypatch: pytest.MonkeyPatch, parked_before: bool
) -> None:
    # The due index lives on another slot than the delayed set: reindex reads, then writes. A
    # job parked in between (a delayed put) must not lose its earlier entry to that write.
    backend = redis_subject.backend
    assert isinstance(backend, RedisQueueBackend)
    g = group()
    if parked_before:  # the write would overwrite; with nothing parked it would remove
        await backend.put([PutItem(g.queue(LOW), "later", b"later", due_ms=BASE_MS + 1000)])
    read_earliest = backend._earliest_due
    reads = 0

    async def racing(groups: list[GroupRef]) -> list[int | None]:
        nonlocal reads
        seen = await read_earliest(groups)
        reads += 1
        if reads == 1:
            await backend.put([PutItem(g.queue(HIGH), "soon", b"soon", due_ms=BASE_MS + 10)])
        return seen

    monkeypatch.setattr(backend, "_earliest_due", racing)
    await backend.reindex_delayed([g])
    assert reads == 2
    assert await backend.due_groups(BASE_MS + 10, 10) == [str(g)]


# --------------------------------------------------------------------------- batched progress


async def test_write_checkpoints_applies_all_but_the_fenced_group(subject: Subject) -> None:
    backend, groups = subject.backend, spread_groups(6)
    await assert_on_every_shard(subject, groups)
    offsets = {q: await put_n(backend, q, 4) for g in groups for q in (g.queue(HIGH), g.queue(LOW))}
    for g in groups:
        await backend.claim(g, 1)
    fenced = groups[2]
    await backend.claim(fenced, 2)
    batch = [(q, o[1], 1) for q, o in offsets.items()]
    batch += [(groups[0].queue(HIGH), offsets[groups[0].queue(HIGH)][2], 1)]  # same queue again
    assert await backend.write_checkpoints(batch) == {fenced}
    for q, o in offsets.items():
        ckpt = await backend.read_checkpoint(q)
        if q.group == fenced:
            assert ckpt is None
        else:
            want = o[2] if q == groups[0].queue(HIGH) else o[1]
            assert ckpt is not None and (ckpt.offset, ckpt.epoch) == (want, 1)
    backlog = await backend.backlog(list(offsets))
    assert backlog == [
        4 if q.group == fenced else 1 if q == groups[0].queue(HIGH) else 2 for q in offsets
    ]
    assert await backend.write_checkpoints([]) == set()


async def test_tails_are_each_queues_last_entry_on_every_shard(subject: Subject) -> None:
    backend, groups = subject.backend, spread_groups(6)
    await assert_on_every_shard(subject, groups)
    offsets = {g.queue(HIGH): await put_n(backend, g.queue(HIGH), 3) for g in groups}
    queues = [q for g in groups for q in (g.queue(HIGH), g.queue(LOW))]  # the lows: empty
    assert await backend.tails(queues) == [offsets.get(q, [None])[-1] for q in queues]
    assert await backend.tails([]) == []
    # The interface's own answer, for a backend that has no faster one: the same while
    # entries wait past the checkpoint (a backend may still name a committed last entry).
    assert await QueueBackend.tails(backend, queues) == await backend.tails(queues)


async def test_trim_many_applies_all_but_the_fenced_group(subject: Subject) -> None:
    backend, groups = subject.backend, spread_groups(6)
    await assert_on_every_shard(subject, groups)
    queues = [g.queue(MEDIUM) for g in groups]
    offsets = {q: await put_n(backend, q, 5) for q in queues}
    assert await backend.write_checkpoints([(q, o[3], 1) for q, o in offsets.items()]) == set()
    fenced = groups[4]
    await backend.claim(fenced, 9)
    assert await backend.trim_many([(q, 1, 1) for q in queues]) == {fenced}
    for q in queues:
        kept = [e.offset for e in await read_all(backend, q)]
        assert kept == (offsets[q] if q.group == fenced else offsets[q][3:])
    assert await backend.trim_many([]) == set()


async def test_forget_finished_removes_entries_above_the_checkpoint_and_counts_them(
    subject: Subject,
) -> None:
    backend, groups = subject.backend, spread_groups(6)
    await assert_on_every_shard(subject, groups)
    queues = [g.queue(MEDIUM) for g in groups]
    offsets = {q: await put_n(backend, q, 8) for q in queues}
    for g in groups:
        await backend.claim(g, 1)
    never = queues[5]  # nothing committed yet: its oldest entry is the one held back
    written = [(q, o[1], 1) for q, o in offsets.items() if q != never]
    assert await backend.write_checkpoints(written) == set()
    fenced = groups[4]
    await backend.claim(fenced, 9)
    # Entries 3, 4 and 6 finished while 2 (and 5, 7) did not; 1 is at the checkpoint (the
    # trim's: left); the never-committed queue finished all but its first.
    asked = [
        (q, 1, offsets[q][1:] if q == never else [offsets[q][i] for i in (1, 3, 4, 6)])
        for q in queues
    ]
    assert await backend.forget_finished(asked) == {fenced}
    for q in queues:
        left = [e.offset for e in await read_all(backend, q)]
        if q.group == fenced:
            assert left == offsets[q]
        elif q == never:
            assert left == offsets[q][:1]
        else:
            assert left == [offsets[q][i] for i in (0, 1, 2, 5, 7)]
    # The backlog counts them gone: entries added less those committed, removed ones included.
    backlog = await backend.backlog(queues)
    assert backlog == [6 if q.group == fenced else 1 if q == never else 3 for q in queues]
    # A checkpoint that later passes them counts only what is left (no double count).
    done = [(q, offsets[q][6], 1) for q in queues if q.group != fenced]
    assert await backend.write_checkpoints(done) == set()
    backlog = await backend.backlog(queues)
    assert backlog == [6 if q.group == fenced else 0 if q == never else 1 for q in queues]
    assert await backend.forget_finished([]) == set()
    assert await backend.forget_finished([(q, 1, []) for q in queues[:2]]) == set()


async def test_claim_groups_claims_each_and_reads_its_checkpoints_or_says_fenced(
    subject: Subject,
) -> None:
    backend, groups = subject.backend, spread_groups(6)
    await assert_on_every_shard(subject, groups)
    offsets = {g: await put_n(backend, g.queue(MEDIUM), 3) for g in groups}
    for g in groups:
        await backend.claim(g, 1, "a")
    written = [(g.queue(MEDIUM), offsets[g][1], 1) for g in groups]
    assert await backend.write_checkpoints(written) == set()
    await backend.claim(groups[3], 5, "a")  # a newer epoch than the batch below asks
    answers = await backend.claim_groups([(g, 2) for g in groups], "b")
    assert isinstance(answers[3], Fenced)
    for g, answer in zip(groups, answers, strict=True):
        if g == groups[3]:
            continue
        assert not isinstance(answer, Fenced)
        contested, (high, medium, low) = answer
        assert contested is True  # "a" never let go
        assert high is None and low is None
        assert medium is not None and (medium.offset, medium.epoch) == (offsets[g][1], 1)
    assert await backend.check_holds([(g, 2) for g in groups], "b") == {groups[3]}
    again = await backend.claim_groups([(groups[0], 2)], "b")  # its own holder: not contested
    assert not isinstance(again[0], Fenced) and again[0][0] is False
    assert await backend.claim_groups([], "b") == []


async def test_write_checkpoints_of_3000_queues(subject: Subject) -> None:
    # Not a timed test (benchmarks live in `emq bench`): the figure is printed for the record.
    backend = subject.backend
    queues = [
        group(f"t{i % 250}", i // 250).queue(p) for i in range(1000) for p in (HIGH, MEDIUM, LOW)
    ]
    results = await backend.put([PutItem(q, "j", b"x") for q in queues])
    batch = [(q, r.offset or ZERO_OFFSET, 1) for q, r in zip(queues, results, strict=True)]
    started = time.perf_counter()
    assert await backend.write_checkpoints(batch) == set()
    took = time.perf_counter() - started
    print(f"{subject.kind}: write_checkpoints(3000) {took * 1000:.1f} ms")
    assert await backend.backlog(queues[::97]) == [0] * len(queues[::97])


# --------------------------------------------------------------------------- ready signal


@pytest.mark.serial
async def test_wait_ready_wakes_soon_after_a_concurrent_put(subject: Subject) -> None:
    backend, groups = subject.backend, spread_groups(6)
    await assert_on_every_shard(subject, groups)
    cursor, names = await backend.wait_ready(None, 0)
    assert names == []
    waiting = asyncio.create_task(backend.wait_ready(cursor, 5))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    # blocked readers do not stall other calls
    started = time.perf_counter()
    await backend.read({g.queue(HIGH): ZERO_OFFSET for g in groups}, 10)
    assert time.perf_counter() - started < 0.5
    put_at = time.perf_counter()
    await backend.put([PutItem(g.queue(HIGH), f"j{n}", b"x") for n, g in enumerate(groups)])
    new_cursor, names = await waiting
    woke_after = time.perf_counter() - put_at
    print(f"{subject.kind}: wait_ready woke {woke_after * 1000:.1f} ms after the put")
    assert woke_after < 0.1
    assert names == [str(g) for g in groups]
    assert new_cursor != cursor
    assert await drain(backend, new_cursor) == (new_cursor, [])


@pytest.mark.serial
async def test_wait_ready_times_out_with_nothing(backend: QueueBackend) -> None:
    started = time.perf_counter()
    cursor, names = await backend.wait_ready(None, 0.2)
    assert names == [] and 0.15 <= time.perf_counter() - started < 1.5
    started = time.perf_counter()
    assert await backend.wait_ready(cursor, 0.2) == (cursor, [])
    assert 0.15 <= time.perf_counter() - started < 1.5


async def test_a_cursor_loses_no_signal_made_between_calls(backend: QueueBackend) -> None:
    a, b, c = group("a"), group("b"), group("c")
    await backend.put([PutItem(a.queue(LOW), "old", b"old")])  # before the first call: not seen
    cursor, names = await backend.wait_ready(None, 0.05)
    assert names == []
    await backend.put([PutItem(b.queue(LOW), "1", b"1"), PutItem(a.queue(HIGH), "2", b"2")])
    await backend.put([PutItem(c.queue(LOW), "3", b"3")])
    await backend.put([PutItem(a.queue(LOW), "4", b"4")])
    first, names = await backend.wait_ready(cursor, 0, count=2)  # two signals at most
    assert names == [str(b), str(a), str(c)]
    rest, names = await backend.wait_ready(first, 1)
    assert names == [str(a)]
    everything = await backend.wait_ready(cursor, 1)
    assert everything == (rest, [str(b), str(a), str(c)])  # deduplicated, in order
    with pytest.raises(InvalidInput):
        await backend.wait_ready("not a cursor", 0)


async def test_writes_that_append_signal_and_others_do_not(subject: Subject) -> None:
    backend, groups = subject.backend, spread_groups(6)
    await assert_on_every_shard(subject, groups)
    g0, g1, g2, g3, g4, g5 = groups
    cursor, _ = await backend.wait_ready(None, 0)

    await backend.put([PutItem(g0.queue(HIGH), "a", b"a"), PutItem(g1.queue(LOW), "b", b"b")])
    cursor, names = await drain(backend, cursor)
    assert names == [str(g0), str(g1)]
    await backend.put([PutItem(g2.queue(LOW), "c", b"c", idempotency_key="k")])
    cursor, names = await drain(backend, cursor)
    assert names == [str(g2)]
    # a duplicate, a delayed job, a schedule and an empty promotion append nothing
    await backend.put([PutItem(g2.queue(LOW), "again", b"c", idempotency_key="k")])
    await backend.put([PutItem(g3.queue(LOW), "d", b"d", due_ms=BASE_MS)])
    await backend.put([PutItem(g3.queue(LOW), "e", b"e", due_ms=BASE_MS, idempotency_key="e")])
    await backend.put([])
    await backend.schedule(g4, 1, [Scheduled(MEDIUM, b"f", BASE_MS)])
    assert await backend.promote_due(g3, BASE_MS - 1, 10) == 0
    assert await backend.replay_dead(g5, None, 10) == 0
    cursor, names = await backend.wait_ready(cursor, 0.1)  # (the due jobs' hints: no names)
    assert names == []

    assert await backend.promote_due(g3, BASE_MS, 10) == 2
    cursor, names = await drain(backend, cursor)
    assert names == [str(g3)]
    await backend.dead_letter(g5, 1, [DeadLetter("", HIGH, b"dead", "HTTP 500", 500, 8, BASE_MS)])
    assert await backend.wait_ready(cursor, 0) == (cursor, [])
    assert await backend.replay_dead(g5, None, 10) == 1
    cursor, names = await drain(backend, cursor)
    assert names == [str(g5)]
    # a mixed batch signals once per group, only for what it appended
    await backend.put(
        [
            PutItem(g1.queue(HIGH), "m1", b"m1"),
            PutItem(g2.queue(HIGH), "m2", b"m2", idempotency_key="k"),  # duplicate
            PutItem(g4.queue(HIGH), "m3", b"m3", idempotency_key="new"),
            PutItem(g1.queue(LOW), "m4", b"m4"),
        ]
    )
    cursor, names = await drain(backend, cursor)
    assert names == [str(g1), str(g4)]


async def test_a_cancelled_wait_leaves_the_backend_usable(backend: QueueBackend) -> None:
    cursor, _ = await backend.wait_ready(None, 0)
    waiting = asyncio.create_task(backend.wait_ready(cursor, 5))
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    g = group()
    await backend.put([PutItem(g.queue(HIGH), "a", b"a")])
    cursor, names = await backend.wait_ready(cursor, 1)
    assert names == [str(g)]
    assert await backend.wait_ready(cursor, 0.05) == (cursor, [])


async def test_a_wait_longer_than_the_socket_timeout_is_fine(
    redis_subject: Subject, request: pytest.FixtureRequest, test_id: str
) -> None:
    # wait_ready blocks on its own client without a socket timeout: the main one's stays short.
    cluster = redis_subject.kind == "cluster"
    server = request.getfixturevalue("redis_cluster" if cluster else "redis_server")
    url = server.url if cluster else f"redis://{server.address}/0"
    short = await connect(url, cluster=cluster, prefix=test_id, socket_timeout=0.3)
    async with short:
        cursor, names = await short.wait_ready(None, 0.8)
        assert names == []
        await short.put([PutItem(group().queue(LOW), "a", b"a")])
        assert (await short.wait_ready(cursor, 0.8))[1] == [str(group())]


async def test_wait_ready_on_a_closed_or_unreachable_store(subject: Subject, test_id: str) -> None:
    g = group()
    down: QueueBackend
    if subject.kind == "memory":
        down = MemoryQueueBackend()
        waiting = asyncio.create_task(down.wait_ready(None, 5))
        await asyncio.sleep(0.05)
        await down.aclose()  # wakes the blocked reader
        with pytest.raises(BackendUnavailable):
            await asyncio.wait_for(waiting, 1)
    else:
        url = f"redis://127.0.0.1:{free_port()}/0"  # nobody listens there
        cluster = subject.kind == "cluster"
        client = RedisCluster.from_url(url) if cluster else aioredis.Redis.from_url(url)
        down = RedisQueueBackend(client, RedisKeys(test_id))
    async with down:
        with pytest.raises(BackendUnavailable):
            await down.wait_ready(None, 0.1)
        with pytest.raises(BackendUnavailable):
            await down.write_checkpoints([(g.queue(HIGH), Offset(1, 0), 1)])
        with pytest.raises(BackendUnavailable):
            await down.trim_many([(g.queue(HIGH), 1, 0)])
        with pytest.raises(BackendUnavailable):
            await down.schedule(g, 1, [Scheduled(HIGH, b"x", BASE_MS)])
        with pytest.raises(BackendUnavailable):
            await down.due_groups(BASE_MS, 10)
        with pytest.raises(BackendUnavailable):
            await down.reindex_delayed([g])


# --------------------------------------------------------------------------- holders


async def test_a_claim_is_contested_until_the_former_holder_releases(
    subject: Subject, backend: QueueBackend
) -> None:
    groups = spread_groups(6)
    await assert_on_every_shard(subject, groups)
    assert not any([await backend.claim(g, 1, "a") for g in groups])  # never held before
    assert await backend.check_holds([(g, 1) for g in groups], "a") == set()
    assert await backend.claim(groups[0], 1, "a") is False  # re-claimed by its own holder
    assert await backend.claim(groups[0], 2, "b") is True  # "a" never let go: contested
    assert await backend.check_holds([(g, 1) for g in groups], "a") == {groups[0]}
    as_b = [(groups[0], 2)] + [(g, 1) for g in groups[1:]]
    assert await backend.check_holds(as_b, "b") == set(groups[1:])
    await backend.release_holds(groups, "a")  # only what "a" still holds is released
    assert await backend.check_holds([(groups[0], 2)], "b") == set()
    assert [await backend.claim(g, 3, "c") for g in groups] == [True] + [False] * 5
    with pytest.raises(Fenced):
        await backend.claim(groups[1], 2, "d")
    assert await backend.check_holds([(g, 3) for g in groups], "c") == set()
    assert await backend.check_holds([], "c") == set()
    # No holder recorded (a claim without one): lost only if the epoch moved on.
    await backend.claim(groups[2], 4)
    assert await backend.check_holds([(groups[2], 4), (groups[3], 3)], "c") == set()
    assert await backend.check_holds([(groups[2], 3)], "c") == {groups[2]}
