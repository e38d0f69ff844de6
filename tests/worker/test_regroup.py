"""Order per key across a quota change that adds groups (worker.regroup): a key the change moved
waits in its new group until its old group has finished the jobs placed there before the change;
unkeyed jobs and other keys go meanwhile. On the in-memory store and a dispatcher; the real parts
run it in tests/bench/test_regroup_run.py."""

from __future__ import annotations

import orjson
import pytest

from adapters.memory_queue import MemoryQueueBackend
from capacity.keyhash import jump_hash
from emq.core.interfaces import Offset, PutItem
from emq.core.model import Namespace, Topic, TopicRef
from tests.worker.test_keys import WALL, Recorder, fill, finish, go
from worker.dispatch import Dispatcher
from worker.groups import GroupState, TopicState
from worker.progress import Progress
from worker.regroup import Fence, Regroups, waits_for


def keys_in(group: int, groups: int, n: int) -> list[str]:
    out, i = [], 0
    while len(out) < n:
        if jump_hash(f"k{i}", groups) == group:
            out.append(f"k{i}")
        i += 1
    return out


def topic_of(groups: int = 3, qps: int = 300) -> TopicState:
    return TopicState(Topic(TopicRef(Namespace.ONLINE, "t", "rg"), qps, groups))


def own(topic: TopicState, index: int) -> GroupState:
    qps = topic.topic.qps // topic.topic.groups
    g = GroupState(topic.topic.ref.group(index), 1, topic, qps, [None, None, None])
    topic.groups[index] = g
    return g


def job(key: str | None, n: int = 0) -> bytes:
    body: dict[str, object] = {"url": "http://x/", "body": str(n)}
    if key is not None:
        body["key"] = key
    return orjson.dumps({"id": f"{key}-{n}", "t": 0, "job": body})


