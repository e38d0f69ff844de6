"""Fixtures for the queue adapters: a real 3-master Redis Cluster, and one backend per kind.

The cluster is started once per session through ``deploy/redis-cluster.sh`` (what an operator
runs) on free loopback ports and stopped at the end; if it cannot start, every test that needs it
fails (never skips). ``subject`` / ``backend`` are parametrized over ``memory``, ``redis`` (the
session's standalone server) and ``cluster``; each test's keys live under its ``test_id`` prefix
and are deleted afterwards.
"""

from __future__ import annotations

import contextlib
import random
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from adapters.memory_queue import MemoryQueueBackend
from adapters.redis_queue import connect
from emq.core.interfaces import QueueBackend
from emq.core.naming import RedisKeys

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "redis-cluster.sh"
KINDS = ("memory", "redis", "cluster")
START_ATTEMPTS = 3
IDEMPOTENCY_WINDOW_S = 600
_started: list[ClusterService] = []  # the session's cluster, for failure reports


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_base_port() -> int:
    """A BASEPORT whose three node ports and three cluster-bus ports (+10000) are all free."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20_000, 53_000)
        ports = [base + i for i in range(3)]
        if all(_port_free(p) and _port_free(p + 10_000) for p in ports):
            return base
    raise RuntimeError("no free port range for a Redis Cluster")


@dataclass(frozen=True)
class ClusterService:
    """The session's Redis Cluster, driven by ``deploy/redis-cluster.sh``."""

    data_dir: Path
    base_port: int

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.base_port}/0"

    def run(self, action: str) -> subprocess.CompletedProcess[str]:
        argv = ["bash", str(SCRIPT), action, str(self.data_dir), str(self.base_port)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    def log_tail(self, lines: int = 20) -> str:
        tails = []
        for log in sorted(self.data_dir.glob("node-*/redis.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"== {log}\n" + "\n".join(text))
        return "\n".join(tails) or "(no node logs)"


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterService]:
    # A port found free may be taken before the nodes bind it (by a parallel test worker, or
    # anything else on the machine): then the start fails, and another range is tried.
    for attempt in range(START_ATTEMPTS):
        base = tmp_path_factory.mktemp("redis-cluster")
        service = ClusterService(base, free_base_port())
        done = service.run("start")
        if done.returncode == 0 and done.stdout.startswith("running "):
            break
        service.run("stop")
        if attempt == START_ATTEMPTS - 1:
            reason = done.stderr.strip() or done.stdout.strip()
            pytest.fail(f"could not start the Redis Cluster for the tests: {reason}", pytrace=False)
    _started.append(service)
    yield service
    _started.clear()
    service.run("stop")


class FakeClock:
    """Seconds since the epoch that move only when told to (starts at the real time)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Subject:
    """A backend under test, with what a test needs to look behind it."""

    kind: str
    backend: QueueBackend
    keys: RedisKeys
    clock: FakeClock  # drives the memory backend; Redis uses its own time
    raw: aioredis.Redis | RedisCluster | None = None  # a second client, for Redis kinds


def _url(kind: str, request: pytest.FixtureRequest) -> str | None:
    """The server of a backend kind (started on first use), or None for memory."""
    if kind == "redis":
        url: str = request.getfixturevalue("redis_url")
        return url
    if kind == "cluster":
        return str(request.getfixturevalue("redis_cluster").url)
    return None


@contextlib.asynccontextmanager
async def open_subject(kind: str, url: str | None, test_id: str) -> AsyncIterator[Subject]:
    """A backend of ``kind`` under the ``test_id`` prefix; its keys are deleted afterwards."""
    keys, clock = RedisKeys(test_id), FakeClock()
    if url is None:
        memory = MemoryQueueBackend(idempotency_window_s=IDEMPOTENCY_WINDOW_S, clock=clock)
        async with memory:
            yield Subject(kind, memory, keys, clock)
        return
    cluster = kind == "cluster"
    backend = await connect(
        url, cluster=cluster, prefix=test_id, idempotency_window_s=IDEMPOTENCY_WINDOW_S
    )
    raw = RedisCluster.from_url(url) if cluster else aioredis.Redis.from_url(url)
    try:
        async with backend:
            yield Subject(kind, backend, keys, clock, raw)
    finally:
        await _delete_prefix(raw, test_id)
        await raw.aclose()


async def _delete_prefix(raw: aioredis.Redis | RedisCluster, prefix: str) -> None:
    keys = [k async for k in raw.scan_iter(match=f"{prefix}:*", count=1000)]
    for key in keys:  # one by one: on a Cluster the keys sit on different slots
        await raw.delete(key)


@pytest.fixture(params=KINDS)
async def subject(request: pytest.FixtureRequest, test_id: str) -> AsyncIterator[Subject]:
    """Every backend kind in turn: the contract suite runs against each."""
    async with open_subject(request.param, _url(request.param, request), test_id) as s:
        yield s


@pytest.fixture
def backend(subject: Subject) -> QueueBackend:
    return subject.backend


@pytest.fixture(params=("redis", "cluster"))
async def redis_subject(request: pytest.FixtureRequest, test_id: str) -> AsyncIterator[Subject]:
    """The Redis kinds only, for what only Redis has (scripts, memory usage)."""
    async with open_subject(request.param, _url(request.param, request), test_id) as s:
        yield s


@pytest.fixture
async def cluster_subject(request: pytest.FixtureRequest, test_id: str) -> AsyncIterator[Subject]:
    async with open_subject("cluster", _url("cluster", request), test_id) as s:
        yield s


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """On failure of a test that used the cluster, attach the tails of its node logs."""
    report = yield
    if report.failed and _started and "cluster" in item.nodeid:
        report.sections.append(("redis cluster logs (tail)", _started[0].log_tail()))
    return report
