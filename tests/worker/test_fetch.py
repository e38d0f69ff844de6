"""The fetcher, deterministically: per-queue read counts, per-priority fill targets, the byte
budget, and the ready signal that arrives while a read is out (no sleeps: a backend whose read
waits on an event the test sets)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from adapters.memory_queue import MemoryQueueBackend
from emq.core.errors import BackendUnavailable
from emq.core.interfaces import Entry, Offset, PutItem
from emq.core.model import Namespace, Priority, QueueRef, Topic, TopicRef
from worker.fetch import HIGH_FLOOR, Fetcher
from worker.groups import GroupState, TopicState
from worker.settings import WorkerSettings

HIGH, MEDIUM, LOW = Priority.HIGH, Priority.MEDIUM, Priority.LOW


class GatedQueues(MemoryQueueBackend):
    """A memory backend whose reads are recorded and, while ``gate`` is set up, wait on it."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: list[dict[QueueRef, int]] = []
        self.gate: asyncio.Event | None = None
        self.reading = asyncio.Event()

    async def read(
        self, requests: Mapping[QueueRef, Offset], count: int | Mapping[QueueRef, int]
    ) -> dict[QueueRef, list[Entry]]:
        if isinstance(count, int):  # (GroupOwner.unread's default: a look, not a fetch)
            return await super().read(requests, count)
        self.counts.append(dict(count))
        found = await super().read(requests, count)  # the store answers as of now...
        self.reading.set()
        if self.gate is not None:
            await self.gate.wait()  # ...and the reply arrives later
        return found


def group(name: str, qps: int, budget_of: Fetcher | None = None) -> GroupState:
    topic = TopicState(Topic(TopicRef(Namespace.ONLINE, "t", name), qps, 1))
    g = GroupState(
        topic.ref.group(0), 1, topic, qps, [None, None, None], budget_of and budget_of.budget
    )
    topic.groups[0] = g
    return g


async def put(queues: GatedQueues, g: GroupState, priority: Priority, n: int, size: int) -> None:
    q = g.ref.queue(priority)
    await queues.put([PutItem(q, f"{q}-{i}", b"x" * size) for i in range(n)])


def fetcher(queues: GatedQueues, **settings: object) -> tuple[Fetcher, list[GroupState]]:
    woken: list[GroupState] = []
    f = Fetcher(queues, WorkerSettings(**settings), {}, woken.append)  # type: ignore[arg-type]
    return f, woken


def held(g: GroupState) -> list[int]:
    return [len(b) for b in g.buffers] if g.buffers else [0, 0, 0]


async def test_a_ready_signal_during_a_read_is_not_lost() -> None:
    queues = GatedQueues()
    f, _ = fetcher(queues)
    g = group("a", 20)
    queues.gate = asyncio.Event()
    read = asyncio.ensure_future(f._fetch([g]))  # reads three empty queues
    await queues.reading.wait()
    await put(queues, g, HIGH, 1, 10)  # appended after the read looked...
    f.signal(g)  # ...and its signal handled before the reply
    assert g.queued_fetch
    queues.gate.set()
    await read
    assert g.hot and not any(g.exhausted), "the stale reply must not mark the queues exhausted"
    queues.gate = None
    batch, f._wanted = f._wanted, []
    await f._fetch(batch)
    assert held(g) == [1, 0, 0]


async def test_a_reply_with_no_signal_since_marks_the_queues_exhausted() -> None:
    queues = GatedQueues()
    f, _ = fetcher(queues)
    g = group("a", 20)
    await f._fetch([g])
    assert all(g.exhausted) and not g.hot
    f.want(g)
    assert not g.queued_fetch  # an idle group is not read again until a signal


async def test_each_queue_reads_its_own_room() -> None:
    queues = GatedQueues()
    f, _ = fetcher(queues, buffer_seconds=2.0)
    slow, fast = group("slow", 20), group("fast", 100)
    for g in (slow, fast):
        await put(queues, g, LOW, 1000, 10)
    await f._fetch([slow, fast])
    assert queues.counts[-1][slow.ref.queue(LOW)] == 40  # 2 s of 20 QPS, not the fast one's 200
    assert queues.counts[-1][fast.ref.queue(LOW)] == 200
    assert held(slow) == [0, 0, 40] and held(fast) == [0, 0, 200]


async def test_a_high_is_read_at_once_when_the_low_buffer_is_full() -> None:
    queues = GatedQueues()
    f, woken = fetcher(queues)
    g = group("a", 20)
    await put(queues, g, LOW, 2000, 10)
    await f._fetch([g])
    assert held(g) == [0, 0, 40] and g.exhausted == [True, True, False]
    await put(queues, g, HIGH, 3, 10)
    f.signal(g)
    assert g.queued_fetch, "a full low buffer must not keep the high queue from being read"
    batch, f._wanted = f._wanted, []
    await f._fetch(batch)
    assert g.ref.queue(LOW) not in queues.counts[-1]  # the lows have all the room they may
    assert held(g) == [3, 0, 40] and woken[-1] is g


