"""The due-job promoter with due hints: it looks at the due index when a job falls due, not ten
times a second (GroupOwner.watch_due, Fetcher.promote), and a hint is never lost to a look in
progress. On the in-memory store, whose hints are exact; the Redis stores' hints are in
tests/adapters/test_signal_routes.py and the whole path in tests/worker/test_worker_integration.py.
"""

from __future__ import annotations

import asyncio
import itertools
import time

from adapters.memory_queue import MemoryQueueBackend
from emq.core.interfaces import ZERO_OFFSET, PutItem, Scheduled
from emq.core.model import Namespace, Priority, Topic, TopicRef
from emq.core.signals import DUE_HINT_HORIZON_S
from worker.alarm import Alarm
from worker.fetch import MIN_DUE_GAP_S, Fetcher
from worker.groups import GroupState, TopicState
from worker.settings import WorkerSettings

MEDIUM = Priority.MEDIUM


class CountingQueues(MemoryQueueBackend):
    """A memory store that records each look at its due index (loop time) and can hold one."""

    def __init__(self, hints: bool = True) -> None:
        super().__init__()
        self.looks: list[float] = []
        self.hints = hints
        self.hold: asyncio.Event | None = None
        self.looking = asyncio.Event()

    def watch_due(self, hint):  # type: ignore[no-untyped-def]
        return super().watch_due(hint) if self.hints else False

    async def due_scan(self, now_ms: int, limit: int) -> tuple[list[str], int | None]:
        self.looks.append(asyncio.get_running_loop().time())
        found = await super().due_scan(now_ms, limit)
        self.looking.set()
        if self.hold is not None:
            await self.hold.wait()
        return found


def owned(queues: CountingQueues) -> tuple[Fetcher, GroupState, list[GroupState]]:
    topic = TopicState(Topic(TopicRef(Namespace.ONLINE, "t", "due"), 10, 1))
    g = GroupState(topic.ref.group(0), 1, topic, 10, [None, None, None], None)
    topic.groups[0] = g
    signalled: list[GroupState] = []
    f = Fetcher(queues, WorkerSettings(), {str(g.ref): g}, signalled.append)
    f.signal = signalled.append  # type: ignore[method-assign]  # (what the promoter announces)
    return f, g, signalled


