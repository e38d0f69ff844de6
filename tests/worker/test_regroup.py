"""Order per key across a quota change that adds groups (worker.regroup): a key the change moved
waits in its new group until its old group has finished the jobs placed there before the change;
unkeyed jobs and other keys go meanwhile. On the in-memory store and a dispatcher; the real parts
run it in tests/bench/test_regroup_run.py."""

from __future__ import annotations

import pytest

from adapters.memory_queue import MemoryQueueBackend
from capacity.keyhash import jump_hash
from emq.core.interfaces import Checkpoint, Offset, PutItem
from emq.core.model import Namespace, Topic, TopicRef
from tests.worker.test_keys import WALL, Recorder, fill, finish, go
from worker.dispatch import Dispatcher
from worker.groups import GroupState, TopicState
from worker.regroup import Fence, Regroups, reached, waits_for


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


def test_a_fence_holds_only_keys_in_the_new_groups_and_only_until_their_old_queue_passes() -> None:
    fence = Fence(2, 4)
    moved = keys_in(3, 4, 20)
    assert {jump_hash(k, 2) for k in moved} == {0, 1}  # from both old groups
    for key in moved:
        assert fence.waits_for(3, key, 1) == (fence, jump_hash(key, 2), 1)
        assert fence.waits_for(1, key, 1) is None  # an old group is never held
    fence.open[0] = [True, True, False]  # group 0's high and medium passed, not its low
    from_0 = [k for k in moved if jump_hash(k, 2) == 0]
    assert all(fence.waits_for(3, k, r) is None for k in from_0 for r in (0, 1))
    assert all(fence.waits_for(3, k, 2) == (fence, 0, 2) for k in from_0)
    assert fence.waiting() == [(0, 2), (1, 0), (1, 1), (1, 2)] and not fence.passed
    fence.open = [[True] * 3, [True] * 3]
    assert fence.passed and all(fence.waits_for(3, k, 2) is None for k in moved)
    later = Fence(4, 6)  # a second change: its own groups only
    assert waits_for([later], 3, moved[0], 0) is None
    assert waits_for([Fence(2, 4), later], 3, moved[0], 0) is not None


def test_an_old_queue_passes_when_its_checkpoint_reaches_its_tail() -> None:
    assert reached(None, None) and reached(Checkpoint(Offset(5, 0), 1), None)
    assert reached(Checkpoint(Offset(7, 2), 1), Offset(7, 2))
    assert not reached(Checkpoint(Offset(7, 1), 1), Offset(7, 2))
    assert not reached(None, Offset(7, 2))  # nothing committed yet


def dispatcher_and_fence(
    index: int = 1,
) -> tuple[TopicState, Fence, GroupState, Recorder, Dispatcher]:
    topic = topic_of()
    fence = Fence(1, 3)
    topic.fences.append(fence)
    g = own(topic, index)
    rec = Recorder()
    return topic, fence, g, rec, Dispatcher(rec, 0.005)


def test_a_moved_keys_jobs_park_while_unkeyed_jobs_go_and_then_go_in_order() -> None:
    topic, fence, g, rec, d = dispatcher_and_fence()
    key, other = keys_in(1, 3, 2)
    jobs = fill(g, [key, None, key, other, None, key])
    go(d, g, 10, WALL)
    assert rec.sent == [jobs[1], jobs[4]]  # the unkeyed ones; both keys wait for group 0
    assert g.keys is not None and g.keys.fenced == {
        (fence, 0, 1): [jobs[0], jobs[2], jobs[3], jobs[5]]
    }
    assert g.keys.parked == 4 and g.keys.ranks == [0, 4, 0]
    regroups = Regroups(MemoryQueueBackend(), d.unfence)
    regroups._watching.append((topic, fence))
    regroups.open(topic, fence, 0, 1)
    assert g.keys.fenced == {} and g.keys.parked == 0 and fence in topic.fences  # (H, L wait)
    go(d, g, 10, WALL + 0.1)
    assert rec.sent[2:] == [jobs[0], jobs[3]]  # each key's first; then one at a time
    finish(d, g, jobs[0])
    go(d, g, 10, WALL + 0.2)
    assert rec.sent[4:] == [jobs[2]]
    finish(d, g, jobs[2])
    go(d, g, 10, WALL + 0.3)
    assert rec.sent[5:] == [jobs[5]]
    for rank in (0, 2):
        regroups.open(topic, fence, 0, rank)
    assert fence.passed and topic.fences == [] and regroups._watching == []


def test_a_passed_priority_goes_while_another_of_the_same_key_waits() -> None:
    _, fence, g, rec, d = dispatcher_and_fence()
    fence.open[0][0] = True  # the old group's highs are done, its lows not
    key = keys_in(1, 3, 1)[0]
    low = fill(g, [key], priority=2)
    high = fill(g, [key], priority=0)
    go(d, g, 10, WALL)
    assert rec.sent == high and g.keys is not None and g.keys.fenced == {(fence, 0, 2): low}


def test_a_job_of_a_key_that_stayed_in_its_group_is_not_held() -> None:
    _, _, g, rec, d = dispatcher_and_fence(index=0)  # the old group
    jobs = fill(g, keys_in(0, 3, 3))
    go(d, g, 10, WALL)
    assert rec.sent == jobs


async def test_the_fence_reads_old_tails_and_opens_a_queue_once_its_checkpoint_reaches_it() -> None:
    queues = MemoryQueueBackend()
    topic = topic_of()
    old = topic.topic.ref.group(0)
    await queues.claim(old, 1)
    items = [PutItem(old.queues()[p], f"j{p}{i}", b"{}") for p in (0, 2) for i in range(3)]
    await queues.put(items)
    released: list[tuple[GroupState, object, int]] = []
    regroups = Regroups(
        queues, lambda g, until, rank: released.append((g, until, rank)), settle_s=0.0
    )
    fence = regroups.changed(topic, 1, 3)
    g = own(topic, 2)
    key = keys_in(2, 3, 1)[0]
    fill(g, [key], priority=2)
    go(Dispatcher(Recorder(), 0.005), g, 10, WALL)
    await regroups.step()
    assert fence.tails is not None and fence.tails[1] is None  # medium: empty, passed at once
    high, low = fence.tails[0], fence.tails[2]
    assert high is not None and low is not None
    assert fence.open == [[False, True, False]]
    await queues.put([PutItem(old.queues()[0], "after", b"{}")])  # placed after: not waited for
    await queues.write_checkpoints([(old.queues()[0], high, 1)])
    await regroups.step()
    assert fence.open == [[True, True, False]] and released == []  # no high was parked
    await queues.write_checkpoints([(old.queues()[2], low, 1)])
    await regroups.step()
    assert fence.passed and released == [(g, (fence, 0, 2), 2)]
    assert topic.fences == [] and regroups._watching == []


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