def read_as(fence: Fence, last: dict[int, dict[str, Offset]], tail: Offset) -> None:
    """The fence as after reading its old queues: ``last`` per old queue (others: empty)."""
    fence.tails = [tail if q in last else None for q in range(3 * fence.before)]
    fence.last = [last.get(q, {}) for q in range(3 * fence.before)]
    for q in range(3 * fence.before):
        if q not in last:
            fence.open[q // 3][q % 3] = True


def test_a_moved_key_waits_for_its_own_last_job_in_its_old_queue_and_no_more() -> None:
    fence = Fence(2, 4)
    moved = keys_in(3, 4, 20)
    assert {jump_hash(k, 2) for k in moved} == {0, 1}  # from both old groups
    for key in moved:  # READING: every moved key waits
        assert fence.waits_for(3, key, 1) == (fence, jump_hash(key, 2), 1, None)
        assert fence.waits_for(1, key, 1) is None  # an old group is never held
    a, b = [k for k in moved if jump_hash(k, 2) == 0][:2]
    read_as(fence, {1: {a: Offset(5, 0)}, 4: {}}, Offset(9, 0))  # group 0 medium, 1 medium
    assert fence.waits_for(3, a, 1) == (fence, 0, 1, Offset(5, 0))
    assert fence.waits_for(3, b, 1) is None  # nothing of b before the change
    assert fence.waits_for(3, a, 0) is None  # order is per priority: no high of a waits
    fence.frontier[1] = Offset(5, 0)  # a's last old medium finished
    assert fence.waits_for(3, a, 1) is None
    later = Fence(4, 6)  # a second change: its own groups only
    assert waits_for([later], 3, moved[0], 0) is None
    assert waits_for([Fence(2, 4), later], 3, moved[0], 0) is not None


def test_a_queue_not_read_to_its_end_holds_every_moved_key_until_its_tail() -> None:
    fence = Fence(1, 2)
    key = keys_in(1, 2, 1)[0]
    read_as(fence, {0: {}}, Offset(9, 0))
    assert fence.last is not None
    fence.last[0] = None  # (longer than SCAN_MAX)
    assert fence.waits_for(1, key, 0) == (fence, 0, 0, Offset(9, 0))


def dispatcher_and_fence(
    index: int = 1,
) -> tuple[TopicState, Fence, GroupState, Recorder, Dispatcher]:
    topic = topic_of()
    fence = Fence(1, 3)
    topic.fences.append(fence)
    g = own(topic, index)
    rec = Recorder()
    return topic, fence, g, rec, Dispatcher(rec, 0.005)


def test_moved_keys_park_while_unkeyed_jobs_go_and_then_go_in_order() -> None:
    topic, fence, g, rec, d = dispatcher_and_fence()
    key, other, fresh = keys_in(1, 3, 3)
    jobs = fill(g, [key, None, key, other, None, key, fresh])
    go(d, g, 10, WALL)
    assert rec.sent == [jobs[1], jobs[4]]  # the unkeyed ones; the keys wait (READING)
    reading = (fence, 0, 1, None)
    assert g.keys is not None and g.keys.fenced == {reading: [jobs[i] for i in (0, 2, 3, 5, 6)]}
    assert g.keys.parked == 5 and g.keys.ranks == [0, 5, 0]
    regroups = Regroups(MemoryQueueBackend(), d.unfence)
    regroups._watching.append((topic, fence))
    read_as(fence, {1: {key: Offset(3, 0), other: Offset(4, 0)}}, Offset(4, 0))
    regroups._release(topic, fence)  # back to the buffer: fresh goes, the others wait again
    go(d, g, 10, WALL + 0.1)
    assert rec.sent[2:] == [jobs[6]]
    assert g.keys.fenced == {
        (fence, 0, 1, Offset(3, 0)): [jobs[0], jobs[2], jobs[5]],
        (fence, 0, 1, Offset(4, 0)): [jobs[3]],
    }
    regroups._advance(fence, 0, 1, Offset(3, 0))  # key's last old job finished, not other's
    regroups._release(topic, fence)
    go(d, g, 10, WALL + 0.2)
    assert rec.sent[3:] == [jobs[0]]  # then one at a time
    finish(d, g, jobs[0])
    go(d, g, 10, WALL + 0.3)
    assert rec.sent[4:] == [jobs[2]]
    regroups._advance(fence, 0, 1, Offset(4, 0))  # the tail: the medium queue passed
    regroups._release(topic, fence)
    assert fence.passed and g.keys.fenced == {} and g.keys.parked == 1  # (jobs[5], behind 2)
    go(d, g, 10, WALL + 0.4)
    assert rec.sent[5:] == [jobs[3]]


def test_a_passed_priority_goes_while_another_of_the_same_key_waits() -> None:
    _, fence, g, rec, d = dispatcher_and_fence()
    fence.open[0][0] = True  # the old group's highs are done, its lows not
    key = keys_in(1, 3, 1)[0]
    low = fill(g, [key], priority=2)
    high = fill(g, [key], priority=0)
    go(d, g, 10, WALL)
    assert rec.sent == high and g.keys is not None and g.keys.fenced == {(fence, 0, 2, None): low}


def test_a_job_of_a_key_that_stayed_in_its_group_is_not_held() -> None:
    _, _, g, rec, d = dispatcher_and_fence(index=0)  # the old group
    jobs = fill(g, keys_in(0, 3, 3))
    go(d, g, 10, WALL)
    assert rec.sent == jobs


async def test_the_fence_reads_the_old_queues_and_follows_their_checkpoints() -> None:
    queues = MemoryQueueBackend()
    topic = topic_of()
    old = topic.topic.ref.group(0)
    await queues.claim(old, 1)
    moved, fresh = keys_in(2, 3, 2)
    high, low = old.queues()[0], old.queues()[2]
    put = await queues.put(
        [PutItem(low, f"j{i}", job(k, i)) for i, k in enumerate([moved, None, moved, None])]
    )
    await queues.put([PutItem(high, "h", job(None))])
    rec = Recorder()
    d = Dispatcher(rec, 0.005)
    regroups = Regroups(queues, d.unfence, settle_s=0.0, remote_poll_s=0.0)
    fence = regroups.changed(topic, 1, 3)
    g = own(topic, 2)
    jobs = fill(g, [moved, fresh], priority=2)
    go(d, g, 10, WALL)
    assert rec.sent == [] and g.keys is not None and len(g.keys.fenced[(fence, 0, 2, None)]) == 2
    await regroups.step()  # read: moved's last low is the third entry; fresh has none
    assert fence.last is not None and fence.last[2] == {moved: put[2].offset}
    assert fence.open == [[False, True, False]]  # medium: empty
    go(d, g, 10, WALL + 0.1)
    assert rec.sent == [jobs[1]]  # fresh goes; moved waits for its own last old low
    assert g.keys.fenced == {(fence, 0, 2, put[2].offset): [jobs[0]]}
    await queues.put([PutItem(low, "after", job(moved, 9))])  # placed after: not waited for
    await queues.write_checkpoints([(low, put[1].offset, 1)])
    await regroups.step()
    assert fence.frontier[2] == put[1].offset and g.keys.fenced
    await queues.write_checkpoints([(low, put[2].offset, 1)])
    await regroups.step()
    assert not g.keys.fenced and not fence.passed  # moved's turn; the queue's tail is later
    go(d, g, 10, WALL + 0.2)
    assert rec.sent == [jobs[1], jobs[0]]
    assert fence.tails is not None
    await queues.write_checkpoints([(low, put[3].offset, 1), (high, fence.tails[0], 1)])
    await regroups.step()
    assert fence.passed and topic.fences == [] and regroups._watching == []


def test_progress_frontier_is_the_last_entry_with_everything_below_finished() -> None:
    p = Progress(Offset(1, 0))
    assert p.finished_to() == Offset(1, 0)
    for seq in (1, 2, 3, 4):
        p.fetched(Offset(1, seq))
    p.finished(Offset(1, 2))
    p.finished(Offset(1, 3))
    assert p.finished_to() == Offset(1, 0)  # 1-1 is not finished
    p.finished(Offset(1, 1))
    assert p.finished_to() == Offset(1, 3)
    assert p.committed == Offset(1, 0)  # nothing changed


async def test_an_old_group_owned_here_is_followed_by_its_progress_without_a_checkpoint() -> None:
    queues = MemoryQueueBackend()
    topic = topic_of()
    old = own(topic, 0)
    old.own()
    high = old.ref.queues()[0]
    key = keys_in(1, 3, 1)[0]
    put = await queues.put([PutItem(high, f"j{i}", job(key, i)) for i in range(2)])
    committed: list[list[GroupState]] = []

    async def commit(groups: list[GroupState]) -> None:
        committed.append(groups)

    regroups = Regroups(
        queues, lambda g, until, rank: None, settle_s=0.0, remote_poll_s=0.0, commit=commit
    )
    fence = regroups.changed(topic, 1, 3)
    await regroups.step()
    assert fence.open == [[False, True, True]]  # medium and low: empty
    assert committed == [[old]]  # its new groups are owned elsewhere: they follow its checkpoint
    for result in put:
        assert result.offset is not None
        old.progress[high].fetched(result.offset)
        old.progress[high].finished(result.offset)
    await regroups.step()  # (no checkpoint was written: the progress in memory says it)
    assert fence.passed


async def test_tails_of_the_interface_read_the_queue_to_its_end() -> None:
    queues = MemoryQueueBackend()
    group = TopicRef(Namespace.ONLINE, "t", "tails").group(0)
    await queues.claim(group, 1)
    high = group.queues()[0]
    await queues.put([PutItem(high, f"j{i}", b"{}") for i in range(2500)])
    fast = await queues.tails(group.queues())
    slow = await super(MemoryQueueBackend, queues).tails(group.queues())  # the default
    assert fast == slow and fast[0] is not None and fast[1:] == [None, None]
    await queues.write_checkpoints([(high, fast[0], 1)])
    assert await super(MemoryQueueBackend, queues).tails([high]) == [None]  # all committed


@pytest.mark.parametrize("groups", [(1, 3), (2, 4), (3, 7)])
def test_jump_hash_moves_keys_only_into_the_new_groups(groups: tuple[int, int]) -> None:
    before, after = groups
    for i in range(2000):
        was, now = jump_hash(f"k{i}", before), jump_hash(f"k{i}", after)
        assert now == was or before <= now < after
