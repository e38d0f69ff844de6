"""The replay store on a real Redis: selections count right, each step moves letters exactly
once (a step sent twice, or a new mover after a crash, repeats nothing), cancel stops the steps
at once, and progress is read back from the store."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from adapters.redis_replay import RedisReplayStore
from emq.compose import open_queues, open_replays
from emq.core.errors import ConfigConflict, NotFound
from emq.core.interfaces import DeadLetter, QueueBackend
from emq.core.model import Envelope, GroupRef, Job, Namespace, Priority, TopicRef
from emq.core.replays import Replay, ReplayState, Selection, new_replay_id
from emq.core.settings import Settings

REF = TopicRef(Namespace.ONLINE, "acme", "t")


@pytest.fixture
async def backends(settings: Settings) -> AsyncIterator[tuple[QueueBackend, RedisReplayStore]]:
    queues = await open_queues(settings)
    store = open_replays(settings)
    yield queues, store
    await store.aclose()
    await queues.aclose()


async def _letters(queues: QueueBackend, group: GroupRef, n: int) -> list[str]:
    """``n`` dead letters in ``group``; their DLQ ids."""
    letters = [
        DeadLetter("", Priority.MEDIUM, Envelope(f"j{group.index}-{i}", Job(url=f"https://e.x/{i}"),
                   0).encode(), "500", 500, 3, int(time.time() * 1000))
        for i in range(n)
    ]  # fmt: skip
    await queues.dead_letter(group, 0, letters)
    return [d.id for d in await queues.list_dead(group, None, 100_000)]


async def _backlog(queues: QueueBackend, group: GroupRef) -> int:
    return sum(await queues.backlog(group.queues()))


def _replay(groups: int, selection: Selection | None = None) -> Replay:
    chosen = selection or Selection()
    return Replay(new_replay_id(), REF, groups, 10.0, chosen, created_at=time.time())


async def test_all_moves_each_letter_once_and_counts_right(backends) -> None:  # type: ignore[no-untyped-def]
    queues, store = backends
    g0, g1 = GroupRef(REF, 0), GroupRef(REF, 1)
    await _letters(queues, g0, 7)
    await _letters(queues, g1, 3)
    replay = await store.create(_replay(2))
    assert replay.total == 10
    await _letters(queues, g0, 2)  # dead-lettered after the replay began: not selected
    slices = await store.move(replay, [(0, 4), (1, 4)])
    assert [(s.moved, s.exhausted) for s in slices] == [(4, False), (3, True)]
    slices = await store.move(replay, [(0, 4)])  # the same step again: starts past the cursor
    assert [(s.moved, s.exhausted) for s in slices] == [(3, True)]
    assert (await store.move(replay, [(0, 4)]))[0].moved == 0  # nothing left: nothing moved
    progress = await store.get(REF, replay.id)
    assert (progress.replayed, progress.skipped, progress.remaining) == (10, 0, 0)
    assert await _backlog(queues, g0) == 7 and await _backlog(queues, g1) == 3
    assert len(await queues.list_dead(g0, None, 100)) == 2  # the later ones stay
    assert await store.finish(replay, ReplayState.DONE)
    assert (await store.get(REF, replay.id)).replay.state is ReplayState.DONE
    assert not await store.active()


async def test_by_ids_and_by_window(backends) -> None:  # type: ignore[no-untyped-def]
    queues, store = backends
    g0 = GroupRef(REF, 0)
    ids = await _letters(queues, g0, 5)
    chosen = (f"0:{ids[1]}", f"0:{ids[3]}", f"0:{ids[3]}", "0:1-1")  # a twice, a missing one
    by_ids = await store.create(_replay(1, Selection(ids=chosen)))
    assert by_ids.total == 3
    slices = await store.move(by_ids, [(0, 10)])
    assert (slices[0].moved, slices[0].skipped, slices[0].exhausted) == (2, 1, True)
    left = [d.id for d in await queues.list_dead(g0, None, 100)]
    assert left == [ids[0], ids[2], ids[4]]
    ms = int(left[1].split("-")[0])
    window = await store.create(_replay(1, Selection(since_ms=ms, until_ms=ms)))
    assert window.total == sum(1 for i in left if int(i.split("-")[0]) == ms) >= 1
    moved = (await store.move(window, [(0, 10)]))[0].moved
    assert moved == window.total
    progress = await store.get(REF, window.id)
    assert (progress.replayed, progress.remaining) == (moved, 0)


async def test_cancel_stops_the_next_step_and_keeps_what_moved(backends) -> None:  # type: ignore[no-untyped-def]
    queues, store = backends
    g0 = GroupRef(REF, 0)
    await _letters(queues, g0, 6)
    replay = await store.create(_replay(1))
    assert [r.id for r in await store.active()] == [replay.id]
    await store.move(replay, [(0, 2)])
    cancelled = await store.cancel(REF, replay.id)
    assert cancelled.replay.state is ReplayState.CANCELLED
    assert (cancelled.replayed, cancelled.remaining) == (2, 4)
    step = (await store.move(replay, [(0, 2)]))[0]  # a mover that has not noticed yet
    assert step.stopped and step.moved == 0
    assert len(await queues.list_dead(g0, None, 100)) == 4
    assert (await store.cancel(REF, replay.id)).replay.state is ReplayState.CANCELLED  # again: ok
    assert not await store.active()
    done = await store.create(_replay(1))
    await store.move(done, [(0, 10)])
    await store.finish(done, ReplayState.DONE)
    with pytest.raises(ConfigConflict):
        await store.cancel(REF, done.id)
    with pytest.raises(NotFound):
        await store.get(TopicRef(Namespace.ONLINE, "acme", "other"), done.id)
    assert [p.replay.id for p in await store.latest(REF, 10)] == [done.id, replay.id]


async def test_one_lease_holder_at_a_time(backends) -> None:  # type: ignore[no-untyped-def]
    _, store = backends
    assert await store.lease("rpl_x", "a", 0.3)
    assert not await store.lease("rpl_x", "b", 0.3)
    assert await store.lease("rpl_x", "a", 0.3)  # renewed
    await store.release("rpl_x", "b")  # not b's: stays a's
    assert not await store.lease("rpl_x", "b", 0.3)
    await store.release("rpl_x", "a")
    assert await store.lease("rpl_x", "b", 0.3)
