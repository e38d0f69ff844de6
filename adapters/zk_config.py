"""Tenants and topics in ZooKeeper: versioned writes, one watch per namespace, a read cache.

Layout (spelled by :class:`~emq.core.naming.ZkPaths`; values are UTF-8 JSON)::

    /<root>/tenants/<tenant>                 name, display_name, token_sha256, created_at
    /<root>/tenants-version                  bumped by every tenant write
    /<root>/<ns>/topics/<tenant>/<topic>     every Topic field but the ref (the path is the ref)
    /<root>/<ns>/config-version              bumped by every topic write of the namespace

**Writes.** Each create or update is one ZooKeeper transaction that writes the node and bumps
its version node, so "something changed" needs one watch per namespace, never one per topic.
``update_topic`` is compare-and-set on the topic node's version, retried with jittered backoff
and then given up as :class:`~emq.core.errors.ConfigConflict`.

**Mirrors (the cache)**: one per namespace for topics and one for tenants, made on first use
(:mod:`adapters.zk_mirror`); the loads, the mirrors and their watches are the store's read side,
:class:`adapters.zk_reads.ConfigReads`.

**Staleness.** A change made by another process reaches the mirror after one watch notification,
the coalescing pause and one refresh: about 60 ms for a single change while the session is
connected; a burst on a namespace of 10 000 topics needs a full reload, about 2 s more. The writer
itself reads its own writes at once: every write (and every read on a miss) is numbered when it
is sent, remembered in the mirror's overlay, and dropped once a refresh that read its key and
was sent after it has landed; ZooKeeper answers one session's requests in order, so that refresh
saw it.

**Sessions.** kazoo errors are translated at the kazoo seam (:mod:`adapters.zk`): lost
connection, expired session and time-outs become :class:`~emq.core.errors.BackendUnavailable`,
here a missing node ``NotFound``, an existing one ``AlreadyExists``. While disconnected, a
mirror keeps answering from its last state (availability over freshness: the 2 s bound then
becomes "2 s after the session is back"), and a miss or a write fails with
``BackendUnavailable``: at once while the session is not connected (kazoo would hold the
request until it reconnects), within ``request_timeout_s`` if the server stops answering a live
connection. kazoo's DataWatch re-reads its node on reconnection, also after a session expiry,
and a failed refresh retries every 2 s at most, so mirrors catch up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import (
    AsyncIterator,
    Callable,
    Mapping,
    Sequence,
)
from typing import Any

from kazoo.client import KazooClient  # type: ignore[import-untyped]
from kazoo.exceptions import (  # type: ignore[import-untyped]
    BadVersionError,
    NodeExistsError,
    NoNodeError,
)
from kazoo.protocol.states import KeeperState  # type: ignore[import-untyped]

from adapters import zk
from adapters.zk_codec import (
    check_same_ref,
    decode_one,
    decode_tenant,
    decode_topic,
    encode_tenant,
    encode_topic,
    sort_key,
)
from adapters.zk_reads import ConfigReads
from emq.core.errors import (
    AlreadyExists,
    BackendUnavailable,
    ConfigConflict,
    InvalidInput,
    NotFound,
)
from emq.core.interfaces import ConfigStore
from emq.core.model import Namespace, Tenant, Topic, TopicRef
from emq.core.naming import ZkPaths

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- the store


class ZkConfigStore(ConfigStore):
    """:class:`~emq.core.interfaces.ConfigStore` on ZooKeeper (see the module docstring).

    ``client`` may be started or not; if the store starts it, the store also stops it in
    :meth:`aclose`. Every call starts the session and creates the layout on first use.
    """

    def __init__(
        self,
        client: KazooClient,
        paths: ZkPaths | None = None,
        *,
        connect_timeout_s: float = 10.0,
        request_timeout_s: float = 5.0,
        cas_attempts: int = 12,
        coalesce_s: float = 0.05,
        retry_s: float = 0.5,
    ) -> None:
        self._client = client
        self._paths = paths or ZkPaths()
        self._connect_timeout_s = connect_timeout_s
        self._request_timeout_s = request_timeout_s
        self._cas_attempts = cas_attempts
        self._owns_client = False
        self._started = False
        self._closed = False
        self._start_lock = asyncio.Lock()
        self._seq = 0  # numbers every request sent, for read-your-writes (see Mirror.note)
        self._reads = ConfigReads(
            client,
            self._paths,
            ready=self._ready,
            issued=lambda: self._seq,
            request_timeout_s=request_timeout_s,
            coalesce_s=coalesce_s,
            retry_s=retry_s,
        )

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Start the session if needed and create the layout; every call does it on first use."""
        if self._closed:
            raise BackendUnavailable("the ZooKeeper config store is closed")
        if self._started:
            return
        async with self._start_lock:
            if not self._started:
                await self._start_client()
                await self._ensure_layout()
                self._started = True

    async def aclose(self) -> None:
        """Stop the mirrors, and the client if this store started it.

        On a client the caller owns, kazoo drops each DataWatch at its next notification.
        """
        if self._closed:
            return
        self._closed = True
        await self._reads.aclose()
        async with self._start_lock:  # a start in progress finishes before we stop the client
            if self._owns_client:
                await zk.stop(self._client)

    async def ping(self) -> None:
        """One round trip; ``BackendUnavailable`` at once if the session is not connected."""
        await self._ready()
        await self._one("pinging", self._client.exists_async(self._paths.tenants_version()))

    async def _ready(self) -> None:
        await self.start()
        if not self._client.connected:
            # kazoo would queue the request until it reconnects: under load, requests held for
            # request_timeout_s pile up by the thousand. A clear 503 now is kinder.
            raise BackendUnavailable(f"ZooKeeper session is {self._client.state}, reconnecting")

    async def _start_client(self) -> None:
        if self._client.client_state != KeeperState.CLOSED:
            return  # started by our caller, who also stops it
        self._owns_client = True
        await zk.start(self._client, self._connect_timeout_s)

    async def _ensure_layout(self) -> None:
        p = self._paths
        paths = [p.tenants(), p.tenants_version()]
        paths += [x for ns in Namespace for x in (p.topics(ns), p.config_version(ns))]
        outcomes = await self._settle("creating the layout", [self._ensure_async(x) for x in paths])
        for outcome in outcomes:
            zk.check(outcome, "creating the layout")

    def _ensure_async(self, path: str) -> Any:
        return self._client.ensure_path_async(path)

    # ----------------------------------------------------------------- tenants

    async def create_tenant(self, tenant: Tenant) -> None:
        """Store a new tenant; ``AlreadyExists`` if the name is taken."""
        await self._ready()
        tx = self._client.transaction()
        tx.create(self._paths.tenant(tenant.name), encode_tenant(tenant))
        tx.set_data(self._paths.tenants_version(), tenant.name.encode())
        seq = self._issue()
        failed = await self._commit(tx, f"creating tenant {tenant.name}")
        if failed is not None:
            error = failed[1]
            if isinstance(error, NodeExistsError):
                raise AlreadyExists(f"tenant {tenant.name!r} exists already") from error
            raise zk.unavailable(error, f"creating tenant {tenant.name}") from error
        log.info("created tenant %s", tenant.name)
        self._reads.tenants().note(tenant.name, tenant, seq)

    async def update_tenant(self, name: str, change: Callable[[Tenant], Tenant]) -> Tenant:
        """Compare-and-set ``change`` on the stored tenant; ``ConfigConflict`` if races persist."""
        await self._ready()
        path = self._paths.tenant(name)
        for attempt in range(self._cas_attempts):
            try:
                data, stat = await self._one(f"reading tenant {name}", self._client.get_async(path))
            except NoNodeError as e:
                raise NotFound(f"tenant {name!r} does not exist") from e
            current = decode_one(path, decode_tenant, name, data)
            updated = change(current)
            if updated.name != name:
                raise InvalidInput("tenant", f"a change may not rename tenant {name}")
            if updated == current:
                return current
            if await self._write_tenant(updated, stat.version):
                log.info("updated tenant %s (qps caps %s)", name, dict(updated.qps_caps))
                return updated
            await asyncio.sleep(random.uniform(0, min(0.2, 0.005 * 2**attempt)))
        raise ConfigConflict(f"tenant {name} kept changing under {self._cas_attempts} updates")

    async def _write_tenant(self, tenant: Tenant, version: int) -> bool:
        """Write ``tenant`` if its node is still at ``version``; False if someone was first."""
        tx = self._client.transaction()
        tx.set_data(self._paths.tenant(tenant.name), encode_tenant(tenant), version)
        tx.set_data(self._paths.tenants_version(), tenant.name.encode())
        seq = self._issue()
        failed = await self._commit(tx, f"updating tenant {tenant.name}")
        if failed is None:
            self._reads.tenants().note(tenant.name, tenant, seq)
            return True
        if isinstance(failed[1], BadVersionError):
            return False
        if isinstance(failed[1], NoNodeError):
            raise NotFound(f"tenant {tenant.name!r} does not exist") from failed[1]
        raise zk.unavailable(failed[1], f"updating tenant {tenant.name}") from failed[1]

    async def get_tenant(self, name: str) -> Tenant:
        """One tenant, from the cache if it holds it; ``NotFound`` if there is none."""
        mirror = self._reads.tenants()
        cached = mirror.get(name)
        if cached is not None:
            return cached
        await self._ready()
        path = self._paths.tenant(name)
        seq = self._issue()
        try:
            data, _stat = await self._one(f"reading tenant {name}", self._client.get_async(path))
        except NoNodeError as e:
            raise NotFound(f"tenant {name!r} does not exist") from e
        tenant = decode_one(path, decode_tenant, name, data)
        mirror.note(name, tenant, seq)
        return tenant

    async def list_tenants(self) -> list[Tenant]:
        """Every tenant, sorted by name, read from ZooKeeper (not the cache)."""
        await self._ready()
        tenants = await self._reads.load_tenants()
        return [tenants[name] for name in sorted(tenants)]

    # ----------------------------------------------------------------- topics

    async def create_topic(self, topic: Topic) -> None:
        """Store a new topic; ``NotFound`` without its tenant, ``AlreadyExists`` if taken."""
        await self._ready()
        ref = topic.ref
        for first_try in (True, False):
            tx = self._client.transaction()
            tx.check(self._paths.tenant(ref.tenant), -1)  # -1: "exists", any version
            tx.create(self._paths.topic(ref), encode_topic(topic))
            tx.set_data(self._paths.config_version(ref.namespace), str(ref).encode())
            seq = self._issue()
            failed = await self._commit(tx, f"creating topic {ref}")
            if failed is None:
                log.info("created topic %s (qps=%d, groups=%d)", ref, topic.qps, topic.groups)
                self._note_topic(topic, seq)
                return
            index, error = failed
            if index == 0 and isinstance(error, NoNodeError):
                raise NotFound(f"tenant {ref.tenant!r} does not exist") from error
            if isinstance(error, NodeExistsError):
                raise AlreadyExists(f"topic {ref} exists already") from error
            if not (first_try and isinstance(error, NoNodeError)):
                raise zk.unavailable(error, f"creating topic {ref}") from error
            # The tenant's first topic in this namespace: its parent node does not exist yet.
            tenant_dir = self._paths.tenant_topics(ref.namespace, ref.tenant)
            await self._one(f"creating {tenant_dir}", self._ensure_async(tenant_dir))
        raise BackendUnavailable(f"topic {ref}: parent node vanished while creating it")

    async def get_topic(self, ref: TopicRef) -> Topic:
        """One topic, from the cache if it holds it; ``NotFound`` if it does not exist."""
        mirror = self._reads.topics(ref.namespace)
        cached = mirror.get(ref)
        if cached is not None:
            return cached
        await self._ready()
        seq = self._issue()
        topic, _version = await self._read_topic(ref)
        mirror.note(ref, topic, seq)
        return topic

    async def update_topic(self, ref: TopicRef, change: Callable[[Topic], Topic]) -> Topic:
        """Compare-and-set ``change`` on the stored topic; ``ConfigConflict`` if races persist."""
        await self._ready()
        for attempt in range(self._cas_attempts):
            current, version = await self._read_topic(ref)
            updated = check_same_ref(current, change(current))
            if updated == current:
                return current  # nothing to write, and no reason to wake every watcher
            if await self._write_topic(updated, version):
                log.info("updated topic %s (qps=%d, paused=%s)", ref, updated.qps, updated.paused)
                return updated
            await asyncio.sleep(random.uniform(0, min(0.2, 0.005 * 2**attempt)))
        log.warning("topic %s: gave up after %d conflicting updates", ref, self._cas_attempts)
        raise ConfigConflict(f"topic {ref} kept changing under {self._cas_attempts} updates")

    async def list_topics(self, namespace: Namespace, tenant: str | None = None) -> list[Topic]:
        """The namespace's topics (one tenant's if given), sorted, read from ZooKeeper."""
        await self._ready()
        topics = await self._reads.load_topics(namespace, tenant)
        return [topics[ref] for ref in sorted(topics, key=sort_key)]

    async def watch_topics(self, namespace: Namespace) -> AsyncIterator[Mapping[TopicRef, Topic]]:
        """The whole topic map of ``namespace`` once loaded, then after every change.

        Snapshots are read-only mappings; a slow consumer gets only the latest one. The first
        one comes once the first load succeeds (while ZooKeeper is down, the load retries and
        the iterator waits). Ends when the store is closed.
        """
        if self._closed:
            raise BackendUnavailable("the ZooKeeper config store is closed")
        async with contextlib.aclosing(self._reads.topics(namespace).snapshots()) as snapshots:
            async for snapshot in snapshots:
                yield snapshot

    async def _read_topic(self, ref: TopicRef) -> tuple[Topic, int]:
        path = self._paths.topic(ref)
        try:
            data, stat = await self._one(f"reading topic {ref}", self._client.get_async(path))
        except NoNodeError as e:
            raise NotFound(f"topic {ref} does not exist") from e
        return decode_one(path, decode_topic, ref, data), stat.version

    async def _write_topic(self, topic: Topic, version: int) -> bool:
        """Write ``topic`` if its node is still at ``version``; False if someone was first."""
        ref = topic.ref
        tx = self._client.transaction()
        tx.set_data(self._paths.topic(ref), encode_topic(topic), version)
        tx.set_data(self._paths.config_version(ref.namespace), str(ref).encode())
        seq = self._issue()
        failed = await self._commit(tx, f"updating topic {ref}")
        if failed is None:
            self._note_topic(topic, seq)
            return True
        error = failed[1]
        if isinstance(error, BadVersionError):
            return False
        if isinstance(error, NoNodeError):
            raise NotFound(f"topic {ref} does not exist") from error
        raise zk.unavailable(error, f"updating topic {ref}") from error

    def _note_topic(self, topic: Topic, seq: int) -> None:
        # A process that writes config serves it too (the API): what it wrote is cached at once,
        # so it keeps answering from the cache if ZooKeeper goes away.
        self._reads.topics(topic.ref.namespace).note(topic.ref, topic, seq)

    def _issue(self) -> int:
        """Number the request about to be sent (call it right before sending, with no await)."""
        self._seq += 1
        return self._seq

    async def _settle(self, what: str, pending: Sequence[Any]) -> list[object]:
        return await zk.settle(pending, what, self._request_timeout_s)

    async def _one(self, what: str, pending: Any) -> Any:
        """One kazoo call's value; NoNode/NodeExists/BadVersion are raised as kazoo's errors."""
        return await zk.one(pending, what, self._request_timeout_s)

    async def _commit(self, tx: Any, what: str) -> tuple[int, BaseException] | None:
        """Commit a transaction; None on success, else the failed operation and its error."""
        return zk.failed_op(await self._one(what, tx.commit_async()))


async def connect(
    hosts: str,
    *,
    root: str = "/emq",
    session_timeout_s: float = 10.0,
    connect_timeout_s: float | None = None,
    request_timeout_s: float = 5.0,
    new_client: Callable[..., KazooClient] | None = None,
) -> ZkConfigStore:
    """A store on a new ZooKeeper session, started without blocking the event loop.

    The store owns the session and closes it in ``aclose()``. ``BackendUnavailable`` if
    ZooKeeper cannot be reached within ``connect_timeout_s`` (default: the session timeout).
    ``new_client`` makes the kazoo client (default :func:`adapters.zk.client_factory`; the
    composition root adds digest auth and ACLs).
    """
    client = (new_client or zk.plain_client)(hosts=hosts, timeout=session_timeout_s)
    store = ZkConfigStore(
        client,
        ZkPaths(root),
        connect_timeout_s=connect_timeout_s or session_timeout_s,
        request_timeout_s=request_timeout_s,
    )
    try:
        await store.start()
    except BaseException:
        await store.aclose()
        raise
    return store
