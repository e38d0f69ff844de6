"""A key's next job straight to the sender whose push of the key's job just ended
(Dispatcher.keyed_done with a ``claim``; SenderPool pushing it itself), and when it waits for
the dispatcher instead: a higher job buffered in its group, no grant of the group's quota, its
topic paused."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from tests.worker.test_keys import Recorder, fill, group
from worker.dispatch import Dispatcher, Handoff
from worker.groups import LATE_S, Buffered, GroupState
from worker.senders import SenderPool


def dispatched(qps: int = 1000) -> tuple[Dispatcher, Recorder, Recorder, GroupState]:
    """A dispatcher with a claim, and a group with two jobs of key k (the first sent)."""
    rec, claimed = Recorder(), Recorder()
    d = Dispatcher(rec, 0.005)
    d.claim = claimed
    g = group("chain", qps)
    fill(g, ["k", "k"])
    d.wake(g, 0.0)
    d.dispatch(100, time.time(), time.monotonic())
    assert len(rec.sent) == 1 and g.keys is not None and g.keys.parked == 1
    return d, rec, claimed, g


def test_a_keys_next_goes_straight_to_the_sender_with_a_grant() -> None:
    d, rec, claimed, g = dispatched()
    first = rec.sent[0]
    g.topic.in_flight -= 1
    before = time.time()
    nxt = d.keyed_done(g, first)
    assert nxt is not None and claimed.sent == [nxt] and nxt is not first
    assert nxt.reserved_at >= before - LATE_S  # its grant: now (stamped up to LATE_S back)
    assert g.buffered() == 0 and g.keys is not None and g.keys.parked == 0
    assert len(rec.sent) == 1  # not through the dispatcher's send (the Handoff)
    # In flight now: its key's next job (none) is admitted only after it.
    g.topic.in_flight -= 1
    assert d.keyed_done(g, nxt) is None and len(g.keys) == 0


def test_a_higher_job_buffered_sends_the_keys_next_through_the_dispatcher() -> None:
    d, rec, claimed, g = dispatched()
    first = rec.sent[0]
    high = fill(g, [None], priority=0)[0]
    g.topic.in_flight -= 1
    assert d.keyed_done(g, first) is None and not claimed.sent
    assert list(g.buffers[1]) and g.buffers[0][0] is high  # type: ignore[index]
    d.dispatch(100, time.time(), time.monotonic() + 1.0)  # (woken for now)
    assert rec.sent[1] is high and len(rec.sent) == 3  # the high first, then the key's next


def test_without_a_grant_the_keys_next_waits_in_its_buffer() -> None:
    d, rec, claimed, g = dispatched()
    first = rec.sent[0]
    g.counter.reserve(10**6, time.time())  # the group's quota spent for now
    g.topic.in_flight -= 1
    assert d.keyed_done(g, first) is None and not claimed.sent
    assert g.buffered() == 1


def test_a_paused_topic_keeps_the_keys_next_in_its_buffer() -> None:
    d, rec, claimed, g = dispatched()
    first = rec.sent[0]
    g.topic.topic = dataclasses.replace(g.topic.topic, paused=True)
    g.topic.in_flight -= 1
    assert d.keyed_done(g, first) is None and not claimed.sent and g.buffered() == 1


async def test_the_sender_pushes_its_keys_next_itself_and_in_order() -> None:
    """Three jobs of one key: each next one is pushed by the sender that pushed the previous,
    without the Handoff (no other sender is woken for it)."""
    sends: Handoff[tuple[GroupState, Buffered]] = Handoff()
    pushed: list[tuple[Buffered, str | None]] = []
    d, rec, claimed, g = dispatched()

    def claim(group: GroupState, item: Buffered) -> None:
        group.in_flight += 1
        group.topic.in_flight += 1
        claimed.sent.append(item)

    d.claim = claim
    fill(g, ["k"])  # a third job of k
    d.wake(g, 0.0)
    d.dispatch(100, time.time(), time.monotonic() + 1.0)  # (parks it behind the first)
    assert g.keys is not None and g.keys.parked == 2
    g.in_flight += 1  # (the first, as Worker._send counts it)

    async def push(group: GroupState, item: Buffered) -> None:
        task = asyncio.current_task()
        pushed.append((item, task.get_name() if task else None))

    pool = SenderPool(
        sends, push, lambda g, i, e: None, size=4, most=8, stuck_s=10.0, timeout_s=10.0,
        keyed_done=d.keyed_done,
    )  # fmt: skip
    runner = asyncio.create_task(pool.run())
    sends.put_nowait((g, rec.sent[0]))
    for _ in range(50):
        await asyncio.sleep(0)
        if len(pushed) == 3:
            break
    runner.cancel()
    await asyncio.gather(runner, return_exceptions=True)
    assert [item for item, _ in pushed] == [rec.sent[0], *claimed.sent]
    assert len(claimed.sent) == 2 and len({name for _, name in pushed}) == 1
    assert sends.holding == 0 and g.in_flight == 0 and g.topic.in_flight == 0
