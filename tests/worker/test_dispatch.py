"""The handoff from the dispatcher to the sender pool."""

from __future__ import annotations

import asyncio

from worker.dispatch import Handoff


async def test_the_handoff_gives_every_item_to_one_sender_in_order() -> None:
    handoff: Handoff[int] = Handoff()
    got: list[tuple[int, int]] = []

    async def sender(n: int) -> None:
        while True:
            item = await handoff.get()
            got.append((n, item))
            await asyncio.sleep(0)  # another sender may run meanwhile

    senders = [asyncio.create_task(sender(n)) for n in range(4)]
    await asyncio.sleep(0)  # all four wait
    for i in range(100):
        handoff.put_nowait(i)
    for _ in range(30):
        await asyncio.sleep(0)
    assert [item for _, item in got] == list(range(100))  # each once, in order
    assert len({n for n, _ in got}) > 1  # the work was shared
    assert handoff.qsize() == 0
    for s in senders:
        s.cancel()
    await asyncio.gather(*senders, return_exceptions=True)


async def test_a_sender_cancelled_as_it_is_woken_passes_the_item_on() -> None:
    handoff: Handoff[str] = Handoff()
    first = asyncio.create_task(handoff.get())
    await asyncio.sleep(0)
    second = asyncio.create_task(handoff.get())
    await asyncio.sleep(0)
    handoff.put_nowait("job")  # wakes the first waiter...
    first.cancel()  # ...which is cancelled before it runs
    assert await asyncio.wait_for(second, 1.0) == "job"
    assert first.cancelled() and handoff.qsize() == 0


async def test_a_burst_reaches_every_idle_sender_at_once() -> None:
    """Each sender holds its job (a push in flight): the wake-up chain must start all four."""
    handoff: Handoff[int] = Handoff()
    started: list[int] = []
    hold = asyncio.Event()

    async def sender() -> None:
        while True:
            started.append(await handoff.get())
            await hold.wait()

    senders = [asyncio.create_task(sender()) for _ in range(4)]
    await asyncio.sleep(0)
    for i in range(6):
        handoff.put_nowait(i)
    for _ in range(10):
        await asyncio.sleep(0)
    assert sorted(started) == [0, 1, 2, 3] and handoff.qsize() == 2  # four in flight, two wait
    hold.set()
    for _ in range(10):
        await asyncio.sleep(0)
    assert sorted(started) == [0, 1, 2, 3, 4, 5]
    for s in senders:
        s.cancel()
    await asyncio.gather(*senders, return_exceptions=True)


async def test_the_limit_caps_jobs_held_and_a_raise_wakes_waiting_senders() -> None:
    handoff: Handoff[int] = Handoff(limit=2)
    holding: list[int] = []
    release = asyncio.Event()

    async def sender(n: int) -> None:
        try:
            while True:
                await handoff.get()
                holding.append(n)
                await release.wait()
                holding.remove(n)
                handoff.done()
        finally:
            handoff.leave()

    senders = [asyncio.create_task(sender(n)) for n in range(4)]
    await asyncio.sleep(0)
    for i in range(10):
        handoff.put_nowait(i)
    for _ in range(10):
        await asyncio.sleep(0)
    assert len(holding) == 2 == handoff.holding and handoff.qsize() == 8
    handoff.set_limit(4)
    for _ in range(10):
        await asyncio.sleep(0)
    assert len(holding) == 4 and handoff.qsize() == 6
    release.set()
    for _ in range(40):
        await asyncio.sleep(0)
    assert handoff.qsize() == 0  # the rest went through the four
    for s in senders:
        s.cancel()
    await asyncio.gather(*senders, return_exceptions=True)


async def test_catch_up_gives_every_waiting_job_a_sender_at_once() -> None:
    """The chain wakes one sender per loop turn; the dispatcher's catch_up wakes the rest."""
    handoff: Handoff[int] = Handoff()
    started: list[int] = []
    hold = asyncio.Event()

    async def sender() -> None:
        started.append(await handoff.get())
        await hold.wait()

    senders = [asyncio.create_task(sender()) for _ in range(3)]
    await asyncio.sleep(0)
    for i in range(3):
        handoff.put_nowait(i)
    await asyncio.sleep(0)
    assert started == [0]  # the chain: one hop this turn
    handoff.catch_up()
    await asyncio.sleep(0)
    assert sorted(started) == [0, 1, 2]
    hold.set()
    await asyncio.gather(*senders)
