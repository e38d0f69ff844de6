"""A claim that finds a former holder that never let go (killed, or cut off) waits out that
holder's last word before the group is served, and that wait holds nothing else up: a newer
assignment is applied at once (it was applied only after the wait: a worker that joined while
another's session was expiring served the second batch of the dead worker's groups a second late,
recovery 6.1 s against session + 2 s in ``emq bench faults``). A group assigned away during its
wait is never served and keeps its hold, so its next owner waits the former holder out too; one
claimed again at a new epoch still waits out the first claim's wait.

A real :class:`~worker.runtime.Worker` on the in-memory stores with a scripted assignment; the
former holder is a claim in the store by another holder; pushes are recorded with their time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest

import worker.ownership as ownership_module
from adapters.memory_config import MemoryConfigStore
from adapters.memory_queue import MemoryQueueBackend
from emq.core.interfaces import Pusher, PushRequest, PushResult
from emq.core.interfaces.queues import PutItem
from emq.core.job import Envelope, Job
from emq.core.model import GroupRef, Namespace, Priority, Tenant, Topic, TopicRef
from tests.worker.scripted import Scripted
from worker.runtime import Worker
from worker.settings import WorkerSettings

WAIT_S = 1.0  # the contested wait in these tests
TOPIC = TopicRef(Namespace.ONLINE, "t", "orders")
G0, G1 = TOPIC.group(0), TOPIC.group(1)
DEAD = "w-dead/1/0000"  # the former holder: it claimed both groups and never let go


class Recording(Pusher):
    """Answers 200 at once; (monotonic time, url) of every push."""

    def __init__(self) -> None:
        self.pushes: list[tuple[float, str]] = []

    async def push(self, request: PushRequest) -> PushResult:
        self.pushes.append((time.monotonic(), request.url))
        return PushResult(200, 0.0)

    async def aclose(self) -> None:
        return None

    def first(self, group: GroupRef) -> float | None:
        return next((t for t, url in self.pushes if url.endswith(f"/g{group.index}")), None)


class Rig:
    def __init__(self, worker: Worker, queues: MemoryQueueBackend, assignment: Scripted,
                 pusher: Recording) -> None:  # fmt: skip
        self.worker, self.queues, self.assignment, self.pusher = worker, queues, assignment, pusher

    def holder(self, group: GroupRef) -> str | None:
        return self.queues._holders.get(group)

    async def until(self, what: Callable[[], object], timeout_s: float = 10.0) -> float:
        """Poll (every 2 ms) until ``what()`` is true; the monotonic time it was seen true."""
        deadline = time.monotonic() + timeout_s
        while not what():
            assert time.monotonic() < deadline, "timed out"
            await asyncio.sleep(0.002)
        return time.monotonic()

    async def claimed(self, group: GroupRef) -> float:
        """Wait until this worker holds ``group`` in the store: when it was seen."""
        return await self.until(lambda: self.holder(group) == self.worker.holds.holder)


@pytest.fixture
async def rig(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    monkeypatch.setattr(ownership_module, "CONTESTED_WAIT_S", WAIT_S)
    queues = MemoryQueueBackend()
    config = MemoryConfigStore()
    await config.create_tenant(Tenant("t", "t", "0" * 64, time.time()))
    await config.create_topic(Topic(TOPIC, 20, 2))
    for group in (G0, G1):
        await queues.claim(group, 1, DEAD)
        items = []
        for n in range(5):
            job_id = f"msg_g{group.index}_{n:022d}"
            job = Job(url=f"http://127.0.0.1:9/g{group.index}", body="{}")
            envelope = Envelope(job_id, job, int(time.time() * 1000))
            items.append(PutItem(group.queue(Priority.MEDIUM), job_id, envelope.encode()))
        await queues.put(items)
    assignment, pusher = Scripted(config), Recording()
    settings = WorkerSettings(metrics_port="0", shutdown_grace_s=1.0)
    worker = Worker("w", Namespace.ONLINE, settings, queues=queues, config=config,
                    assignment=assignment, pusher=pusher)  # fmt: skip
    stop = asyncio.Event()
    running = asyncio.ensure_future(worker.run(stop))
    try:
        yield Rig(worker, queues, assignment, pusher)
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)
        await queues.aclose()


async def test_a_newer_assignment_is_claimed_while_an_earlier_claim_waits(rig: Rig) -> None:
    await rig.assignment.assign({G0: 2})
    c0 = await rig.claimed(G0)
    await rig.assignment.assign({G0: 2, G1: 2})
    c1 = await rig.claimed(G1)
    # Claimed at once, not after G0's wait (it was: c1 >= c0 + WAIT_S); nothing served yet.
    assert c1 - c0 < WAIT_S / 2
    assert rig.pusher.pushes == []
    assert set(rig.worker.ownership.waiting) == {G0, G1} and not rig.worker.groups
    await rig.until(lambda: rig.pusher.first(G0) and rig.pusher.first(G1))
    first0, first1 = rig.pusher.first(G0), rig.pusher.first(G1)
    assert first0 is not None and first1 is not None
    # Each waits out the former holder's last word from its own claim...
    assert first0 >= c0 + WAIT_S - 0.01 and first1 >= c1 + WAIT_S - 0.01
    # ...and the two waits run side by side, not one after the other.
    assert first1 < c0 + 2 * WAIT_S - 0.2
    assert {g.ref for g in rig.worker.groups.values()} == {G0, G1}
    assert not rig.worker.ownership.waiting


async def test_a_group_assigned_away_in_its_wait_is_never_served_and_keeps_its_hold(
    rig: Rig,
) -> None:
    await rig.assignment.assign({G0: 2})
    c0 = await rig.claimed(G0)
    await rig.assignment.assign({})
    await rig.until(lambda: rig.assignment.released == [(G0, 2)])
    assert not rig.worker.ownership.waiting
    await rig.until(lambda: time.monotonic() > c0 + WAIT_S + 0.3)  # past its wait
    assert rig.pusher.pushes == [] and not rig.worker.groups
    # Its hold is still ours: the next owner finds a holder that did not let go and waits too.
    assert rig.holder(G0) == rig.worker.holds.holder
    assert await rig.queues.claim(G0, 3, "w-next/1/0000") is True


async def test_a_group_claimed_again_at_a_new_epoch_still_waits_out_the_first_claim(
    rig: Rig,
) -> None:
    await rig.assignment.assign({G0: 2})
    c0 = await rig.claimed(G0)
    await rig.assignment.assign({G0: 3})  # our own hold now: this claim alone is not contested
    await rig.until(lambda: rig.queues._epochs.get(G0) == 3)
    first = await rig.until(lambda: rig.pusher.first(G0))
    assert first >= c0 + WAIT_S - 0.01
    assert rig.worker.groups[str(G0)].epoch == 3
    assert rig.assignment.released == [(G0, 2)]


async def test_a_worker_stopped_in_a_wait_gives_the_group_up_and_keeps_its_hold(
    rig: Rig,
) -> None:
    await rig.assignment.assign({G0: 2})
    await rig.claimed(G0)
    await rig.worker.shutdown()
    assert rig.assignment.released == [(G0, 2)]  # nobody waits for this worker's release
    assert rig.holder(G0) == rig.worker.holds.holder and rig.pusher.pushes == []
