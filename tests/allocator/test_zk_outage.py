"""A ZooKeeper outage under a two-worker fleet with load: delivery goes on, on the store's word.

The test runs its own ZooKeeper server (it overrides the session-wide ``zk_server`` fixture), kills
it with SIGKILL for longer than the session timeout and starts it again on the same port and data
directory, as an operator's single ZooKeeper that crashed and came back. Deliveries are counted at
the sink (who sent each one, see :mod:`tests.allocator.test_fleet_e2e`).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from capacity.split import DEFAULT_MAX_GROUP_QPS
from emq.core.errors import BackendUnavailable
from emq.core.settings import Settings
from emq.stack import Service, free_port
from tests.allocator.test_fleet_e2e import (
    AttributedSink,
    History,
    _redis_for_epochs,
    assert_no_overlap,
    claimed,
    history,
    sink,
    until,
)
from tests.conftest import ZK_TICK_MS
from tests.worker.conftest import Stack, stack, worker_process

pytestmark = pytest.mark.serial  # judges timing: `make test` runs it alone

__all__ = ["_redis_for_epochs", "history", "sink", "stack", "worker_process"]

SESSION_S = 4.0
OUTAGE_S = 6.0  # longer than the session: nothing but the store vouches meanwhile
QPS = 50  # per topic; 4 topics of one group: 200 deliveries a second in all


@pytest.fixture
def zk_server(tmp_path: Path) -> Iterator[Service]:
    """A ZooKeeper of this test's own, to kill and restart."""
    service = Service("zookeeper", "zookeeper.sh", tmp_path / "zk", free_port(), (ZK_TICK_MS,))
    service.start()
    yield service
    service.stop()


def kill_9(service: Service) -> None:
    pid = service.status().pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    while service.status().running:
        time.sleep(0.05)


def gaps(arrivals: list[float], start: float, end: float) -> float:
    """The longest time without a delivery between ``start`` and ``end``."""
    times = [start, *sorted(t for t in arrivals if start < t < end), end]
    return max(b - a for a, b in itertools.pairwise(times))


async def once_reconnected(write: Callable[[], Awaitable[None]], timeout_s: float) -> None:
    """Run ``write``, again while ZooKeeper still answers BackendUnavailable (a session that is
    reconnecting after the outage), for up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await write()
            return
        except BackendUnavailable:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def test_delivery_goes_on_through_a_zookeeper_outage_with_one_owner_per_group(
    stack: Stack,
    sink: AttributedSink,
    worker_process: Any,
    history: History,
    zk_server: Service,
    settings: Settings,
) -> None:
    names = [f"z{i}" for i in range(4)]
    ids: set[str] = set()
    for n in names:
        await stack.topic(n, QPS)
        jobs = [{"url": sink.url(n), "body": {"i": i}} for i in range(QPS * 25)]
        ids |= set(await stack.enqueue(n, jobs))
    env = {"EMQ_ZK_SESSION_TIMEOUT_S": str(SESSION_S)}
    workers = [worker_process(f"w{i}", standalone=False, **env) for i in range(2)]
    for w in workers:
        assert w.proc is not None
        sink.pids[w.proc.pid] = w.worker_id
    await until(lambda: claimed(stack, history, names, owners=2), 30)
    await until(lambda: len(sink.arrivals) > QPS * 4 * 2, 10)  # a steady flow

    killed = time.time()
    await asyncio.to_thread(kill_9, zk_server)
    await asyncio.sleep(OUTAGE_S)
    await asyncio.to_thread(zk_server.start)
    back = time.time()
    await asyncio.sleep(4.0)
    window = [at for _, at, _ in sink.arrivals]
    longest = gaps(window, killed - 1.0, time.time())
    during = sum(1 for at in window if killed + 1.0 < at < back)
    print(f"ZooKeeper down {back - killed:.1f} s: longest gap {longest:.2f} s, {during} delivered")
    assert longest <= 2.0, longest
    for n in names:  # every topic kept its pace, not just the total
        mine = [at for t, at, _ in sink.arrivals if t == n]
        assert gaps(mine, killed - 1.0, time.time()) <= 2.0, n
    assert during >= 0.8 * QPS * len(names) * (back - killed - 1.0), during

    # The pace is judged: the rest of the backlog (sized to outlast a slow restart) drains at a
    # group's cap, not at QPS (still one group each).
    for n in names:  # (the test's own ZooKeeper session may still be reconnecting)
        await once_reconnected(lambda n=n: stack.update(n, qps=DEFAULT_MAX_GROUP_QPS), 30)
    await sink.wait_for(lambda: ids <= {d.job_id for d in sink.deliveries}, 60)
    missing = ids - {d.job_id for d in sink.deliveries}
    assert not missing, f"{len(missing)} accepted jobs never delivered"
    assert_no_overlap(sink, history, names)
    for w in workers:  # nobody dropped its groups: the store vouched all along
        assert "self-fences" not in w.log(), w.log()[-2000:]
        assert w.proc is not None and w.proc.poll() is None
