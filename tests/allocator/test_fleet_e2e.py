"""The fleet with three real ``emq worker`` processes on real ZooKeeper, Redis and an HTTP sink.

What the sink proves. Deliveries carry no worker id (and the delivery headers are the tenants'
contract), so the sink finds out which *process* sent each request from its TCP connection:
the peer port of the connection leads, through ``/proc/net/tcp``, to a socket inode, and the
inode to the one worker process holding it. It records the arrival time of every request (at
arrival, before any sink delay), so "two workers dispatched the same group at once" would show as
their arrivals for one group interleaving. Each topic here has one group, so topic = group.

The interleaving check is against the assignment history, recorded from ``/assignments`` by a
data watch: a group's arrivals may switch from one worker to another only as often as the group
changed owner (a lower bound counted from epochs: an epoch change with the same owner counts
twice). A burst of overlapping dispatch adds switches and fails it. What it does not prove: a
request already sent by a former owner that arrives after the new owner's first (a network
reordering) would pass as long as the switch count fits; on loopback that does not happen.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from kazoo.client import KazooClient
from kazoo.recipe.watchers import DataWatch

from allocator.document import Document
from allocator.view import ZkFleetView
from emq.api import ApiSettings, make_app
from emq.compose import open_config, open_history, open_queues
from emq.core.model import GroupRef, Namespace, TopicRef
from emq.core.naming import RedisKeys, ZkPaths
from emq.core.settings import Settings
from emq.rigs.sink import Sink, SinkProtocol
from tests.worker.conftest import Stack, WorkerProcess, stack, worker_process

pytestmark = pytest.mark.serial  # judges timing: `make test` runs it alone

__all__ = ["stack", "worker_process"]  # fixtures used from the worker harness

SESSION_S = 1.5
FLEET_ENV = {"EMQ_ZK_SESSION_TIMEOUT_S": str(SESSION_S)}
GRACE_S = SESSION_S * 2 / 3


# --------------------------------------------------------------------------- who sent it


def _peer_inodes(server_port: int) -> dict[int, str]:
    """Socket inode of every client connection to ``server_port``, by its local port.

    One pass over the tables per refresh, matching the server port as text first: on a busy
    machine ``/proc/net/tcp`` holds tens of thousands of lines, and a pass per connection
    blocked the sink's loop long enough for pushes to time out and reconnect, in a spiral.
    """
    suffix = f":{server_port:04X}"
    out: dict[int, str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[2].endswith(suffix):
                    out[int(fields[1].rsplit(":", 1)[1], 16)] = fields[9]
    return out


def _socket_owners(pids: dict[int, str]) -> dict[str, str]:
    """Socket inode -> the name of the process among ``pids`` holding it."""
    out: dict[str, str] = {}
    for pid, name in pids.items():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                out[link[8:-1]] = name
    return out


class AttributedSink(Sink):
    """A :class:`Sink` that also records, at arrival, which worker process sent each request."""

    def __init__(self) -> None:
        super().__init__()
        self.pids: dict[int, str] = {}
        self.arrivals: list[tuple[str, float, str]] = []  # (topic, time, worker)
        self._by_connection: dict[int, str] = {}
        self._by_port: dict[int, str] = {}  # a client's local port -> its worker
        self._connections: list[object] = []
        self.port = 0

    def who(self, connection: SinkProtocol) -> str:
        name = self._by_connection.get(id(connection))
        if name is None:
            peer = connection.peer
            name = self._by_port.get(peer[1], "?") if peer else "?"
            if name == "?" and peer:  # a connection opened since the last look: look again
                owners = _socket_owners(self.pids)
                self._by_port = {
                    port: owners[inode]
                    for port, inode in _peer_inodes(self.port).items()
                    if inode in owners
                }
                name = self._by_port.get(peer[1], "?")
            self._by_connection[id(connection)] = name
            self._connections.append(connection)  # held: an id() is never reused meanwhile
        return name

    def on_arrival(self, connection: SinkProtocol, topic: str) -> None:
        self.arrivals.append((topic, time.time(), self.who(connection)))

    def runs(self, topic: str) -> list[tuple[str, float, float, int]]:
        """Consecutive arrivals of ``topic`` from one worker: (worker, first, last, count)."""
        out: list[tuple[str, float, float, int]] = []
        for _, at, w in sorted((a for a in self.arrivals if a[0] == topic), key=lambda a: a[1]):
            if out and out[-1][0] == w:
                out[-1] = (w, out[-1][1], at, out[-1][3] + 1)
            else:
                out.append((w, at, at, 1))
        return out


@pytest.fixture
async def sink() -> AsyncIterator[AttributedSink]:
    async with AttributedSink().serving() as s:
        yield s


# --------------------------------------------------------------------------- the assignment


class History:
    """Every version of ``/assignments`` as a data watch sees it, with its arrival time."""

    def __init__(self, settings: Settings) -> None:
        self.paths = ZkPaths(settings.zk_root)
        self.client = KazooClient(hosts=settings.zk_hosts, timeout=10)
        self.docs: list[tuple[float, Document]] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        self.client.start(timeout=10)
        path = self.paths.assignments(Namespace.ONLINE)
        self.client.ensure_path(path)
        DataWatch(self.client, path, self._seen)

    def _seen(self, data: bytes | None, stat: Any) -> None:  # a kazoo thread; only appends
        if data:
            with self._lock:
                self.docs.append((time.time(), Document.decode(data)))

    @property
    def last(self) -> Document:
        with self._lock:
            return self.docs[-1][1] if self.docs else Document()

    def owner_changes(self, group: str) -> int:
        """A lower bound of how often ``group`` changed owner (see the module docstring)."""
        changes, prev = 0, None
        with self._lock:
            entries = [d.groups[group] for _, d in self.docs if group in d.groups]
        for e in entries:
            if prev is not None and e.epoch != prev.epoch:
                changes += 1 if e.owner != prev.owner else 2
            prev = e
        return changes

    def stop(self) -> None:
        self.client.stop()
        self.client.close()


@pytest.fixture
def history(settings: Settings) -> Iterator[History]:
    h = History(settings)
    h.start()
    yield h
    h.stop()


# --------------------------------------------------------------------------- helpers


def group(name: str) -> GroupRef:
    return GroupRef(TopicRef(Namespace.ONLINE, "acme", name), 0)


_redis: list[Any] = []  # the test's Redis client (one test at a time)


async def redis_epoch(stack: Stack, g: GroupRef) -> int:
    """The group's owner epoch as Redis has it (what the last claim set)."""
    raw = await _redis[0].get(RedisKeys(stack.settings.redis_key_prefix).epoch(g))
    return int(raw or 0)