class FirstReadGated(GatedQueues):
    """Only the first read waits on the gate (the big read out); later ones answer at once."""

    async def read(
        self, requests: Mapping[QueueRef, Offset], count: int | Mapping[QueueRef, int]
    ) -> dict[QueueRef, list[Entry]]:
        gate = self.gate
        if not isinstance(count, int) and self.counts:
            self.gate = None  # (a later read)
        try:
            return await super().read(requests, count)
        finally:
            self.gate = gate


async def test_a_high_signalled_while_a_read_is_out_is_read_beside_it_once() -> None:
    """A read of a group's lows is out; highs appended before it looked and after, and their
    signal handled meanwhile: the high lane buffers them before the big read's reply, and that
    reply, which repeats the first highs, buffers none of them twice."""
    queues = FirstReadGated()
    f, woken = fetcher(queues)
    g = group("a", 20)
    await put(queues, g, LOW, 2000, 10)
    await put(queues, g, HIGH, 2, 10)
    queues.gate = asyncio.Event()
    big = asyncio.ensure_future(f._fetch([g]))
    await queues.reading.wait()
    q = g.ref.queue(HIGH)
    await queues.put([PutItem(q, f"late-{i}", b"x" * 10) for i in range(3)])
    f.signal(g)
    for _ in range(20):  # (the memory backend answers in a few loop turns)
        await asyncio.sleep(0)
    assert not big.done() and held(g) == [5, 0, 0], "the highs must not wait for the big read"
    assert woken == [g]
    queues.gate.set()
    await big
    assert held(g) == [5, 0, 40]
    offsets = [b.offset for b in g.buffers[0]]
    assert offsets == sorted(set(offsets))
    assert f._lane_task is None  # nothing left to read: the lane ended


async def test_the_byte_budget_cuts_reads_lows_first_and_highs_keep_a_floor() -> None:
    queues = GatedQueues()
    f, _ = fetcher(queues, buffer_bytes=1 << 20)
    groups = [group(f"g{i}", 150, f) for i in range(4)]
    for g in groups:
        await put(queues, g, LOW, 300, 64 * 1024)
    for _ in range(10):  # empty queues drop out; the size of a job is learnt
        await f._fetch(list(groups))
        assert f.budget.used <= (1 << 20) + 4 * HIGH_FLOOR * 64 * 1024
    lows = sum(held(g)[2] for g in groups)
    assert (1 << 20) // 2 <= lows * 64 * 1024 <= 1 << 20, lows
    assert f._starved, "groups cut by the budget wait to be fetched again"
    for g in groups:
        await put(queues, g, HIGH, 50, 64 * 1024)
        await put(queues, g, MEDIUM, 50, 64 * 1024)
        g.mark_hot()
    f.budget.used += f.budget.room()  # the budget spent: only highs are read, a floor each
    await f._fetch(list(groups))
    assert [held(g)[:2] for g in groups] == [[HIGH_FLOOR, 0]] * 4
    assert queues.counts[-1] == {g.ref.queue(HIGH): HIGH_FLOOR for g in groups}


async def test_dropping_buffers_gives_their_bytes_back_and_starved_groups_resume() -> None:
    queues = GatedQueues()
    f, _ = fetcher(queues, buffer_bytes=1 << 20)
    a, b = group("a", 150, f), group("b", 150, f)
    for g in (a, b):
        await put(queues, g, MEDIUM, 300, 64 * 1024)
    for _ in range(6):
        await f._fetch([a, b])
    assert b in f._starved
    a.drop_buffers()
    b.drop_buffers()
    assert f.budget.used == 0
    f.want(a)  # any want (a job dispatched) queues the starved groups again
    assert b.queued_fetch and b in f._wanted


async def test_groups_the_budget_cut_are_read_again_without_a_dispatch() -> None:
    queues = GatedQueues()
    f, _ = fetcher(queues, buffer_bytes=1 << 20)
    groups = [group(f"g{i}", 150, f) for i in range(300)]  # 300 x 3 queues: two reads
    for g in groups:
        await put(queues, g, LOW, 4, 64 * 1024)
    run = asyncio.create_task(f.run())
    try:
        for g in groups:
            f.signal(g)
        for _ in range(10_000):  # loop turns, not time: the fetch loop runs in between
            if f.budget.used >= (1 << 20) * 3 // 4:
                break
            await asyncio.sleep(0)
        assert f.budget.used >= (1 << 20) * 3 // 4, (f.budget.used, len(f._starved), f.reads)
        assert f.budget.used <= (1 << 20) + 64 * 1024 * len(groups)
    finally:
        run.cancel()


class UnreadFails(GatedQueues):
    async def unread(self, after: Mapping[QueueRef, Offset]) -> set[QueueRef]:
        raise BackendUnavailable("connection refused")


