"""Session-wide real servers and per-test isolation.

Redis and ZooKeeper are started once per test session through the same ``deploy/`` scripts as
``emq stack up``, on free loopback ports (never the stack's own 6390/2191), and stopped at the
end. Each test is isolated by a Redis key prefix (``t-<hex>``) and a ZooKeeper chroot
(``/t-<hex>``). A server that cannot start is an error of every test that needs it, never a skip.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import os
import signal
import sys
import threading
import time
import types
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from hypothesis import settings
from kazoo.client import KazooClient

from emq.core.settings import Settings
from emq.stack import Service, free_port
from tests.forkserver import ForkServer
from tests.postgres import PostgresServer

# Hypothesis's per-example deadline (200 ms) measures the machine, not the code: on a shared
# 2-core machine running the suite in parallel an example of a pure function can take longer.
# Properties stay as strict; only the wall-clock deadline is off.
settings.register_profile("emq", deadline=None)
settings.load_profile("emq")

ZK_TICK_MS = "500"  # lets tests use 1-10 s sessions (ZooKeeper allows 2-20 ticks)
START_ATTEMPTS = 3  # starts of a session server, each on a fresh free port


def _start(service: Service) -> Service:
    """Start ``service``; if it fails, again on another free port (START_ATTEMPTS in all).

    A port found free may be taken before the server binds it, by a parallel test worker
    (``make test`` runs pytest-xdist) or by anything else on the machine."""
    for _ in range(START_ATTEMPTS - 1):
        try:
            service.start()
            return service
        except Exception:
            with contextlib.suppress(Exception):
                service.stop()
            service = replace(service, port=free_port())
    try:
        service.start()
    except Exception as e:
        pytest.fail(f"could not start {service.name} for the tests: {e}", pytrace=False)
    return service


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    base = tmp_path_factory.mktemp("redis")
    service = _start(Service("redis", "redis.sh", base, free_port()))
    SESSION_SERVERS.append(service)
    yield service
    service.stop()


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    base = tmp_path_factory.mktemp("zookeeper")
    service = _start(Service("zookeeper", "zookeeper.sh", base, free_port(), (ZK_TICK_MS,)))
    SESSION_SERVERS.append(service)
    yield service
    service.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """Debian's PostgreSQL, a cluster of the session's own (tests/postgres.py)."""
    error: Exception | None = None
    for _ in range(START_ATTEMPTS):  # each on a fresh free port, as _start
        server = PostgresServer(free_port())
        try:
            server.start()
            break
        except Exception as e:
            error = e
            with contextlib.suppress(Exception):
                server.stop()
    else:
        pytest.fail(f"could not start postgresql for the tests: {error}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer, test_id: str) -> Iterator[str]:
    """A database of this test's own on the session's PostgreSQL, dropped after."""
    import psycopg  # (only the tests that use PostgreSQL pay for the import)

    name = test_id.replace("-", "_")
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    yield postgres_server.url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def emq_shim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory whose ``emq`` runs each command in a child of one fork server that imported
    the CLI once (tests/forkserver.py): the console script's code without its import time."""
    directory = tmp_path_factory.mktemp("emq-shim")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    server = ForkServer(directory, env | {"PYTHONPATH": str(Path(__file__).parent.parent)})
    server.shim(directory)
    yield directory
    server.close()


@pytest.fixture
def test_id() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def redis_url(redis_server: Service) -> str:
    return f"redis://{redis_server.address}/0"


@pytest.fixture
async def redis_client(redis_url: str, test_id: str) -> AsyncIterator[aioredis.Redis]:
    """A client on the session's Redis; every key under this test's prefix is deleted after."""
    client = aioredis.Redis.from_url(redis_url)
    yield client
    keys = [k async for k in client.scan_iter(match=f"{test_id}:*", count=1000)]
    if keys:
        await client.delete(*keys)
    await client.aclose()


@pytest.fixture
def zk_hosts(zk_server: Service, test_id: str) -> Iterator[str]:
    """``host:port/t-<hex>``: a chroot that exists for this test only."""
    root = KazooClient(hosts=zk_server.address)
    root.start(timeout=10)
    root.ensure_path(f"/{test_id}")
    yield f"{zk_server.address}/{test_id}"
    root.delete(f"/{test_id}", recursive=True)
    root.stop()
    root.close()


