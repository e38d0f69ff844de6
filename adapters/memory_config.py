"""An in-process :class:`~emq.core.interfaces.ConfigStore` for unit tests and single-process use.

Same contract as the ZooKeeper store: ``AlreadyExists``/``NotFound`` on the same occasions,
``update_topic`` applies its change atomically (nothing else runs between the read and the
write: the change is synchronous and the store has no await inside), and ``watch_topics``
yields the namespace's whole map at once and again after every change. A watcher that falls
behind gets the latest map only, and a change that changes nothing wakes nobody.

Snapshots are read-only and built once per change: every watcher of a namespace shares one.
After :meth:`MemoryConfigStore.aclose` every call raises ``BackendUnavailable`` and every
watch ends, like a closed ZooKeeper store.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Mapping
from types import MappingProxyType

from emq.core.errors import AlreadyExists, BackendUnavailable, InvalidInput, NotFound
from emq.core.interfaces import ConfigStore
from emq.core.model import Namespace, Tenant, Topic, TopicRef


def _sort_key(ref: TopicRef) -> tuple[str, str, str]:
    return (ref.namespace.value, ref.tenant, ref.topic)


class MemoryConfigStore(ConfigStore):
    """Tenants and topics in dictionaries; watchable like the ZooKeeper store."""

    def __init__(self) -> None:
        self._tenants: dict[str, Tenant] = {}
        self._topics: dict[TopicRef, Topic] = {}
        self._snapshots: dict[Namespace, Mapping[TopicRef, Topic]] = {}
        self._subscribers: defaultdict[Namespace, set[asyncio.Event]] = defaultdict(set)
        self._closed = False

    async def aclose(self) -> None:
        """End every watch; later calls raise ``BackendUnavailable``."""
        self._closed = True
        for wakes in self._subscribers.values():
            for wake in wakes:
                wake.set()

    async def ping(self) -> None:
        """Health probe: ``BackendUnavailable`` once closed."""
        self._check_open()

    async def create_tenant(self, tenant: Tenant) -> None:
        """Store a new tenant; ``AlreadyExists`` if the name is taken."""
        self._check_open()
        if tenant.name in self._tenants:
            raise AlreadyExists(f"tenant {tenant.name!r} exists already")
        self._tenants[tenant.name] = tenant

    async def get_tenant(self, name: str) -> Tenant:
        """One tenant; ``NotFound`` if there is none by that name."""
        self._check_open()
        try:
            return self._tenants[name]
        except KeyError:
            raise NotFound(f"tenant {name!r} does not exist") from None

    async def list_tenants(self) -> list[Tenant]:
        """Every tenant, sorted by name."""
        self._check_open()
        return [self._tenants[name] for name in sorted(self._tenants)]

    async def update_tenant(self, name: str, change: Callable[[Tenant], Tenant]) -> Tenant:
        """Apply ``change`` atomically; its exceptions abort the update and propagate."""
        updated = change(await self.get_tenant(name))
        if updated.name != name:
            raise InvalidInput("tenant", f"a change may not rename tenant {name}")
        self._tenants[name] = updated
        return updated

    async def create_topic(self, topic: Topic) -> None:
        """Store a new topic; ``NotFound`` without its tenant, ``AlreadyExists`` if taken."""
        self._check_open()
        ref = topic.ref
        if ref.tenant not in self._tenants:
            raise NotFound(f"tenant {ref.tenant!r} does not exist")
        if ref in self._topics:
            raise AlreadyExists(f"topic {ref} exists already")
        self._set(topic)

    async def get_topic(self, ref: TopicRef) -> Topic:
        """One topic; ``NotFound`` if the tenant or the topic does not exist."""
        self._check_open()
        try:
            return self._topics[ref]
        except KeyError:
            raise NotFound(f"topic {ref} does not exist") from None

    async def update_topic(self, ref: TopicRef, change: Callable[[Topic], Topic]) -> Topic:
        """Apply ``change`` atomically; its exceptions abort the update and propagate."""
        current = await self.get_topic(ref)
        updated = change(current)
        if updated.ref != ref:
            raise InvalidInput("ref", f"a change may not rename topic {ref} to {updated.ref}")
        if updated != current:
            self._set(updated)
        return updated

    async def list_topics(self, namespace: Namespace, tenant: str | None = None) -> list[Topic]:
        """The namespace's topics (one tenant's if given), sorted by reference."""
        self._check_open()
        refs = [
            r
            for r in self._topics
            if r.namespace is namespace and (tenant is None or r.tenant == tenant)
        ]
        return [self._topics[r] for r in sorted(refs, key=_sort_key)]

    async def watch_topics(self, namespace: Namespace) -> AsyncIterator[Mapping[TopicRef, Topic]]:
        """The whole topic map of ``namespace`` now, then after every change (latest only)."""
        self._check_open()
        wake = asyncio.Event()
        self._subscribers[namespace].add(wake)
        try:
            last: Mapping[TopicRef, Topic] | None = None
            while not self._closed:
                current = self._snapshot(namespace)
                if current is not last:
                    last = current
                    yield current
                    continue
                await wake.wait()
                wake.clear()
        finally:
            self._subscribers[namespace].discard(wake)

    def _set(self, topic: Topic) -> None:
        ns = topic.ref.namespace
        self._topics[topic.ref] = topic
        self._snapshots.pop(ns, None)  # the next snapshot is a new object: watchers compare ids
        for wake in self._subscribers[ns]:
            wake.set()

    def _snapshot(self, namespace: Namespace) -> Mapping[TopicRef, Topic]:
        snapshot = self._snapshots.get(namespace)
        if snapshot is None:
            topics = {r: t for r, t in self._topics.items() if r.namespace is namespace}
            snapshot = self._snapshots[namespace] = MappingProxyType(topics)
        return snapshot

    def _check_open(self) -> None:
        if self._closed:
            raise BackendUnavailable("the in-memory config store is closed")
