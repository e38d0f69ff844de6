"""The replay mover on a real Redis (issue 16, item 4): one mover per replay in the fleet (a
lease), paced at the replay's rate, and a mover that crashes mid-replay is replaced by another
that resumes from the stored cursor: every selected letter ends up in its queue exactly once,
none is lost, and the replay ends DONE with the right counts."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import pytest

from adapters.redis_replay import RedisReplayStore
from emq.compose import open_queues, open_replays
from emq.core.interfaces import ZERO_OFFSET, DeadLetter, QueueBackend
from emq.core.model import Envelope, GroupRef, Job, Namespace, Priority, TopicRef
from emq.core.replays import Replay, ReplayState, new_replay_id
from emq.core.settings import Settings
from worker.replay import ReplayMover

REF = TopicRef(Namespace.ONLINE, "acme", "t")


@pytest.fixture
async def backends(settings: Settings) -> AsyncIterator[tuple[QueueBackend, RedisReplayStore]]:
    queues = await open_queues(settings)
    store = open_replays(settings)
    yield queues, store
    await store.aclose()
    await queues.aclose()


async def _fill(queues: QueueBackend, groups: int, per_group: int) -> None:
    for g in range(groups):
        letters = [
            DeadLetter("", Priority.HIGH, Envelope(f"j{g}-{i}", Job(url="https://e.x/"), 0)
                       .encode(), "HTTP 500", 500, 8, 0)
            for i in range(per_group)
        ]  # fmt: skip
        await queues.dead_letter(GroupRef(REF, g), 0, letters)


async def _queued_ids(queues: QueueBackend, groups: int) -> list[str]:
    ids = []
    for g in range(groups):
        queue = GroupRef(REF, g).queue(Priority.HIGH)
        entries = (await queues.read({queue: ZERO_OFFSET}, 10_000)).get(queue, [])
        ids += [json.loads(e.payload)["id"] for e in entries]
    return ids


async def _until(condition, timeout_s: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not await condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_a_crashed_mover_is_replaced_and_nothing_moves_twice(backends) -> None:  # type: ignore[no-untyped-def]
    queues, store = backends
    await _fill(queues, 2, 40)
    replay = await store.create(Replay(new_replay_id(), REF, 2, 40.0, created_at=time.time()))
    fast = {"tick_s": 0.02, "refresh_s": 0.1, "lease_s": 0.5}
    first, second = ReplayMover(store, "a", **fast), ReplayMover(store, "b", **fast)
    running = asyncio.ensure_future(first.run())
    await _until(lambda: _replayed(store, replay, 20), 5)
    standby = asyncio.ensure_future(second.run())  # waits: the lease is the first's
    await asyncio.sleep(0.3)
    assert second.moved == 0 and first.held
    first._release_all = _nothing  # type: ignore[method-assign]  # a crash: no goodbye
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    crashed_at = first.moved
    started = time.monotonic()
    await _until(lambda: _state_is(store, replay, ReplayState.DONE), 10)
    took = time.monotonic() - started
    standby.cancel()
    await asyncio.gather(standby, return_exceptions=True)
    # The crash may cut a step whose script ran but whose answer never came back: the store's
    # count is the truth, and the successor starts from the store's cursor.
    assert 80 - crashed_at - 1 <= second.moved <= 80 - crashed_at
    # The successor waited for the lease to expire, then kept the pace (40/s): not a burst.
    assert took >= second.moved / 40 * 0.8, took
    ids = await _queued_ids(queues, 2)
    assert len(ids) == len(set(ids)) == 80  # every letter once, none lost
    assert not await queues.list_dead(GroupRef(REF, 0), None, 10)
    progress = await store.get(REF, replay.id)
    assert (progress.replayed, progress.skipped, progress.remaining) == (80, 0, 0)


async def test_the_pace_is_the_replays_rate_spread_over_the_groups(backends) -> None:  # type: ignore[no-untyped-def]
    queues, store = backends
    await _fill(queues, 3, 100)
    replay = await store.create(Replay(new_replay_id(), REF, 3, 30.0, created_at=time.time()))
    mover = ReplayMover(store, "a", tick_s=0.05, refresh_s=0.1)
    running = asyncio.ensure_future(mover.run())
    await _until(lambda: _replayed(store, replay, 1), 5)
    began, before = time.monotonic(), mover.moved
    await asyncio.sleep(2.0)
    moved, elapsed = mover.moved - before, time.monotonic() - began
    await store.cancel(REF, replay.id)
    await _until(lambda: _not_held(mover), 5)
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    assert 30 * elapsed * 0.85 <= moved <= 30 * elapsed + 3, (moved, elapsed)
    per_group = [len(await _queued_ids(queues, 1))]
    for g in (1, 2):
        queue = GroupRef(REF, g).queue(Priority.HIGH)
        per_group.append(len((await queues.read({queue: ZERO_OFFSET}, 1000)).get(queue, [])))
    assert max(per_group) - min(per_group) <= 1, per_group  # even shares
    assert (await store.get(REF, replay.id)).replay.state is ReplayState.CANCELLED


async def _nothing() -> None:
    return None


async def _replayed(store: RedisReplayStore, replay: Replay, n: int) -> bool:
    return (await store.get(REF, replay.id)).replayed >= n


async def _state_is(store: RedisReplayStore, replay: Replay, state: ReplayState) -> bool:
    return (await store.get(REF, replay.id)).replay.state is state


async def _not_held(mover: ReplayMover) -> bool:
    return not mover.held