async def running(f: Fetcher) -> asyncio.Task[None]:
    task = asyncio.create_task(f.promote())
    await asyncio.sleep(0)
    return task


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def promoted_at(queues: CountingQueues, g: GroupState, timeout_s: float) -> float:
    """The loop time at which ``g``'s delayed job reached its queue."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    q = g.ref.queue(MEDIUM)
    while loop.time() < deadline:
        if await queues.read({q: ZERO_OFFSET}, 10):
            return loop.time()
        await asyncio.sleep(0.002)
    raise AssertionError("the delayed job was not promoted")


async def test_an_idle_promoter_with_hints_looks_once_per_horizon() -> None:
    queues = CountingQueues()
    f, _, _ = owned(queues)
    task = await running(f)
    await asyncio.sleep(DUE_HINT_HORIZON_S * 1.5)
    await stop(task)
    # the first look (after the short poll), then one a horizon later: not ten a second
    assert len(queues.looks) == 2


async def test_without_hints_the_promoter_polls_as_before() -> None:
    queues = CountingQueues(hints=False)
    f, _, _ = owned(queues)
    task = asyncio.create_task(f.promote(poll_s=0.05))
    await asyncio.sleep(0.5)
    await stop(task)
    assert 5 <= len(queues.looks) <= 11  # (fewer on a loaded machine, never more)


async def test_a_job_put_with_a_delay_is_promoted_when_due_not_at_the_next_poll() -> None:
    queues = CountingQueues()
    f, g, signalled = owned(queues)
    task = await running(f)
    await asyncio.sleep(0.15)  # (past the first look: the next is a horizon away)
    loop = asyncio.get_running_loop()
    due_in = 0.3
    put_at = loop.time()
    await queues.put(
        [PutItem(g.ref.queue(MEDIUM), "j", b"{}", due_ms=time.time_ns() // 10**6 + 300)]
    )
    at = await promoted_at(queues, g, 2.0)
    await stop(task)
    assert due_in - 0.01 <= at - put_at <= due_in + 0.25  # (a loaded machine's loop lag)
    assert signalled == [g]  # its group is read at once


async def test_a_retry_scheduled_later_than_the_next_look_is_found_by_that_look() -> None:
    """A job parked beyond the horizon is not hinted by the Redis stores: the look before it
    falls due reads its due time from the index and wakes for it."""
    queues = CountingQueues()
    f, g, _ = owned(queues)
    loop = asyncio.get_running_loop()
    due_ms = time.time_ns() // 10**6 + int(DUE_HINT_HORIZON_S * 1000) + 200
    queues._due_hints.clear()  # (as if the hint was beyond the horizon, or lost)
    await queues.schedule(g.ref, 1, [Scheduled(MEDIUM, b"{}", due_ms)])
    started = loop.time()
    task = await running(f)
    at = await promoted_at(queues, g, 3.0)
    await stop(task)
    assert DUE_HINT_HORIZON_S + 0.19 <= at - started <= DUE_HINT_HORIZON_S + 0.45
    # looks: the first, one a horizon later, and one at the due time both read from the index
    assert len(queues.looks) == 3


async def test_a_hint_that_comes_during_a_look_is_kept() -> None:
    queues = CountingQueues()
    f, g, _ = owned(queues)
    queues.hold = asyncio.Event()
    task = await running(f)
    await asyncio.wait_for(queues.looking.wait(), 1.0)  # the first look is out...
    loop = asyncio.get_running_loop()
    put_at = loop.time()
    # ...when a job due in 50 ms is parked (its hint comes now)
    await queues.put(
        [PutItem(g.ref.queue(MEDIUM), "j", b"{}", due_ms=time.time_ns() // 10**6 + 50)]
    )
    queues.hold.set()
    queues.hold = None
    at = await promoted_at(queues, g, 2.0)
    await stop(task)
    assert at - put_at <= 0.5  # not the horizon: the hint was not overwritten by the look's end


async def test_hints_for_now_do_not_make_the_promoter_look_more_often_than_its_gap() -> None:
    queues = CountingQueues()
    f, _, _ = owned(queues)
    task = await running(f)
    await asyncio.sleep(0.15)
    loop = asyncio.get_running_loop()
    end = loop.time() + 0.1
    while loop.time() < end:  # a storm of hints, each for a job due at once
        f.due_hint(time.time_ns() // 10**6)
        await asyncio.sleep(0.0005)
    await stop(task)
    looks = queues.looks[1:]
    gaps = [b - a for a, b in itertools.pairwise(looks)]
    assert looks and all(gap >= MIN_DUE_GAP_S * 0.9 for gap in gaps)
    assert len(looks) <= 0.1 / MIN_DUE_GAP_S + 2


async def test_an_alarm_brought_forward_rings_then_and_never_later() -> None:
    loop = asyncio.get_running_loop()
    alarm = Alarm()
    alarm.set(loop.time() + 5)
    start = loop.time()
    waiting = asyncio.create_task(alarm.wait())
    await asyncio.sleep(0.01)
    alarm.sooner(loop.time() + 0.05)
    alarm.sooner(loop.time() + 1)  # (later: ignored)
    await asyncio.wait_for(waiting, 1.0)
    assert 0.05 <= loop.time() - start <= 0.5
    # once rung it is unset; set() moves it either way
    alarm.set(loop.time() + 0.02)
    alarm.set(loop.time() + 0.01)
    before = loop.time()
    await alarm.wait()
    assert 0.009 <= loop.time() - before <= 0.1


async def test_a_groups_next_delayed_job_is_promoted_when_due_after_the_first() -> None:
    """The index holds a group's earliest due time only: after promoting it, the promoter reads
    the group's next one (reindexed) before it sleeps, rather than a horizon later."""
    queues = CountingQueues()
    f, g, _ = owned(queues)
    task = await running(f)
    await asyncio.sleep(0.15)
    loop = asyncio.get_running_loop()
    start, now = loop.time(), time.time_ns() // 10**6
    q = g.ref.queue(MEDIUM)
    await queues.put(
        [
            PutItem(q, "a", b'{"a":1}', due_ms=now + 200),
            PutItem(q, "b", b'{"b":1}', due_ms=now + 500),
        ]
    )
    arrived: list[float] = []
    while len(arrived) < 2 and loop.time() - start < 2.0:
        found = await queues.read({q: ZERO_OFFSET}, 10)
        arrived += [loop.time()] * (len(found.get(q, [])) - len(arrived))
        await asyncio.sleep(0.002)
    await stop(task)
    assert len(arrived) == 2
    assert 0.19 <= arrived[0] - start <= 0.45 and 0.49 <= arrived[1] - start <= 0.75


async def test_an_entry_that_promotes_nothing_is_looked_at_no_more_than_without_hints() -> None:
    """A due entry whose group has nothing to promote (here: its index entry is left due) is
    looked at again every DUE_POLL_S, as without hints, not every MIN_DUE_GAP_S."""
    queues = CountingQueues()
    f, g, _ = owned(queues)

    async def nothing(group, now_ms, limit):  # type: ignore[no-untyped-def]
        return 0

    async def keep(groups):  # type: ignore[no-untyped-def]
        return None

    queues.promote_due = nothing  # type: ignore[method-assign]
    queues.reindex_delayed = keep  # type: ignore[method-assign]
    queues._due_index[str(g.ref)] = time.time_ns() // 10**6 - 1000
    task = await running(f)
    await asyncio.sleep(0.6)
    await stop(task)
    assert 3 <= len(queues.looks) <= 7
