"""The configuration seam: tenants and topics, versioned and watchable (``adapters``: ZooKeeper,
in-memory)."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Callable, Mapping

from emq.core.interfaces.resource import AsyncResource
from emq.core.model import Namespace, Tenant, Topic, TopicRef


class ConfigStore(AsyncResource):
    """Tenants and topics: versioned, so concurrent admins never overwrite each other."""

    @abc.abstractmethod
    async def ping(self) -> None:
        """Check the store answers; ``BackendUnavailable`` if it does not."""

    @abc.abstractmethod
    async def create_tenant(self, tenant: Tenant) -> None:
        """Store a new tenant; :class:`~emq.core.errors.AlreadyExists` if the name is taken."""

    @abc.abstractmethod
    async def get_tenant(self, name: str) -> Tenant:
        """One tenant; :class:`~emq.core.errors.NotFound` if there is none by that name."""

    @abc.abstractmethod
    async def list_tenants(self) -> list[Tenant]:
        """Every tenant, sorted by name."""

    @abc.abstractmethod
    async def update_tenant(self, name: str, change: Callable[[Tenant], Tenant]) -> Tenant:
        """Apply ``change`` to the stored tenant atomically (compare-and-set); ``NotFound`` if
        there is none. ``change`` may raise to abort; returns the stored result."""

    @abc.abstractmethod
    async def create_topic(self, topic: Topic) -> None:
        """Store a new topic of an existing tenant; ``AlreadyExists`` if the name is taken."""

    @abc.abstractmethod
    async def get_topic(self, ref: TopicRef) -> Topic:
        """One topic; ``NotFound`` if the tenant or the topic does not exist."""

    @abc.abstractmethod
    async def update_topic(self, ref: TopicRef, change: Callable[[Topic], Topic]) -> Topic:
        """Apply ``change`` to the stored topic atomically (compare-and-set, retried on races).

        ``change`` may raise to abort; returns the stored result.
        """

    @abc.abstractmethod
    async def list_topics(self, namespace: Namespace, tenant: str | None = None) -> list[Topic]:
        """The topics of a namespace (of one tenant if given), sorted by reference."""

    @abc.abstractmethod
    def watch_topics(self, namespace: Namespace) -> AsyncIterator[Mapping[TopicRef, Topic]]:
        """Yield the namespace's whole topic map now and after every change (within ~2 s)."""
