"""A request written later than its pusher's write margin after its gate (the CPU taken away
between the two) has its quota grant moved to its write (worker.runtime ``_written_late``): the
grant a quota later waits a window after the write, so what a receiver counts in any 1000 ms
stays within the quota, with no slack.

A worker on the in-memory backends, a backlogged topic, and a pusher that asks the gate as the
lean client does and reports every third request as written ``LATE_S_WRITE`` after it: the
sliding second over those write times is what a receiver would count."""

from __future__ import annotations

import asyncio
import time

import pytest

from emq.bench.promises import busiest_window
from emq.core.interfaces import NotSent, Pusher, PushRequest, PushResult
from tests.worker.conftest import push_backlog
from worker.groups import SpareLaneLog, TopicStats
from worker.http1.pusher import LeanPusher
from worker.runtime import Worker

QPS = 20
JOBS = 4 * QPS  # four windows of a backlogged group
LATE_S_WRITE = 0.03  # far past the margin: the lane a quota later would go 30 ms early


class _LateWrites(Pusher):
    """Asks the gate right before "writing" (the lean client's margin) and reports every third
    write ``LATE_S_WRITE`` later than it happened."""

    write_margin_s = LeanPusher.write_margin_s

    def __init__(self) -> None:
        self.written: list[float] = []

    async def push(self, request: PushRequest) -> PushResult:
        if request.gate is not None and not request.gate():
            raise NotSent
        sent_at = time.time() + (LATE_S_WRITE if len(self.written) % 3 == 0 else 0.0)
        self.written.append(sent_at)
        return PushResult(200, 0.001, sent_at=sent_at)

    async def aclose(self) -> None:
        return None


async def _run() -> tuple[_LateWrites, TopicStats]:
    pusher = _LateWrites()
    stats = await push_backlog("late", QPS, JOBS, pusher, lambda: len(pusher.written))
    assert len(pusher.written) == JOBS
    return pusher, stats


async def test_a_late_write_moves_its_grant_and_every_second_holds_the_quota() -> None:
    pusher, stats = await _run()
    assert busiest_window(sorted(pusher.written)) <= QPS  # not even the slack of one
    # Each move is counted (emq_quota_grants_moved_total{reason="late_write"}): every third
    # write, and any other the test's machine delayed past the margin.
    assert len(range(0, JOBS, 3)) <= stats.moved_late_write <= JOBS


@pytest.mark.serial  # (judges timing: the lane a quota later must go within 27 ms of its time)
async def test_without_the_move_a_receiver_would_count_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What the move prevents, so that the test above can tell: the lane a quota after a late
    # write goes a window after its grant, 30 ms less than a second after that write.
    monkeypatch.setattr(Worker, "_written_late", lambda self, group, item, sent_at: None)
    pusher, _ = await _run()
    assert busiest_window(sorted(pusher.written)) > QPS


class _ExactLateWrites(_LateWrites):
    """As the lean client (``exact_writes``): asks the gate right before "writing" and tells
    every third write, ``LATE_S_WRITE`` late, at once (the request's ``written``), its answer
    only after the loop has run on."""

    exact_writes = True

    def __init__(self) -> None:
        super().__init__()
        self.told_with: list[bool] = []  # whether each request could be told (written set)

    async def push(self, request: PushRequest) -> PushResult:
        if request.gate is not None and not request.gate():
            raise NotSent
        late = len(self.written) % 3 == 0
        sent_at = time.time() + (LATE_S_WRITE if late else 0.0)
        self.written.append(sent_at)
        self.told_with.append(request.written is not None)
        if late and request.written is not None:
            request.written(sent_at)
        await asyncio.sleep(0.001)  # (the answer)
        return PushResult(200, 0.001, sent_at=sent_at)


async def test_a_late_write_told_at_once_moves_its_grant_and_the_spare_lane_holds() -> None:
    # A pusher with exact writes: each group's log has one lane more than the quota
    # (SpareLaneLog), which spends the promise's slack of one: a receiver counts at most
    # QPS + 1 in any 1000 ms, late writes moved as they are told (once each).
    pusher = _ExactLateWrites()
    made: list[Worker] = []
    stats = await push_backlog("exact", QPS, JOBS, pusher, lambda: len(pusher.written), made)
    assert len(pusher.written) == JOBS and all(pusher.told_with)
    assert all(type(g.counter) is SpareLaneLog for g in made[0].groups.values())
    assert busiest_window(sorted(pusher.written)) <= QPS + 1
    assert stats.moved_late_write == len(range(0, JOBS, 3))  # told once, not again at the answer