@pytest.fixture
def zk_client(zk_hosts: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zk_hosts)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def settings(redis_url: str, zk_hosts: str, test_id: str, tmp_path: Path) -> Settings:
    """Settings pointing at this test's isolated slice of the real servers."""
    return Settings(
        redis_url=redis_url,
        zk_hosts=zk_hosts,
        redis_key_prefix=test_id,
        stack_dir=str(tmp_path / "stack"),
        admin_token="test-admin-token",
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """On failure, attach the tails of the server logs the test used."""
    report = yield
    if report.failed:
        funcargs = getattr(item, "funcargs", {})
        for name in ("redis_server", "zk_server"):
            service = funcargs.get(name)
            if isinstance(service, Service):
                report.sections.append((f"{service.name} log (tail)", service.log_tail(30)))
    return report


SESSION_SERVERS: list[Service] = []  # the session's Redis and ZooKeeper, once started
STUCK_REPORT_BEFORE_S = 10  # the report comes this long before pytest-timeout fails the test


@pytest.fixture(autouse=True)
def _report_when_stuck(request: pytest.FixtureRequest) -> Iterator[None]:
    """Shortly before pytest-timeout fails a test (setup, call or teardown), print whether the
    session's servers still run and what the test's event loop waits on. pytest-timeout dumps
    threads, not asyncio tasks: a teardown once stuck for its 120 s behind a ZooKeeper that had
    gone showed only two kazoo threads retrying "Connection refused". Printed to stderr from a
    timer thread, so the report's captured output carries it; a test that ends first cancels
    it."""
    marker = request.node.get_closest_marker("timeout")
    timeout = (
        float(marker.args[0])
        if marker and marker.args
        else float(request.config.getini("timeout") or 0)
    )
    if timeout <= STUCK_REPORT_BEFORE_S:
        yield
        return
    timer = threading.Timer(timeout - STUCK_REPORT_BEFORE_S, _report_stuck, (request.node.nodeid,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _report_stuck(nodeid: str) -> None:
    lines = [f"{nodeid} still runs, {STUCK_REPORT_BEFORE_S} s before its timeout:"]
    lines += [f"  {s.name}: {_server_state(s)}" for s in SESSION_SERVERS]
    lines.append("  asyncio tasks:")
    lines.append(_pending_tasks())
    print("\n".join(lines), file=sys.stderr, flush=True)


def _server_state(service: Service) -> str:
    try:
        status = service.status()
    except Exception as e:  # (a diagnostic: never the failure itself)
        return f"status unknown: {type(e).__name__}: {e}"
    return f"{'running' if status.running else 'NOT RUNNING'} (pid {status.pid}, {status.address})"


def _pending_tasks() -> str:
    """Each task of every event loop not closed yet, and each async generator suspended in an
    await (a fixture's teardown: a task's stack stops at the generator), with the frames they
    wait in. Read from another thread while the loop blocks in its select: racy, a diagnostic
    only."""
    lines: list[str] = []
    objects = gc.get_objects()
    for loop in [o for o in objects if isinstance(o, asyncio.AbstractEventLoop)]:
        if loop.is_closed():
            continue
        with contextlib.suppress(RuntimeError):  # (a set changing size)
            for task in asyncio.all_tasks(loop):
                lines.append(repr(task))
                lines += _awaiting(task.get_coro())
    for gen in [o for o in objects if isinstance(o, types.AsyncGeneratorType)]:
        if gen.ag_await is not None:
            lines.append(repr(gen))
            lines += _awaiting(gen)
    return "\n".join(lines) or "none"


def _awaiting(obj: object) -> list[str]:
    """The frames of a coroutine (or generator) and of what it awaits, outermost first."""
    lines = []
    for _ in range(50):
        frame = next((getattr(obj, a) for a in ("cr_frame", "ag_frame", "gi_frame")
                      if getattr(obj, a, None) is not None), None)  # fmt: skip
        if frame is None:
            break
        lines.append(f"  {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
        obj = next((getattr(obj, a) for a in ("cr_await", "ag_await", "gi_yieldfrom")
                    if getattr(obj, a, None) is not None), None)  # fmt: skip
    return lines


class RestartableRedis:
    """A Redis of one test's own (deploy/redis.sh, AOF everysec), to kill and restart."""

    def __init__(self, service: Service) -> None:
        self.service = service

    @property
    def url(self) -> str:
        return f"redis://{self.service.address}/0"

    def kill(self) -> None:
        """SIGKILL, as a crash: no final AOF flush beyond what the server wrote already."""
        pid = int((self.service.data_dir / "redis.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        self._wait_stopped()

    def stop(self) -> None:
        """A clean shutdown (SIGTERM)."""
        self.service.stop()
        self._wait_stopped()

    def start(self) -> None:
        self.service.start()

    def _wait_stopped(self) -> None:
        deadline = time.monotonic() + 10
        while self.service.status().running:
            if time.monotonic() > deadline:
                raise AssertionError("redis did not stop")
            time.sleep(0.02)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RestartableRedis]:
    """A Redis for this test only; a test that overrides ``redis_url`` with it owns its life."""
    redis = RestartableRedis(
        _start(Service("redis", "redis.sh", tmp_path / "own-redis", free_port()))
    )
    yield redis
    redis.service.stop()


# The parallel pass runs with `--dist loadfile`: each file on one worker, so a module fixture is
# built once; but the Spark tests' files go to one worker together (the scheduler below): they
# share one SparkSession per worker (tests/spark/conftest.py), so they start one JVM, not one per
# worker (~25 s of CPU each, the JVM's start and its first job's warm-up). (The docs page that
# runs Spark cannot be a unit of its own: it plans on the history the pages before it recorded on
# their module's stack.)
#
# The units go to the workers in the order of LONG_UNITS_FIRST, longest first, then the rest by
# their number of tests (xdist's own order, which alone would hand the one-test files of a minute
# out last): a long unit handed out last runs alone at the end while the other workers idle;
# handed out first, the short ones fill in around it. The list is ordered by the units' times in
# a `--durations` run of the parallel pass; a unit missing from it only starts later.
SPARK_FILES = "tests/spark/"
LONG_UNITS_FIRST = (
    SPARK_FILES,
    "tests/docs/test_blocks.py",
    "tests/console/test_console.py",
    "tests/api/test_openapi_fuzz.py",
    "tests/adapters/test_cluster_failover.py",
    "tests/api/test_workers.py",
    "tests/deploy/test_stack.py",
    "tests/emq/test_cli_commands.py",
    "tests/test_layering.py",
    "tests/packaging/test_wheel.py",
    "tests/allocator/test_simulate.py",
    "tests/docs/test_site.py",
    "tests/bench/test_paced.py",
)


def _scope(nodeid: str) -> str:
    """The unit of work of a test (see above): its file, but the Spark files are one unit."""
    path = nodeid.split("::", 1)[0]
    return SPARK_FILES if path.startswith(SPARK_FILES) else path


class _UnitsLongestFirst:
    """A plugin of the xdist controller (only there is the hook known): ``--dist loadfile``, with
    the units of work of :func:`_scope`, handed out in collection order (see
    :func:`pytest_collection_modifyitems`), not re-sorted by their number of tests."""

    @staticmethod
    def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
        if config.getoption("dist") != "loadfile":
            return None
        from xdist.scheduler import LoadFileScheduling

        config.option.loadscopereorder = False

        class UnitsLongestFirst(LoadFileScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return _scope(nodeid)

        return UnitsLongestFirst(config, log)


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist") and not os.environ.get("PYTEST_XDIST_WORKER"):
        config.pluginmanager.register(_UnitsLongestFirst(), "emq-units-longest-first")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist only: the units of LONG_UNITS_FIRST first, in its order, then the others by
    their number of tests, most first (a stable sort: a unit's tests keep their order)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    rank = {name: i for i, name in enumerate(LONG_UNITS_FIRST)}
    sizes = collections.Counter(_scope(item.nodeid) for item in items)

    def order(item: pytest.Item) -> tuple[int, int]:
        unit = _scope(item.nodeid)
        return rank.get(unit, len(rank)), -sizes[unit]

    items.sort(key=order)
