"""An EMQ deployment with ``EMQ_ZK_AUTH`` set works end to end, and every node it makes on
ZooKeeper (topics, the fleet's members, leader election, assignment, epochs) is closed to a
client without the credential (issue 11, item 8). Real ZooKeeper, Redis and worker process.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl

from emq.api.enqueue import Enqueuer
from emq.compose import open_config, open_fleet_view, open_queues
from emq.core.model import Namespace, Tenant
from emq.core.naming import ZkPaths
from emq.core.settings import Settings
from tests.worker.conftest import Sink, Stack

AUTH = "emq:s3cret-pw"


def client(hosts: str, *credentials: str) -> KazooClient:
    c = KazooClient(hosts=hosts, auth_data=[("digest", a) for a in credentials])
    c.start(timeout=10)
    return c


@pytest.fixture
async def secured_stack(settings: Settings, zk_hosts: str) -> AsyncIterator[Stack]:
    secured = dataclasses.replace(settings, zk_auth=AUTH)
    queues = await open_queues(secured)
    config = await open_config(secured)
    await config.create_tenant(Tenant("acme", "Acme", "0" * 64, time.time()))
    yield Stack(secured, queues, config, Enqueuer(config, queues))
    await config.aclose()
    await queues.aclose()
    owner = client(zk_hosts, AUTH)  # the session fixture's anonymous client could not list it
    try:
        owner.delete(secured.zk_root, recursive=True)
    finally:
        owner.stop()
        owner.close()


def nodes_and_acls(c: KazooClient, root: str) -> dict[str, set[tuple[int, str, str]]]:
    found, pending = {}, [root]
    while pending:
        path = pending.pop()
        acl, _ = c.get_acls(path)
        found[path] = {(a.perms, a.id.scheme, a.id.id) for a in acl}
        pending += [f"{path}/{child}" for child in c.get_children(path)]
    return found


async def test_a_secured_fleet_delivers_and_closes_its_nodes(
    secured_stack: Stack, sink: Sink, worker_process: Any, zk_hosts: str
) -> None:
    stack = secured_stack
    ref = await stack.topic("orders", 50)
    assert (await stack.config.get_topic(ref)).secret  # the API's read, authenticated
    ids = await stack.enqueue(
        "orders", [{"url": sink.url("orders"), "body": {"n": i}} for i in range(20)]
    )
    worker = worker_process(standalone=False, EMQ_ZK_AUTH=AUTH)  # a fleet member: more nodes
    assert await sink.wait_for(lambda: len(sink.of("orders")) == 20, 30), worker.log()
    assert {d.job_id for d in sink.of("orders")} == set(ids)
    view = open_fleet_view(stack.settings)
    try:
        fleet = await view.state(Namespace.ONLINE)
    finally:
        await view.aclose()
    assert [m.id for m in fleet.members] == ["w1"]
    owner, anonymous = client(zk_hosts, AUTH), client(zk_hosts)
    try:
        tree = nodes_and_acls(owner, stack.settings.zk_root)
        paths = ZkPaths(stack.settings.zk_root)
        assert paths.topic(ref) in tree and paths.worker(Namespace.ONLINE, "w1") in tree
        acl = make_digest_acl(*AUTH.split(":", 1), all=True)
        assert all(v == {(acl.perms, "digest", acl.id.id)} for v in tree.values()), tree
        for path in (paths.topic(ref), paths.assignments(Namespace.ONLINE)):
            with pytest.raises(NoAuthError):
                anonymous.get(path)
    finally:
        for c in (owner, anonymous):
            c.stop()
            c.close()
    assert worker.stop() == 0, worker.log()
