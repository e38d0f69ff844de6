"""Recovery after a kill -9 in a two-worker fleet under steady load: how soon, how noisy.

The killed worker's groups must deliver again within the session timeout + 2 s, and the jobs
delivered twice must be at most what it had in flight plus one checkpoint interval of its
deliveries (buffered jobs it never pushed are fetched again by the new owner: not duplicates).
``RECOVERY_SESSION_S`` (default 1.5) sets the session timeout, to measure the default 10 s too.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from capacity.split import DEFAULT_MAX_GROUP_QPS
from tests.allocator.test_fleet_e2e import (
    AttributedSink,
    History,
    _redis_for_epochs,
    assert_no_overlap,
    claimed,
    groups_of,
    history,
    sink,
    until,
    victim_of,
)
from tests.worker.conftest import Stack, stack, worker_process

pytestmark = pytest.mark.serial  # judges timing: `make test` runs it alone

__all__ = ["_redis_for_epochs", "history", "sink", "stack", "worker_process"]

SESSION_S = float(os.environ.get("RECOVERY_SESSION_S", "1.5"))
CHECKPOINT_S = 1.0  # the worker's default checkpoint interval
QPS = 50  # per topic; 4 topics of one group: 200 deliveries a second in all


async def test_a_killed_workers_groups_deliver_again_soon_with_few_duplicates(
    stack: Stack, sink: AttributedSink, worker_process: Any, history: History
) -> None:
    names = [f"r{i}" for i in range(4)]
    ids: set[str] = set()
    backlog_s = 20 + 2 * SESSION_S
    for n in names:
        await stack.topic(n, QPS)
        jobs = [{"url": sink.url(n), "body": {"i": i}} for i in range(int(QPS * backlog_s))]
        ids |= set(await stack.enqueue(n, jobs))
    env = {"EMQ_ZK_SESSION_TIMEOUT_S": str(SESSION_S)}
    workers = [worker_process(f"w{i}", standalone=False, **env) for i in range(2)]
    for w in workers:
        assert w.proc is not None
        sink.pids[w.proc.pid] = w.worker_id
    await until(lambda: claimed(stack, history, names, owners=2), 30)
    await until(lambda: len(sink.arrivals) > QPS * 4 * 3, 20)

    victim = victim_of(history, workers, leader=False)
    lost = groups_of(history, victim.worker_id)
    assert lost
    victim.kill()
    killed = time.time()
    gone = victim.worker_id
    await until(lambda: all(_resumed(sink, n, killed, gone) for n in lost), SESSION_S + 15)
    idle = {n: _resumed(sink, n, killed, gone) - _last_before(sink, n, killed) for n in lost}
    # Measured. The backlog is long (the lost groups must still hold jobs when they resume, however
    # slow the start); the rest drains at a group's cap, not at QPS: ~10 s less of waiting.
    for n in names:
        await stack.update(n, qps=DEFAULT_MAX_GROUP_QPS)  # still one group each
    await sink.wait_for(lambda: ids <= {d.job_id for d in sink.deliveries}, 60)
    missing = ids - {d.job_id for d in sink.deliveries}
    duplicates = sum(c - 1 for c in sink.attempts.values() if c > 1)
    rate = sum(
        1 for t, at, w in sink.arrivals if w == victim.worker_id and killed - 2 < at < killed
    )
    print(
        f"kill -9 (session {SESSION_S:g} s): {len(lost)} groups idle at most "
        f"{max(idle.values()):.2f} s; {duplicates} duplicates ({rate / 2:.0f} deliveries/s by "
        "the victim)"
    )
    assert not missing, f"{len(missing)} accepted jobs never delivered"
    assert max(idle.values()) <= SESSION_S + 2.0, idle
    assert duplicates <= rate / 2 * CHECKPOINT_S + 32, duplicates  # + what may be in flight
    assert_no_overlap(sink, history, names)


def _last_before(sink: AttributedSink, topic: str, at: float) -> float:
    return max(t for n, t, _ in sink.arrivals if n == topic and t <= at)


def _resumed(sink: AttributedSink, topic: str, at: float, gone: str) -> float:
    """When ``topic`` was first delivered after ``at`` by a worker other than ``gone``."""
    return min((t for n, t, w in sink.arrivals if n == topic and t > at and w != gone), default=0.0)
