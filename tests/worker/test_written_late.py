"""A request written later than its pusher's write margin after its gate (the CPU taken away
between the two) has its quota grant moved to its write (worker.runtime ``_written_late``): the
grant a quota later waits a window after the write, so what a receiver counts in any 1000 ms
stays within the quota, with no slack.

A worker on the in-memory backends, a backlogged topic, and a pusher that asks the gate as the
lean client does and reports every third request as written ``LATE_S_WRITE`` after it: the
sliding second over those write times is what a receiver would count."""

from __future__ import annotations

import time

import pytest

from emq.bench.promises import busiest_window
from emq.core.interfaces import NotSent, Pusher, PushRequest, PushResult
from tests.worker.conftest import push_backlog
from worker.groups import TopicStats
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
