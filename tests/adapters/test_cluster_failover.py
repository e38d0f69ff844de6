"""A Redis Cluster failover under a live backend (issue 11, item 1): a master is killed, its
replica takes over, and the same backend (same client, no restart) serves every slot again.

The cluster is this test's own, with one replica per master (``deploy/redis-cluster.sh ... 1``),
on a base port whose six node and six bus ports are free.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.redis_queue import RedisQueueBackend, connect
from emq.core.errors import BackendUnavailable
from emq.core.interfaces import PutItem
from emq.core.model import GroupRef, Namespace, Priority, QueueRef, TopicRef
from tests.adapters.conftest import SCRIPT

FAILOVER_WITHIN_S = 30  # cluster-node-timeout is 5 s; an election follows


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_base(nodes: int = 6) -> int:
    rng = random.Random()
    for _ in range(500):
        base = rng.randrange(20_000, 53_000)
        if all(_free(base + i) and _free(base + i + 10_000) for i in range(nodes)):
            return base
    raise RuntimeError("no free port range for a Redis Cluster with replicas")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    base = _free_base()
    argv = ["bash", str(SCRIPT), "start", str(tmp_path), str(base), "1"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    stop = ["bash", str(SCRIPT), "stop", str(tmp_path), str(base)]
    if done.returncode != 0:
        subprocess.run(stop, capture_output=True, timeout=60, check=False)
        pytest.fail(f"could not start a Redis Cluster with replicas: {done.stderr.strip()}")
    assert len(done.stdout.split()) == 7, done.stdout  # "running" and six pids
    yield tmp_path, base
    subprocess.run(stop, capture_output=True, timeout=60, check=False)


async def _failures(backend: RedisQueueBackend, queues: list[QueueRef]) -> int:
    results = await asyncio.gather(
        *(backend.put([PutItem(q, f"job-{time.time_ns()}", b"x")]) for q in queues),
        return_exceptions=True,
    )
    unexpected = [r for r in results if isinstance(r, Exception | BaseException)]
    others = [r for r in unexpected if not isinstance(r, BackendUnavailable)]
    assert not others, others
    return len(unexpected)


async def test_the_backend_follows_a_failover_without_a_restart(
    cluster: tuple[Path, int],
) -> None:
    data_dir, base = cluster
    backend = await connect(f"redis://127.0.0.1:{base}/0", cluster=True, prefix="failover")
    queues = [
        GroupRef(TopicRef(Namespace.ONLINE, "acme", f"t{i}"), 0).queue(Priority.MEDIUM)
        for i in range(60)  # their hash tags spread over all three masters
    ]
    try:
        assert await _failures(backend, queues) == 0
        master = int((data_dir / f"node-{base + 1}" / "redis.pid").read_text())
        os.kill(master, signal.SIGKILL)
        killed = time.monotonic()
        failed_while_down = 0
        while (failed := await _failures(backend, queues)) and (
            time.monotonic() - killed < FAILOVER_WITHIN_S
        ):
            failed_while_down += failed
            await asyncio.sleep(0.2)
        assert failed == 0, f"slots still unserved {FAILOVER_WITHIN_S} s after the kill"
        assert failed_while_down > 0, "the killed master's slots never failed"
        assert backend.health.up
        print(f"every slot served again {time.monotonic() - killed:.1f} s after the kill")
    finally:
        await backend.aclose()