@pytest.fixture(autouse=True)
def _redis_for_epochs(redis_client: Any) -> Iterator[None]:
    _redis[:] = [redis_client]
    yield
    _redis.clear()


async def claimed(
    stack: Stack, history: History, names: list[str], exclude: str = "", owners: int = 0
) -> bool:
    """True if the document gives every group to an owner (``owners`` distinct ones, if given)
    other than ``exclude`` that has claimed it in Redis."""
    doc = history.last
    if owners and len({e.owner for e in doc.groups.values()}) != owners:
        return False
    for n in names:
        e = doc.groups.get(str(group(n)))
        if e is None or e.owner == exclude or await redis_epoch(stack, group(n)) != e.epoch:
            return False
    return True


async def until(predicate: Any, timeout_s: float, step_s: float = 0.05) -> float:
    started = time.monotonic()
    while True:
        ok = predicate()
        if asyncio.iscoroutine(ok):
            ok = await ok
        if ok:
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"not within {timeout_s} s")
        await asyncio.sleep(step_s)


async def start_fleet(
    stack: Stack, sink: AttributedSink, worker_process: Any, topics: dict[str, int], jobs: int
) -> tuple[list[WorkerProcess], set[str]]:
    ids: set[str] = set()
    for name, qps in topics.items():
        await stack.topic(name, qps)
        if jobs:
            ids |= set(
                await stack.enqueue(
                    name, [{"url": sink.url(name), "body": {"i": i}} for i in range(jobs)]
                )
            )
    workers = [worker_process(f"w{i}", standalone=False, **FLEET_ENV) for i in range(3)]
    for w in workers:
        assert w.proc is not None
        sink.pids[w.proc.pid] = w.worker_id
    return workers, ids


def assert_no_overlap(sink: AttributedSink, history: History, names: list[str]) -> None:
    for n in names:
        runs = sink.runs(n)
        assert all(w != "?" for w, *_ in runs), runs
        allowed = 1 + history.owner_changes(str(group(n)))
        assert len(runs) <= allowed, (n, allowed, [(w, round(b - a, 2), c) for w, a, b, c in runs])


