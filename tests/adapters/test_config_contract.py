"""One contract for every ConfigStore: in-memory and ZooKeeper (a real server, a chroot per test).

``cfg.peer()`` opens a second store on the same data: for ZooKeeper another session (another
process, as far as the server can tell); for memory the same store, which is all one process has.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from unittest.mock import ANY

import pytest
from kazoo.client import KazooClient  # type: ignore[import-untyped]

from adapters.memory_config import MemoryConfigStore
from adapters.zk_config import ZkConfigStore, connect
from emq.core.errors import (
    AlreadyExists,
    BackendUnavailable,
    ConfigConflict,
    InvalidInput,
    NotFound,
)
from emq.core.interfaces import ConfigStore
from emq.core.model import Namespace, PriorityMode, RetryPolicy, Tenant, Topic, TopicRef
from emq.core.naming import ZkPaths
from emq.stack import Service, free_port

WATCH_BOUND_S = 2.0  # the contract: every worker sees a change within 2 s
ON = Namespace.ONLINE
PATHS = ZkPaths()
Snapshot = Mapping[TopicRef, Topic]


@dataclass
class Config:
    kind: str
    store: ConfigStore
    _open: Callable[[], Awaitable[ConfigStore]]
    opened: list[ConfigStore] = field(default_factory=list)

    async def peer(self) -> ConfigStore:
        """Another store on the same data (another ZooKeeper session)."""
        return await self._open()


@pytest.fixture(params=["memory", "zookeeper"])
def config_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def cfg(config_kind: str, request: pytest.FixtureRequest) -> AsyncIterator[Config]:
    opened: list[ConfigStore] = []
    if config_kind == "memory":
        shared = MemoryConfigStore()
        opened.append(shared)

        async def open_store() -> ConfigStore:
            return shared
    else:
        hosts = request.getfixturevalue("zk_hosts")

        async def open_store() -> ConfigStore:
            store = await connect(hosts, session_timeout_s=5.0)
            opened.append(store)
            return store

    yield Config(config_kind, await open_store(), open_store, opened)
    for store in opened:
        await store.aclose()


def tenant(name: str = "acme") -> Tenant:
    digest = hashlib.sha256(f"token-of-{name}".encode()).hexdigest()
    return Tenant(name=name, display_name=name.title(), token_sha256=digest, created_at=1.5)


def topic(
    name: str = "orders", tenant_name: str = "acme", ns: Namespace = ON, **kw: object
) -> Topic:
    return Topic(ref=TopicRef(ns, tenant_name, name), **{"qps": 100, **kw})  # type: ignore[arg-type]


def set_qps(qps: int) -> Callable[[Topic], Topic]:
    return lambda t: dataclasses.replace(t, qps=qps)


def bump_backlog(t: Topic) -> Topic:
    return dataclasses.replace(t, max_backlog=t.max_backlog + 1)


async def eventually(read: Callable[[], Awaitable[Topic]], check: Callable[[Topic], bool]) -> None:
    """``check`` holds for ``read()`` within the bound (another process's write, via a cache)."""
    async with asyncio.timeout(WATCH_BOUND_S):
        while not check(await read()):
            await asyncio.sleep(0.01)


async def next_matching(
    watch: AsyncIterator[Snapshot], check: Callable[[Snapshot], bool], timeout_s: float
) -> Snapshot:
    async with asyncio.timeout(timeout_s):
        while True:
            snapshot = await anext(watch)
            if check(snapshot):
                return snapshot


# --------------------------------------------------------------------------- tenants


async def test_ping(cfg: Config) -> None:
    await cfg.store.ping()


async def test_tenants_round_trip_sorted(cfg: Config) -> None:
    for name in ("zeta", "acme", "mid"):
        await cfg.store.create_tenant(tenant(name))
    assert await cfg.store.get_tenant("acme") == tenant("acme")
    assert [t.name for t in await cfg.store.list_tenants()] == ["acme", "mid", "zeta"]


async def test_tenant_errors(cfg: Config) -> None:
    await cfg.store.create_tenant(tenant())
    with pytest.raises(AlreadyExists):
        await cfg.store.create_tenant(tenant())
    with pytest.raises(NotFound):
        await cfg.store.get_tenant("nobody")


async def test_a_tenant_created_elsewhere_is_found(cfg: Config) -> None:
    assert await cfg.store.list_tenants() == []
    with pytest.raises(NotFound):
        await cfg.store.get_tenant("late")  # warms the cache with "no such tenant"
    await (await cfg.peer()).create_tenant(tenant("late"))
    assert await cfg.store.get_tenant("late") == tenant("late")


async def test_a_tenants_cap_is_set_cleared_and_seen_elsewhere(cfg: Config) -> None:
    await cfg.store.create_tenant(tenant())
    capped = await cfg.store.update_tenant(
        "acme", lambda t: dataclasses.replace(t, qps_caps={"online": 300})
    )
    assert capped.qps_cap(ON) == 300 and capped.qps_cap(Namespace.SANDBOX) is None
    peer = await cfg.peer()
    deadline = time.monotonic() + WATCH_BOUND_S
    while (await peer.get_tenant("acme")).qps_cap(ON) != 300:  # a worker's cached read
        assert time.monotonic() < deadline, "the cap did not reach the other store"
        await asyncio.sleep(0.01)
    cleared = await cfg.store.update_tenant("acme", lambda t: dataclasses.replace(t, qps_caps={}))
    assert cleared == tenant() == await cfg.store.get_tenant("acme")
    with pytest.raises(NotFound):
        await cfg.store.update_tenant("nobody", lambda t: t)


async def test_topic_weight_and_burst_round_trip(cfg: Config) -> None:
    await cfg.store.create_tenant(tenant())
    created = topic(weight=3, burst=40)
    await cfg.store.create_topic(created)
    assert await (await cfg.peer()).get_topic(created.ref) == created


# --------------------------------------------------------------------------- topics


async def test_topic_crud(cfg: Config) -> None:
    await cfg.store.create_tenant(tenant())
    created = topic(retry=RetryPolicy(max_attempts=3), priority_mode=PriorityMode.WEIGHTED)
    await cfg.store.create_topic(created)
    assert await cfg.store.get_topic(created.ref) == created
    updated = await cfg.store.update_topic(
        created.ref, lambda t: dataclasses.replace(t, qps=300, groups=2, paused=True)
    )
    assert (updated.qps, updated.groups, updated.paused) == (300, 2, True)
    assert await cfg.store.get_topic(created.ref) == updated


async def test_topic_errors(cfg: Config) -> None:
    with pytest.raises(NotFound):
        await cfg.store.create_topic(topic(tenant_name="ghost"))
    await cfg.store.create_tenant(tenant())
    await cfg.store.create_topic(topic())
    with pytest.raises(AlreadyExists):
        await cfg.store.create_topic(topic(max_backlog=5))  # same name, other settings
    with pytest.raises(NotFound):
        await cfg.store.get_topic(TopicRef(ON, "acme", "missing"))
    with pytest.raises(NotFound):
        await cfg.store.update_topic(TopicRef(ON, "acme", "missing"), bump_backlog)


async def test_list_topics_sorted_per_namespace_and_tenant(cfg: Config) -> None:
    for name in ("b", "a"):
        await cfg.store.create_tenant(tenant(name))
    for ref in [("b", "z"), ("a", "y"), ("b", "c"), ("a", "x")]:
        await cfg.store.create_topic(topic(ref[1], ref[0]))
    await cfg.store.create_topic(topic("x", "a", ns=Namespace.SANDBOX, qps=7))
    listed = [(t.ref.tenant, t.ref.topic) for t in await cfg.store.list_topics(ON)]
    assert listed == [("a", "x"), ("a", "y"), ("b", "c"), ("b", "z")]
    assert [t.ref.topic for t in await cfg.store.list_topics(ON, tenant="b")] == ["c", "z"]
    assert await cfg.store.list_topics(ON, tenant="nobody") == []
    sandbox = await cfg.store.list_topics(Namespace.SANDBOX)
    assert [(t.ref, t.qps) for t in sandbox] == [(TopicRef(Namespace.SANDBOX, "a", "x"), 7)]


async def test_read_after_write_through_a_warm_cache(cfg: Config) -> None:
    await cfg.store.create_tenant(tenant())
    await cfg.store.create_topic(topic("first"))
    await cfg.store.get_topic(topic("first").ref)  # the cache is now live for the namespace
    for i in range(20):
        t = topic(f"t{i}")
        await cfg.store.create_topic(t)
        assert await cfg.store.get_topic(t.ref) == t
        changed = await cfg.store.update_topic(t.ref, lambda t: dataclasses.replace(t, qps=200))
        assert await cfg.store.get_topic(t.ref) == changed
        assert (await cfg.store.get_topic(t.ref)).qps == 200


async def test_read_after_write_holds_while_reloads_race(cfg: Config) -> None:
    await cfg.store.create_tenant(tenant())
    for name in ("mine", "noise"):
        await cfg.store.create_topic(topic(name))
    await cfg.store.get_topic(topic("mine").ref)
    peer = await cfg.peer()

    async def noise() -> None:  # keeps the cache reloading under our feet
        while True:
            await peer.update_topic(topic("noise").ref, bump_backlog)
            await asyncio.sleep(0)

    async with asyncio.TaskGroup() as tg:
        noisy = tg.create_task(noise())
        for qps in range(101, 161):
            await cfg.store.update_topic(topic("mine").ref, set_qps(qps))
            assert (await cfg.store.get_topic(topic("mine").ref)).qps == qps
            await asyncio.sleep(0.003)  # a reload sent before our write may land now...
            assert (await cfg.store.get_topic(topic("mine").ref)).qps == qps  # ...not over it
        noisy.cancel()


async def test_secrets_round_trip(cfg: Config) -> None:
    await cfg.store.create_tenant(tenant())
    secret = "whsec_" + "A" * 43 + "=="
    await cfg.store.create_topic(topic(secret=secret))
    assert (await cfg.store.get_topic(topic().ref)).secret == secret
    assert (await (await cfg.peer()).list_topics(ON))[0].secret == secret


async def test_an_aborted_change_propagates_and_changes_nothing(cfg: Config) -> None:
    await cfg.store.create_tenant(tenant())
    await cfg.store.create_topic(topic())

    def refuse(t: Topic) -> Topic:
        raise InvalidInput("qps", "refused by the change")

    with pytest.raises(InvalidInput, match="refused by the change"):
        await cfg.store.update_topic(topic().ref, refuse)
    with pytest.raises(InvalidInput):  # a change may not move a topic to another name
        await cfg.store.update_topic(
            topic().ref, lambda t: dataclasses.replace(t, ref=TopicRef(ON, "acme", "other"))
        )
    assert await cfg.store.get_topic(topic().ref) == topic()


async def test_concurrent_updates_from_two_stores_all_land(cfg: Config) -> None:
    await cfg.store.create_tenant(tenant())
    await cfg.store.create_topic(topic(max_backlog=1000))
    peer = await cfg.peer()
    stores = [cfg.store, peer] * 10
    await asyncio.gather(*(s.update_topic(topic().ref, bump_backlog) for s in stores))
    assert [t.max_backlog for t in await peer.list_topics(ON)] == [1020]  # read from the store
    for store in (cfg.store, peer):  # and each cache has it within the bound
        await eventually(partial(store.get_topic, topic().ref), lambda t: t.max_backlog == 1020)


# --------------------------------------------------------------------------- watches


@pytest.mark.serial
async def test_watch_yields_the_full_map_now_and_after_changes_made_elsewhere(
    cfg: Config, record_property: Callable[[str, object], None]
) -> None:
    await cfg.store.create_tenant(tenant())
    await cfg.store.create_topic(topic("a"))
    await cfg.store.create_topic(topic("b"))
    await cfg.store.create_topic(topic("s", ns=Namespace.SANDBOX))
    peer = await cfg.peer()
    async with asyncio.timeout(WATCH_BOUND_S):
        watch = aiter(cfg.store.watch_topics(ON))
        first = await anext(watch)
    assert dict(first) == {topic("a").ref: topic("a"), topic("b").ref: topic("b")}

    started = time.monotonic()
    await peer.update_topic(topic("a").ref, lambda t: dataclasses.replace(t, qps=500))
    seen = await next_matching(watch, lambda s: s[topic("a").ref].qps == 500, WATCH_BOUND_S)
    delay_s = time.monotonic() - started
    record_property("watch_delay_s", round(delay_s, 4))
    print(f"{cfg.kind}: watch saw a change made through another store after {delay_s:.3f} s")
    assert delay_s < WATCH_BOUND_S
    assert set(seen) == {topic("a").ref, topic("b").ref}  # always the whole map

    await peer.create_topic(topic("c"))
    seen = await next_matching(watch, lambda s: topic("c").ref in s, WATCH_BOUND_S)
    assert len(seen) == 3
    await watch.aclose()  # type: ignore[attr-defined]


async def test_a_burst_of_changes_is_coalesced_and_complete(cfg: Config) -> None:
    names = ["a", "b", "c", "d", "e"]
    await cfg.store.create_tenant(tenant())
    for name in names:
        await cfg.store.create_topic(topic(name))
    watch = aiter(cfg.store.watch_topics(ON))
    await anext(watch)
    peer = await cfg.peer()
    for _ in range(2):  # concurrent: the version moves faster than one notification each
        await asyncio.gather(*(peer.update_topic(topic(n).ref, bump_backlog) for n in names))
    final = topic().max_backlog + 2
    yields = 0

    def done(s: Snapshot) -> bool:
        nonlocal yields
        yields += 1
        return all(s[topic(n).ref].max_backlog == final for n in names)

    await next_matching(watch, done, WATCH_BOUND_S)
    assert yields < 10
    await watch.aclose()  # type: ignore[attr-defined]


@pytest.mark.serial
async def test_cached_reads_see_changes_made_elsewhere_within_the_bound(cfg: Config) -> None:
    await cfg.store.create_tenant(tenant())
    await cfg.store.create_topic(topic())
    assert (await cfg.store.get_topic(topic().ref)).paused is False  # warm cache
    await (await cfg.peer()).update_topic(
        topic().ref, lambda t: dataclasses.replace(t, paused=True)
    )
    deadline = time.monotonic() + WATCH_BOUND_S
    while not (await cfg.store.get_topic(topic().ref)).paused:
        assert time.monotonic() < deadline, "the cache stayed stale beyond the bound"
        await asyncio.sleep(0.01)


async def test_closing_the_store_ends_its_watches_and_calls(cfg: Config) -> None:
    await cfg.store.create_tenant(tenant())
    watch = aiter(cfg.store.watch_topics(ON))
    assert dict(await anext(watch)) == {}
    pending = asyncio.ensure_future(anext(watch))
    await asyncio.sleep(0.05)
    await cfg.store.aclose()
    await cfg.store.aclose()  # twice is harmless
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(pending, WATCH_BOUND_S)
    with pytest.raises(BackendUnavailable):
        await cfg.store.get_tenant("acme")
    with pytest.raises(BackendUnavailable):
        await cfg.store.ping()


# --------------------------------------------------------------------------- ZooKeeper only


@pytest.fixture
async def zk_store(zk_hosts: str) -> AsyncIterator[ZkConfigStore]:
    store = await connect(zk_hosts, session_timeout_s=5.0)
    yield store
    await store.aclose()


async def test_nodes_hold_json_and_only_the_token_hash(
    zk_store: ZkConfigStore, zk_client: KazooClient
) -> None:
    await zk_store.create_tenant(tenant())
    await zk_store.create_topic(topic(secret="whsec_x", max_backlog=77))
    raw_tenant, _ = zk_client.get(PATHS.tenant("acme"))
    stored = json.loads(raw_tenant)
    assert stored == {
        "name": "acme",
        "display_name": "Acme",
        "token_sha256": tenant().token_sha256,
        "created_at": 1.5,
    }
    assert "token" not in stored
    raw_topic, _ = zk_client.get(PATHS.topic(topic().ref))
    assert json.loads(raw_topic) == {
        "qps": 100,
        "groups": 1,
        "retry": RetryPolicy().to_dict(),
        "endpoint_concurrency": 32,
        "max_backlog": 77,
        "paused": False,
        "priority_mode": "strict",
        "secret": "whsec_x",
        "dlq_max_entries": 100_000,
        "dlq_max_age_s": 14 * 86400,
    }


async def test_every_topic_write_bumps_the_namespace_version(
    zk_store: ZkConfigStore, zk_client: KazooClient
) -> None:
    def version() -> int:
        return int(zk_client.get(PATHS.config_version(ON))[1].version)

    await zk_store.create_tenant(tenant())
    before = version()
    await zk_store.create_topic(topic())
    await zk_store.update_topic(topic().ref, bump_backlog)
    await zk_store.update_topic(topic().ref, lambda t: t)  # no change: nothing written
    assert version() == before + 2
    assert zk_client.get(PATHS.config_version(Namespace.SANDBOX))[1].version == 0


async def test_a_single_change_rereads_one_node_not_the_namespace(
    zk_store: ZkConfigStore, zk_hosts: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    full_loads: list[Namespace] = []
    fetched: list[list[TopicRef]] = []
    reads = zk_store._reads  # the store's read side: loads, mirrors, watches
    load_topics, fetch_topics = reads.load_topics, reads.fetch_topics

    async def counting_load(ns: Namespace, tenant: str | None = None) -> dict[TopicRef, Topic]:
        full_loads.append(ns)
        return await load_topics(ns, tenant)

    async def counting_fetch(refs: list[TopicRef]) -> dict[TopicRef, Topic | None]:
        fetched.append(refs)
        return await fetch_topics(refs)

    monkeypatch.setattr(reads, "load_topics", counting_load)
    monkeypatch.setattr(reads, "fetch_topics", counting_fetch)
    peer = await connect(zk_hosts, session_timeout_s=5.0)  # all writes from another process
    watch = aiter(zk_store.watch_topics(ON))
    try:
        await peer.create_tenant(tenant())
        for name in ("a", "b", "c"):
            await peer.create_topic(topic(name))
        assert len(await anext(watch)) == 3
        assert full_loads == [ON]
        await peer.update_topic(topic("b").ref, set_qps(9))
        await next_matching(watch, lambda s: s[topic("b").ref].qps == 9, WATCH_BOUND_S)
    finally:
        await peer.aclose()
        await watch.aclose()  # type: ignore[attr-defined]
    assert full_loads == [ON]
    assert fetched[-1] == [topic("b").ref]


async def test_a_deletion_announced_by_a_bump_leaves_the_cache(
    zk_store: ZkConfigStore, zk_client: KazooClient
) -> None:
    await zk_store.create_tenant(tenant())
    for name in ("keep", "drop"):
        await zk_store.create_topic(topic(name))
    watch = aiter(zk_store.watch_topics(ON))
    assert len(await anext(watch)) == 2
    tx = zk_client.transaction()  # what a future delete_topic would do
    tx.delete(PATHS.topic(topic("drop").ref))
    tx.set_data(PATHS.config_version(ON), str(topic("drop").ref).encode())
    assert tx.commit() == [True, ANY]
    seen = await next_matching(watch, lambda s: len(s) == 1, WATCH_BOUND_S)
    assert list(seen) == [topic("keep").ref]
    with pytest.raises(NotFound):
        await zk_store.get_topic(topic("drop").ref)
    await watch.aclose()  # type: ignore[attr-defined]


async def test_a_large_namespace_loads_in_full(zk_store: ZkConfigStore) -> None:
    # Above 64 reads, requests are sent and decoded in a worker thread.
    names = [f"t{i:03d}" for i in range(150)]
    await zk_store.create_tenant(tenant("a"))
    await zk_store.create_tenant(tenant("b"))
    await asyncio.gather(
        *(zk_store.create_topic(topic(n, "ab"[i % 2])) for i, n in enumerate(names))
    )
    listed = await zk_store.list_topics(ON)
    assert [t.ref.topic for t in listed] == sorted(names[0::2]) + sorted(names[1::2])
    watch = aiter(zk_store.watch_topics(ON))
    assert dict(await anext(watch)) == {t.ref: t for t in listed}
    await watch.aclose()  # type: ignore[attr-defined]


async def test_a_failed_transaction_writes_nothing(
    zk_store: ZkConfigStore, zk_client: KazooClient
) -> None:
    await zk_store.create_tenant(tenant())
    before = zk_client.get(PATHS.config_version(ON))[1].version
    with pytest.raises(NotFound):
        await zk_store.create_topic(topic(tenant_name="ghost"))
    assert zk_client.get(PATHS.config_version(ON))[1].version == before


async def test_unreadable_nodes_are_skipped_in_bulk_and_refused_alone(
    zk_store: ZkConfigStore, zk_client: KazooClient
) -> None:
    await zk_store.create_tenant(tenant())
    await zk_store.create_topic(topic("good"))
    zk_client.create(PATHS.topic(topic("bad").ref), b"{not json")
    assert [t.ref.topic for t in await zk_store.list_topics(ON)] == ["good"]
    with pytest.raises(BackendUnavailable, match="unreadable"):
        await zk_store.get_topic(topic("bad").ref)


async def test_cas_gives_up_with_config_conflict(zk_hosts: str, zk_client: KazooClient) -> None:
    client = KazooClient(hosts=zk_hosts)
    store = ZkConfigStore(client, cas_attempts=3)  # the store starts the client: it owns it
    try:
        await store.create_tenant(tenant())
        await store.create_topic(topic())

        def race(t: Topic) -> Topic:
            # Another admin writes between our read and our write, every time.
            zk_client.set(PATHS.topic(t.ref), zk_client.get(PATHS.topic(t.ref))[0])
            return bump_backlog(t)

        with pytest.raises(ConfigConflict):
            await store.update_topic(topic().ref, race)
    finally:
        await store.aclose()
    assert not client.connected


async def test_unreachable_zookeeper_is_backend_unavailable() -> None:
    hosts = f"127.0.0.1:{free_port()}"
    with pytest.raises(BackendUnavailable):
        await connect(hosts, session_timeout_s=1.0, connect_timeout_s=0.3)
    store = ZkConfigStore(KazooClient(hosts=hosts, timeout=1.0), connect_timeout_s=0.3)
    try:
        with pytest.raises(BackendUnavailable):
            await store.get_topic(topic().ref)
        with pytest.raises(BackendUnavailable):
            await store.create_tenant(tenant())
        with pytest.raises(BackendUnavailable):
            await store.ping()
    finally:
        await store.aclose()


async def test_a_callers_client_is_left_running(zk_hosts: str) -> None:
    client = KazooClient(hosts=zk_hosts)
    await asyncio.to_thread(client.start, 10)
    try:
        store = ZkConfigStore(client)  # started by us: the store must leave it running
        await store.create_tenant(tenant())
        await store.aclose()
        assert client.connected
        async with ZkConfigStore(client) as again:
            assert await again.get_tenant("acme") == tenant()
    finally:
        await asyncio.to_thread(_stop, client)


@pytest.mark.serial
async def test_without_a_session_writes_warm_the_cache_and_misses_fail_fast(
    zk_hosts: str,
) -> None:
    client = KazooClient(hosts=zk_hosts)
    await asyncio.to_thread(client.start, 10)
    store = ZkConfigStore(client, request_timeout_s=5.0)
    try:
        await store.create_tenant(tenant())  # written, never read: the API's case
        await store.create_topic(topic())
        await asyncio.to_thread(client.stop)
        assert await store.get_tenant("acme") == tenant()  # served from the cache
        assert await store.get_topic(topic().ref) == topic()
        started = time.monotonic()
        with pytest.raises(BackendUnavailable):
            await store.get_topic(topic("other").ref)  # a miss must ask ZooKeeper
        with pytest.raises(BackendUnavailable):
            await store.update_topic(topic().ref, bump_backlog)
        assert time.monotonic() - started < 1.0  # at once, not after request_timeout_s
    finally:
        await store.aclose()
        await asyncio.to_thread(client.close)


async def test_a_frozen_zookeeper_is_backend_unavailable_then_recovers(
    zk_hosts: str, zk_server: Service
) -> None:
    store = ZkConfigStore(KazooClient(hosts=zk_hosts, timeout=5.0), request_timeout_s=0.5)
    try:
        await store.create_tenant(tenant())
        await store.create_topic(topic())
        warm = await store.get_topic(topic().ref)
        pid = zk_server.status().pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # a real fault: the server answers nothing (< the session)
        try:
            await _wait_for(lambda: _all_threads_stopped(pid), 5.0)
            assert await store.get_topic(topic().ref) == warm  # the cache keeps answering
            with pytest.raises(BackendUnavailable):
                await store.get_topic(topic("other").ref)  # a miss must ask ZooKeeper
            with pytest.raises(BackendUnavailable):
                await store.update_topic(topic().ref, bump_backlog)
            with pytest.raises(BackendUnavailable):
                await store.ping()
        finally:
            os.kill(pid, signal.SIGCONT)
        async with asyncio.timeout(10):
            while True:  # the session survived; requests flow again once reconnected
                with contextlib.suppress(BackendUnavailable):
                    await store.update_topic(topic().ref, bump_backlog)
                    break
        assert (await store.get_topic(topic().ref)).max_backlog == warm.max_backlog + 1
    finally:
        await store.aclose()


async def test_watch_survives_a_session_expiry(zk_hosts: str) -> None:
    client = KazooClient(hosts=zk_hosts, timeout=2.0)
    await asyncio.to_thread(client.start, 10)
    store = ZkConfigStore(client)
    peer = await connect(zk_hosts, session_timeout_s=5.0)
    try:
        await peer.create_tenant(tenant())
        await peer.create_topic(topic())
        watch = aiter(store.watch_topics(ON))
        await anext(watch)
        old_session = client.client_id
        await asyncio.to_thread(_expire_session, zk_hosts, client)
        await _wait_for(lambda: client.connected and client.client_id != old_session, 10.0)
        await peer.update_topic(topic().ref, lambda t: dataclasses.replace(t, qps=42))
        await next_matching(watch, lambda s: s[topic().ref].qps == 42, WATCH_BOUND_S)
        await watch.aclose()  # type: ignore[attr-defined]
    finally:
        await store.aclose()
        await peer.aclose()
        await asyncio.to_thread(_stop, client)


def _expire_session(hosts: str, victim: KazooClient) -> None:
    """Expire ``victim``'s session the cheap way: join it from a second client, then close it."""
    thief = KazooClient(hosts=hosts, client_id=victim.client_id)
    thief.start(timeout=10)
    _stop(thief)


def _all_threads_stopped(pid: int) -> bool:
    """True once every thread of ``pid`` is stopped (a signal is delivered asynchronously)."""
    states = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        with contextlib.suppress(OSError):  # a thread may end while we look
            states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
    return bool(states) and all(state in ("T", "t") for state in states)


def _stop(client: KazooClient) -> None:
    client.stop()
    client.close()


async def _wait_for(condition: Callable[[], bool], timeout_s: float) -> None:
    """Poll a kazoo-side condition (kazoo's state lives on its threads; polling keeps it simple)."""
    for _ in range(int(timeout_s / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"condition not met within {timeout_s} s")