async def test_the_sweep_reads_only_groups_with_a_job_past_what_was_fetched() -> None:
    queues = GatedQueues()
    f, _ = fetcher(queues)
    idle, lost, busy = group("idle", 20), group("lost", 20), group("busy", 20)
    f._groups.update({str(g.ref): g for g in (idle, lost, busy)})
    await put(queues, busy, LOW, 50, 10)
    await f._fetch([idle, lost, busy])  # idle and lost read to their end: exhausted, not hot
    assert not idle.hot and not lost.hot and busy.hot and held(busy)[2] > 0
    await put(queues, lost, HIGH, 1, 10)  # its ready signal lost: nobody calls f.signal
    reads = len(queues.counts)
    await f.sweep_once()
    assert lost.hot and lost.queued_fetch and not lost.exhausted[0]
    assert not idle.hot and not idle.queued_fetch  # nothing past what was fetched: not read
    assert len(queues.counts) == reads  # (no fetch by the sweep itself: it only asked)
    await f._fetch(f._wanted)
    assert held(lost) == [1, 0, 0]


async def test_a_sweep_that_cannot_ask_reads_every_group() -> None:
    queues = UnreadFails()
    f, _ = fetcher(queues)
    idle, lost = group("idle", 20), group("lost", 20)
    f._groups.update({str(g.ref): g for g in (idle, lost)})
    await f._fetch([idle, lost])
    await put(queues, lost, LOW, 1, 10)
    await f.sweep_once()
    assert idle.hot and lost.hot and idle.queued_fetch and lost.queued_fetch


class OneShardDown(GatedQueues):
    """Reads that touch a queue of a ``down`` topic fail, as a Cluster read that shares a round
    trip with a shard without a master does."""

    def __init__(self, down: str) -> None:
        super().__init__()
        self.down = down

    async def read(
        self, requests: Mapping[QueueRef, Offset], count: int | Mapping[QueueRef, int]
    ) -> dict[QueueRef, list[Entry]]:
        if any(q.group.topic.topic == self.down for q in requests):
            raise BackendUnavailable("redis unavailable during read: Connection refused")
        return await super().read(requests, count)


async def test_a_shard_without_a_master_holds_up_only_its_own_groups() -> None:
    queues = OneShardDown("dead")
    f, woken = fetcher(queues)
    healthy, dead = group("healthy", 20), group("dead", 20)
    await put(queues, healthy, MEDIUM, 5, 10)
    await put(queues, dead, MEDIUM, 5, 10)
    loop = asyncio.create_task(f.run())
    try:
        f.signal(healthy)
        f.signal(dead)
        for _ in range(100):
            if woken:
                break
            await asyncio.sleep(0.01)
        assert woken == [healthy] and held(healthy) == [0, 5, 0]
        assert "fetch" not in f._outage.paused()  # the loop itself never paused
        assert held(dead) == [0, 0, 0] and dead.hot
        queues.down = "none"  # its replica took over: read on the next try, by itself
        for _ in range(200):
            if dead in woken:
                break
            await asyncio.sleep(0.01)
        assert held(dead) == [0, 5, 0]
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)


class FailsOnce(GatedQueues):
    """The first read waits on ``gate`` and then fails (the connection broke under it)."""

    failed = False

    async def read(
        self, requests: Mapping[QueueRef, Offset], count: int | Mapping[QueueRef, int]
    ) -> dict[QueueRef, list[Entry]]:
        if isinstance(count, int) or self.failed:
            return await super().read(requests, count)
        self.failed = True
        self.reading.set()
        assert self.gate is not None
        await self.gate.wait()
        raise BackendUnavailable("redis unavailable during read: Connection closed by server")


async def test_a_read_that_failed_while_a_signal_came_reads_its_jobs_once() -> None:
    """The failed read's group, queued again by a signal while the read was out, was queued a
    second time by the retry: one batch read the queue twice from the same offset, and every
    entry was buffered, and delivered, twice."""
    queues = FailsOnce()
    queues.gate = asyncio.Event()
    f, _ = fetcher(queues)
    g = group("g", 20)
    await put(queues, g, MEDIUM, 5, 10)
    loop = asyncio.create_task(f.run())
    try:
        f.signal(g)
        await queues.reading.wait()
        f.signal(g)  # a ready signal while the read is out: queued again
        queues.gate.set()  # the read fails
        for _ in range(200):
            if held(g)[1]:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # (any second read would have landed by now)
        assert held(g) == [0, 5, 0]
        assert [b.offset for b in g.buffers[1]] == sorted({b.offset for b in g.buffers[1]})
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)


class Replays(GatedQueues):
    """Answers the next read with what the first read of it returned (an older read's reply)."""

    first: dict[QueueRef, list[Entry]] | None = None

    async def read(
        self, requests: Mapping[QueueRef, Offset], count: int | Mapping[QueueRef, int]
    ) -> dict[QueueRef, list[Entry]]:
        found = await super().read(requests, count)
        if self.first is None:
            self.first = found
            return found
        return {q: self.first.get(q, []) + found.get(q, []) for q in set(self.first) | set(found)}


async def test_entries_a_reply_repeats_are_never_buffered_twice() -> None:
    queues = Replays()
    f, _ = fetcher(queues)
    g = group("g", 20)
    await put(queues, g, MEDIUM, 3, 10)
    await f._fetch([g])
    await put(queues, g, MEDIUM, 2, 10)
    g.exhausted[1] = False
    await f._fetch([g])
    offsets = [b.offset for b in g.buffers[1]]
    assert len(offsets) == 5 and offsets == sorted(set(offsets))