def victim_of(history: History, workers: list[WorkerProcess], leader: bool) -> WorkerProcess:
    doc = history.last
    owners = Counter(e.owner for e in doc.groups.values())
    for w in workers:
        if (w.worker_id == doc.leader) == leader and owners[w.worker_id]:
            return w
    raise AssertionError(f"no {'leader' if leader else 'non-leader'} owning groups: {owners}")


def groups_of(history: History, worker: str) -> list[str]:
    return [g.split("/")[2] for g, e in history.last.groups.items() if e.owner == worker]


# --------------------------------------------------------------------------- the tests


async def test_kill_9_regroups_within_the_session_timeout_and_loses_nothing(
    stack: Stack, sink: AttributedSink, worker_process: Any, history: History, settings: Settings
) -> None:
    names = [f"k{i}" for i in range(12)]
    workers, ids = await start_fleet(stack, sink, worker_process, dict.fromkeys(names, 40), 300)
    await until(lambda: claimed(stack, history, names, owners=3), 20)
    doc = history.last
    assert {str(group(n)) for n in names} == set(doc.groups)  # one owner each, by construction
    assert len({e.owner for e in doc.groups.values()}) == 3
    await asyncio.sleep(2.0)
    # In steady state each group is delivered by exactly the worker the document names.
    recent = [a for a in sink.arrivals if a[1] > time.time() - 1.0]
    senders = defaultdict(set)
    for topic, _, w in recent:
        senders[topic].add(w)
    assert all(senders[n] == {doc.groups[str(group(n))].owner} for n in senders), senders
    await check_workers_view(settings, history, sink)

    victim = victim_of(history, workers, leader=False)
    lost = groups_of(history, victim.worker_id)
    victim.kill()
    took = await until(lambda: claimed(stack, history, lost, exclude=victim.worker_id), 15)
    print(f"kill -9: {len(lost)} groups of {victim.worker_id} owned again in {took:.2f} s")
    assert took <= SESSION_S + 2.0, took
    await sink.wait_for(lambda: ids <= {d.job_id for d in sink.deliveries}, 30)
    missing = ids - {d.job_id for d in sink.deliveries}
    assert not missing, f"{len(missing)} accepted jobs never delivered"
    assert_no_overlap(sink, history, names)


async def check_workers_view(settings: Settings, history: History, sink: AttributedSink) -> None:
    """``GET /v1/workers`` and ``emq fleet workers --json`` show the members and their groups."""
    queues, config = await open_queues(settings), await open_config(settings)
    hist, view = open_history(settings), ZkFleetView(settings.zk_hosts)
    app = make_app(settings, ApiSettings(), config, queues, hist, view)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        admin = {"Authorization": f"Bearer {settings.admin_token}"}
        await until(lambda: _rates_published(client, admin), 10, 0.2)
        body = await (await client.get("/v1/workers", headers=admin)).json()
        doc = history.last
        assert body["generation"] == doc.generation and body["leader"] == doc.leader
        assert {w["id"] for w in body["workers"]} == {"w0", "w1", "w2"}
        for w in body["workers"]:
            assert {g["group"]: g["epoch"] for g in w["groups"]} == {
                g: e.epoch for g, e in doc.of(w["id"]).items()
            }
            assert w["delivered_per_s"] > 0 and w["leader"] == (w["id"] == doc.leader)
        assert (await client.get("/v1/workers")).status == 401
        url = f"http://{client.server.host}:{client.server.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "emq", "fleet", "workers", "--json",
            env=env | {"EMQ_API_URL": url, "EMQ_ADMIN_TOKEN": settings.admin_token},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        out, err = await proc.communicate()
        assert proc.returncode == 0, err
        assert {w["id"] for w in json.loads(out)["workers"]} == {"w0", "w1", "w2"}
    finally:
        await client.close()
        await view.aclose()
        await hist.aclose()
        await config.aclose()
        await queues.aclose()


async def _rates_published(client: TestClient, admin: dict[str, str]) -> bool:
    body = await (await client.get("/v1/workers", headers=admin)).json()
    return (
        all(w["delivered_per_s"] > 0 for w in body.get("workers", [])) and len(body["workers"]) == 3
    )


