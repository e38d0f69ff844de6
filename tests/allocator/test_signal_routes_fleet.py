"""Signals addressed to owners across a real fleet (ZooKeeper) and a real Redis.

The API's route table (:class:`allocator.routes.RouteWatch`) follows the assignment; each
member reads only its own inbox (and the shared keys); when a member leaves, its groups' hints
reach the member that takes them over, and nothing parked in a delayed set is lost.
"""

from __future__ import annotations

import asyncio
import time

from adapters.redis_queue import RedisQueueBackend, connect
from allocator.routes import RouteWatch
from emq.core.interfaces import PutItem
from emq.core.model import GroupRef, Namespace, Priority
from emq.core.signals import SignalRoutes
from tests.allocator.conftest import Fleet, Member, eventually


def routed(routes: SignalRoutes, fleet: Fleet, groups: list[GroupRef]) -> bool:
    """The table names each group's holder (and only members that hold it)."""
    holders = fleet.owners()
    return all(routes.owner(str(g)) in holders.get(g, []) for g in groups)


async def addressed(fleet: Fleet, m: Member) -> RedisQueueBackend:
    s = fleet.settings
    backend = await connect(s.redis_url, cluster=False, prefix=s.redis_key_prefix)
    backend.address_to(m.id, lambda name: any(str(g) == name for g in m.owned))
    return backend


async def collect(backend: RedisQueueBackend, cursor: str, want: set[str]) -> set[str]:
    """Names read until ``want`` is covered (or 5 s pass); returns everything read."""
    seen: set[str] = set()
    deadline = time.monotonic() + 5
    while not want <= seen and time.monotonic() < deadline:
        cursor, names = await backend.wait_ready(cursor, 0.5)
        seen.update(names)
    return seen


async def test_hints_follow_the_owners_across_a_rebalance(fleet: Fleet) -> None:
    groups = await fleet.topics({"a": 6, "b": 4})
    w0, w1 = await fleet.member("w0"), await fleet.member("w1")
    await eventually(lambda: fleet.exactly_once(groups) and bool(w0.owned and w1.owned), 10)
    routes = SignalRoutes()
    s = fleet.settings
    watch = RouteWatch(s.zk_hosts, [Namespace.ONLINE, Namespace.SANDBOX], routes, root=s.zk_root)
    watch.start()
    producer = await connect(s.redis_url, cluster=False, prefix=s.redis_key_prefix, routes=routes)
    b0, b1 = await addressed(fleet, w0), await addressed(fleet, w1)
    try:
        await eventually(lambda: routed(routes, fleet, groups), 10)
        c0, _ = await b0.wait_ready(None, 0)
        c1, _ = await b1.wait_ready(None, 0)
        for g in groups:
            await producer.put([PutItem(g.queue(Priority.MEDIUM), "j", b"{}")])
        mine0, mine1 = {str(g) for g in w0.owned}, {str(g) for g in w1.owned}
        assert await collect(b0, c0, mine0) == mine0  # its own, and nothing else
        assert await collect(b1, c1, mine1) == mine1
        # Jobs parked for w1's groups, then w1 leaves: w0 takes them over.
        due = int(time.time() * 1000)
        for g in w1.owned:
            await producer.put([PutItem(g.queue(Priority.LOW), "d", b'{"id":"d"}', due_ms=due)])
        moved = list(w1.owned)
        await w1.stop()
        fleet.members.remove(w1)
        await eventually(lambda: fleet.exactly_once(groups, [w0]), 15)
        await eventually(lambda: routed(routes, fleet, groups), 10)
        await b0.reindex_delayed(moved)  # what the worker does on a claim (worker.ownership)
        assert set(await b0.due_groups(due, 100)) == {str(g) for g in moved}
        c0, _ = await b0.wait_ready(None, 0)
        for g in groups:
            await producer.put([PutItem(g.queue(Priority.MEDIUM), "j2", b"{}")])
        every = {str(g) for g in groups}
        assert await collect(b0, c0, every) == every
        assert sum(await asyncio.gather(*(b0.promote_due(g, due, 10) for g in moved))) == len(moved)
    finally:
        for b in (producer, b0, b1):
            await b.aclose()
        await watch.aclose()


async def test_a_document_without_running_owners_routes_nothing(fleet: Fleet) -> None:
    """A stale assignment (an earlier fleet; standalone workers now): hints stay shared."""
    from kazoo.client import KazooClient

    from allocator.document import Document, Entry
    from emq.core.naming import ZkPaths

    s = fleet.settings
    paths = ZkPaths(s.zk_root)
    doc = Document(7, "gone", time.time(), {"online/acme/a/g0": Entry("gone", 7)})
    zk = KazooClient(hosts=s.zk_hosts)
    await asyncio.to_thread(zk.start, 10)
    try:
        await asyncio.to_thread(zk.create, paths.assignments(Namespace.ONLINE), doc.encode(),
                                makepath=True)  # fmt: skip
        routes = SignalRoutes({"stale": "x"})
        watch = RouteWatch(s.zk_hosts, [Namespace.ONLINE], routes, root=s.zk_root)
        watch.start()
        try:
            await eventually(lambda: routes.version > 0 and routes.owner("stale") is None, 10)
            assert routes.owner("online/acme/a/g0") is None
            await fleet.topics({"a": 2})
            member = await fleet.member("w9")
            await eventually(lambda: bool(member.owned), 10)
            name = str(next(iter(member.owned)))
            await eventually(lambda: routes.owner(name) == "w9", 10)
        finally:
            await watch.aclose()
    finally:
        await asyncio.to_thread(zk.stop)
        await asyncio.to_thread(zk.close)
