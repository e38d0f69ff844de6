"""The sender pool without HTTP: slow pushes leave their senders, timeouts shrink an endpoint."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from emq.core.model import Namespace, Topic, TopicRef
from worker.dispatch import Handoff
from worker.groups import Buffered, GroupState, TopicState
from worker.senders import SenderPool


class Pushes:
    """A push that waits until released (or ``timeout_s``)."""

    def __init__(self) -> None:
        self.running: dict[int, asyncio.Future[None]] = {}
        self.started = asyncio.Event()

    async def push(self, group: GroupState, item: Buffered) -> None:
        fut = asyncio.get_running_loop().create_future()
        self.running[id(item)] = fut
        self.started.set()
        try:
            await fut
        finally:
            del self.running[id(item)]

    def raised(self, group: GroupState, item: Buffered, error: Exception) -> None:
        raise AssertionError(f"no push here raises: {error!r}")

    def release_all(self) -> None:
        for fut in self.running.values():
            if not fut.done():
                fut.set_result(None)


def group(name: str, concurrency: int = 32) -> GroupState:
    topic = TopicState(
        Topic(TopicRef(Namespace.ONLINE, "t", name), 50, 1, endpoint_concurrency=concurrency)
    )
    g = GroupState(topic.ref.group(0), 1, topic, 50, [None, None, None])
    topic.groups[0] = g
    return g


def send(sends: Handoff[tuple[GroupState, Buffered]], g: GroupState, n: int) -> list[Buffered]:
    items = [Buffered(g.ref.queues()[1], None, b"{}", 0.0, None) for _ in range(n)]  # type: ignore[arg-type]
    for item in items:
        g.in_flight += 1
        g.topic.in_flight += 1
        sends.put_nowait((g, item))
    return items


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


@pytest.mark.serial
async def test_stuck_pushes_leave_their_senders_and_replacements_take_the_next_jobs() -> None:
    sends: Handoff[tuple[GroupState, Buffered]] = Handoff(4)
    pushes = Pushes()
    pool = SenderPool(
        sends, pushes.push, pushes.raised, size=4, most=100, stuck_s=0.5, timeout_s=10
    )
    run = asyncio.create_task(pool.run())
    hang = group("hang")
    send(sends, hang, 4)
    await settle()
    assert len(pushes.running) == 4 and sends.holding == 4 and sends.qsize() == 0
    ok = group("ok")
    send(sends, ok, 3)
    await settle()
    assert len(pushes.running) == 4  # every sender held: the healthy jobs wait
    assert pool.scan(time.monotonic() + 1.0) == 0  # past stuck_s: all four detach, none stuck
    await settle()
    assert pool.detached == 4 and len(pool) == 8
    assert len(pushes.running) == 7 and sends.holding == 3  # the healthy ones went at once
    assert time.monotonic() - hang.topic.slow_at < 2.0  # the hanging topic is known slow now
    pushes.release_all()
    await settle()
    assert len(pool) == 4 and pool.detached == 0 and sends.holding == 0  # back to its size
    assert hang.topic.in_flight == 0 and ok.topic.in_flight == 0
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)


async def test_a_known_slow_topic_detaches_when_taken_and_the_pool_stops_at_most() -> None:
    sends: Handoff[tuple[GroupState, Buffered]] = Handoff(2)
    pushes = Pushes()
    pool = SenderPool(sends, pushes.push, pushes.raised, size=2, most=5, stuck_s=0.5, timeout_s=10)
    run = asyncio.create_task(pool.run())
    slow = group("slow")
    slow.topic.slow_at = time.monotonic()
    send(sends, slow, 6)
    await settle()
    # Three detached (the pool reached five tasks), then two more hold the two senders.
    assert pool.detached == 3 and len(pool) == 5 and sends.holding == 2
    assert len(pushes.running) == 5 and sends.qsize() == 1
    pushes.release_all()
    await settle()
    pushes.release_all()
    await settle()
    assert slow.topic.in_flight == 0 and len(pool) == 2
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)


async def test_timeouts_halve_an_endpoint_and_answers_in_time_give_slots_back() -> None:
    sends: Handoff[tuple[GroupState, Buffered]] = Handoff(8)
    pushes = Pushes()
    pool = SenderPool(
        sends, pushes.push, pushes.raised, size=8, most=100, stuck_s=0.5, timeout_s=0.05
    )
    run = asyncio.create_task(pool.run())
    hang = group("hang", concurrency=8)
    hang.topic.slow_at = time.monotonic()  # detached as taken
    send(sends, hang, 8)
    await settle()
    assert hang.topic.room() == 0
    await asyncio.sleep(0.06)  # past timeout_s
    pushes.release_all()
    await settle()
    assert hang.topic.cut == 7 and hang.topic.room() == 1  # 8 -> 4 -> 2 -> 1, then held at 1
    hang.topic.slow_at = -1e9  # not slow any more: pushes answered at once
    send(sends, hang, 1)
    await settle()
    pushes.release_all()
    await settle()
    assert hang.topic.cut == 6  # one back per answer in time
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)


async def test_a_push_that_raises_ends_its_job_not_its_sender() -> None:
    sends: Handoff[tuple[GroupState, Buffered]] = Handoff(2)
    raised: list[tuple[GroupState, Exception]] = []
    calls = 0

    async def boom(group: GroupState, item: Buffered) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("boom")

    pool = SenderPool(
        sends,
        boom,
        lambda g, item, e: raised.append((g, e)),
        size=2,
        most=10,
        stuck_s=0.5,
        timeout_s=10,
    )
    run = asyncio.create_task(pool.run())
    g = group("g")
    send(sends, g, 3)
    for _ in range(200):
        if len(raised) == 3:
            break
        await asyncio.sleep(0.01)
    assert calls == 3 and [str(e) for _, e in raised] == ["boom"] * 3
    assert all(x is g for x, _ in raised)
    assert not run.done() and len(pool) == 2  # every sender still there
    assert g.topic.in_flight == 0
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)


def test_max_in_flight_under_the_senders_is_one_clear_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "emq", "config", "show"],
        env={"PATH": "/usr/bin:/bin", "EMQ_WORKER_MAX_IN_FLIGHT": "10"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert done.stderr == (
        "emq: error: EMQ_WORKER_MAX_IN_FLIGHT: must be at least EMQ_WORKER_SENDERS (256), got 10\n"
    )


FD_SCRIPT = """
import logging, resource, sys
from worker.main import raise_fd_limit
logging.basicConfig(stream=sys.stdout, format="%(levelname)s %(message)s")
resource.setrlimit(resource.RLIMIT_NOFILE, (64, int(sys.argv[1])))
print(raise_fd_limit(int(sys.argv[2])), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def test_the_worker_raises_its_open_file_limit_to_the_hard_limit_and_says_when_it_is_short() -> (
    None
):
    def run(hard: int, in_flight: int) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", FD_SCRIPT, str(hard), str(in_flight)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout.splitlines()

    assert run(4096, 2000) == ["4096 4096"]
    short = run(1024, 10_000)
    assert short[-1] == "1024 1024"
    assert short[0].startswith("WARNING open-file limit 1024 is under EMQ_WORKER_MAX_IN_FLIGHT")


async def test_time_the_loop_stood_still_does_not_make_pushes_stuck() -> None:
    sends: Handoff[tuple[GroupState, Buffered]] = Handoff(4)
    pushes = Pushes()
    pool = SenderPool(
        sends, pushes.push, pushes.raised, size=4, most=100, stuck_s=0.5, timeout_s=10
    )
    run = asyncio.create_task(pool.run())
    g = group("g")
    now = time.monotonic()
    pool.scan(now)
    send(sends, g, 2)
    await settle()
    # The next scan comes a second late (the loop stood still): the pushes are not stuck...
    assert pool.scan(now + 1.0) == 0 and pool.detached == 0 and pool.stalled > 0.8
    assert time.monotonic() - g.topic.slow_at > 100
    # ...until they have run past stuck_s besides the stall.
    for tenth in range(1, 7):  # scans at their period from then on
        pool.scan(now + 1.0 + tenth / 10)
    assert pool.detached == 2
    pushes.release_all()
    await settle()
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)