async def test_a_stopped_worker_is_fenced_and_never_dispatches_alongside_its_successor(
    stack: Stack, sink: AttributedSink, worker_process: Any, history: History
) -> None:
    names = [f"s{i}" for i in range(9)]
    for n in names:
        sink.behaviour[n].delay_s = 0.3  # requests in flight when the worker is stopped
    workers, ids = await start_fleet(stack, sink, worker_process, dict.fromkeys(names, 40), 300)
    await until(lambda: claimed(stack, history, names, owners=3), 20)
    await asyncio.sleep(2.0)
    victim = victim_of(history, workers, leader=False)
    lost = groups_of(history, victim.worker_id)
    old_epochs = {n: history.last.groups[str(group(n))].epoch for n in lost}
    assert victim.proc is not None
    victim.proc.send_signal(signal.SIGSTOP)
    stopped_at = time.time()
    try:
        took = await until(lambda: claimed(stack, history, lost, exclude=victim.worker_id), 15)
        print(f"SIGSTOP: {len(lost)} groups of {victim.worker_id} owned again in {took:.2f} s")
        await asyncio.sleep(1.0)
    finally:
        victim.proc.send_signal(signal.SIGCONT)
    resumed_at = time.time()
    await sink.wait_for(lambda: ids <= {d.job_id for d in sink.deliveries}, 40)
    missing = ids - {d.job_id for d in sink.deliveries}
    assert not missing, f"{len(missing)} accepted jobs never delivered"
    # Nothing it had buffered went out after it woke up: its lease had run out.
    late = [
        a for a in sink.arrivals
        if a[2] == victim.worker_id and stopped_at + 0.2 < a[1] < resumed_at + 0.3
    ]  # fmt: skip
    assert not late, late[:5]
    assert_no_overlap(sink, history, names)
    # Its writes with the old epoch were refused by Redis (it said so), and no checkpoint of its
    # former groups carries an epoch older than the new owners'.
    assert "fenced" in victim.log(), victim.log()[-2000:]
    for n in lost:
        ckpt = await stack.queues.read_checkpoint(group(n).queues()[1])
        assert ckpt is not None and ckpt.epoch > old_epochs[n], (n, ckpt, old_epochs[n])


async def test_leader_killed_a_new_one_takes_over_and_quota_changes_reach_every_worker(
    stack: Stack, sink: AttributedSink, worker_process: Any, history: History
) -> None:
    names = ["big"] + [f"l{i}" for i in range(6)]
    topics = {"big": 900} | dict.fromkeys(names[1:], 30)  # big: 6 groups of 150 QPS
    workers, _ = await start_fleet(stack, sink, worker_process, topics, 0)
    await stack.enqueue("big", [{"url": sink.url("big"), "body": {"i": i}} for i in range(4000)])
    big = [GroupRef(TopicRef(Namespace.ONLINE, "acme", "big"), i) for i in range(6)]
    await until(lambda: claimed(stack, history, names, owners=3), 20)
    await until(lambda: _all_claimed(stack, history, big), 20)
    owners = Counter(history.last.groups[str(g)].owner for g in big)
    assert len(owners) == 3, owners  # every worker holds some of "big"
    await asyncio.sleep(1.5)
    before = sum(1 for t, at, _ in sink.arrivals if t == "big" and at > time.time() - 1.0)
    assert before > 400, before  # it was running well above the quota to come
    changed = time.time()
    await stack.update("big", qps=180)  # 30 QPS per group from now on
    await asyncio.sleep(5.0)
    per_worker = defaultdict(Counter)
    for topic, at, w in sink.arrivals:
        if topic == "big" and changed + 2.0 <= at < changed + 5.0:
            per_worker[w][int(at)] += 1
    for w, n in owners.items():
        seconds = [c for s, c in sorted(per_worker[w].items())][1:-1] or [0]
        assert max(seconds) <= 30 * n + 3, (w, n, per_worker[w])  # it runs at the new quota
    # The leader dies; another takes over and re-assigns its groups.
    leader = next(w for w in workers if w.worker_id == history.last.leader)
    generation = history.last.generation
    leader.kill()
    took = await until(
        lambda: (
            history.last.leader not in ("", leader.worker_id)
            and history.last.generation > generation
        ),
        SESSION_S + 5,
    )
    print(f"leader {leader.worker_id} killed: {history.last.leader} leads after {took:.2f} s")
    await until(lambda: _all_claimed(stack, history, big, exclude=leader.worker_id), 10)
    assert took <= SESSION_S + 2.0, took


async def _all_claimed(
    stack: Stack, history: History, groups: list[GroupRef], exclude: str = ""
) -> bool:
    doc = history.last
    for g in groups:
        e = doc.groups.get(str(g))
        if e is None or e.owner == exclude or await redis_epoch(stack, g) != e.epoch:
            return False
    return True
