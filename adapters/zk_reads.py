"""The read side of the ZooKeeper config store: bulk loads, the mirrors and their watches.

:class:`ConfigReads` reads many nodes at once (pipelined; large batches sent and decoded off the
event loop), keeps one :class:`~adapters.zk_mirror.Mirror` per namespace for topics and one for
tenants (made on first use), and arms each mirror's DataWatch on its version node, retrying
while ZooKeeper cannot be reached. The store (:class:`adapters.zk_config.ZkConfigStore`) writes,
numbers its requests (``issued``) and notes its writes in these mirrors; it hands this part
``ready``, which starts the session and fails at once while it is not connected.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from kazoo.client import KazooClient  # type: ignore[import-untyped]
from kazoo.exceptions import NoNodeError  # type: ignore[import-untyped]
from kazoo.recipe.watchers import DataWatch  # type: ignore[import-untyped]

from adapters import zk
from adapters.zk_codec import decode_all, decode_tenant, decode_topic, existing, tenant_of, topic_of
from adapters.zk_mirror import Mirror
from emq.core.errors import BackendUnavailable
from emq.core.model import Namespace, Tenant, Topic, TopicRef
from emq.core.naming import ZkPaths

log = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")

_ON_LOOP_MAX = 64  # reads sent and decoded on the event loop; larger batches go to a thread


class ConfigReads:
    """Loads, mirrors and watches of one :class:`~adapters.zk_config.ZkConfigStore`."""

    def __init__(
        self,
        client: KazooClient,
        paths: ZkPaths,
        *,
        ready: Callable[[], Awaitable[None]],
        issued: Callable[[], int],
        request_timeout_s: float,
        coalesce_s: float,
        retry_s: float,
    ) -> None:
        self._client = client
        self._paths = paths
        self._ready = ready
        self._issued = issued
        self._request_timeout_s = request_timeout_s
        self._coalesce_s = coalesce_s
        self._retry_s = retry_s
        self._closed = False
        self._tenant_mirror: Mirror[str, Tenant] | None = None
        self._topic_mirrors: dict[Namespace, Mirror[TopicRef, Topic]] = {}

    async def aclose(self) -> None:
        """Stop the mirrors; making one afterwards is ``BackendUnavailable``."""
        self._closed = True
        mirrors: list[Mirror[Any, Any]] = [*self._topic_mirrors.values()]
        if self._tenant_mirror is not None:
            mirrors.append(self._tenant_mirror)
        await asyncio.gather(*(m.aclose() for m in mirrors))

    # ----------------------------------------------------------------- loads

    async def load_tenants(self) -> dict[str, Tenant]:
        names = await self._children(self._paths.tenants())
        return existing(await self.fetch_tenants(names))

    async def fetch_tenants(self, names: list[str]) -> dict[str, Tenant | None]:
        return await self._fetch("reading tenants", names, self._paths.tenant, decode_tenant)

    async def load_topics(self, ns: Namespace, tenant: str | None = None) -> dict[TopicRef, Topic]:
        """Every topic of ``ns`` in three pipelined phases: tenants, their topics, the data."""
        tenants = [tenant] if tenant is not None else await self._children(self._paths.topics(ns))
        dirs = [self._paths.tenant_topics(ns, t) for t in tenants]
        listings = await self._settle(
            f"listing topics of {ns}", [self._client.get_children_async(d) for d in dirs]
        )
        refs: list[TopicRef] = []
        for t, outcome in zip(tenants, listings, strict=True):
            if not isinstance(outcome, NoNodeError):
                refs += [TopicRef(ns, t, n) for n in zk.check(outcome, f"listing topics of {t}")]
        return existing(await self.fetch_topics(refs))

    async def fetch_topics(self, refs: list[TopicRef]) -> dict[TopicRef, Topic | None]:
        return await self._fetch("reading topics", refs, self._paths.topic, decode_topic)

    async def _fetch(
        self,
        what: str,
        keys: list[K],
        path_of: Callable[[K], str],
        decode: Callable[[K, bytes], V],
    ) -> dict[K, V | None]:
        """Read many nodes at once (all in flight together); None for a missing one."""
        paths = [path_of(k) for k in keys]
        get = self._client.get_async
        if len(paths) <= _ON_LOOP_MAX:
            outcomes = await self._settle(what, [get(p) for p in paths])
            return decode_all(what, keys, paths, outcomes, decode)
        # kazoo sends some 10 k requests/s and decoding costs too: a full reload of a large
        # namespace would stall the loop (the API's hot path) for seconds if done here.
        pending = await asyncio.to_thread(lambda: [get(p) for p in paths])
        outcomes = await self._settle(what, pending)
        return await asyncio.to_thread(decode_all, what, keys, paths, outcomes, decode)

    async def _children(self, path: str) -> list[str]:
        try:
            children = await self._one(f"listing {path}", self._client.get_children_async(path))
        except NoNodeError:
            return []
        return list(children)

    # ----------------------------------------------------------------- mirrors

    def tenants(self) -> Mirror[str, Tenant]:
        if self._closed:
            raise BackendUnavailable("the ZooKeeper config store is closed")
        if self._tenant_mirror is None:
            self._tenant_mirror = Mirror(
                "tenants",
                arm=partial(self._arm_watch, self._paths.tenants_version()),
                load_all=self.load_tenants,
                load_some=self.fetch_tenants,
                key_of=tenant_of,
                **self._mirror_options(),
            )
        return self._tenant_mirror

    def topics(self, ns: Namespace) -> Mirror[TopicRef, Topic]:
        if self._closed:
            raise BackendUnavailable("the ZooKeeper config store is closed")
        mirror = self._topic_mirrors.get(ns)
        if mirror is None:
            mirror = self._topic_mirrors[ns] = Mirror(
                f"topics/{ns.value}",
                arm=partial(self._arm_watch, self._paths.config_version(ns)),
                load_all=partial(self.load_topics, ns),
                load_some=self.fetch_topics,
                key_of=partial(topic_of, ns),
                **self._mirror_options(),
            )
        return mirror

    def _mirror_options(self) -> dict[str, Any]:
        return {
            "issued": self._issued,
            "coalesce_s": self._coalesce_s,
            "retry_s": self._retry_s,
        }

    async def _arm_watch(self, path: str, callback: Callable[..., bool | None]) -> None:
        """Set a DataWatch on ``path``, retrying while ZooKeeper cannot be reached."""
        for attempt in itertools.count():
            try:
                await self._ready()
                # DataWatch reads the node (and calls back once) in its constructor: off the loop.
                await asyncio.to_thread(DataWatch, self._client, path, callback)
                return
            except Exception as e:  # kazoo's own errors included: a watch must come back
                level = logging.DEBUG if attempt else logging.WARNING  # once per outage
                log.log(level, "cannot watch %s yet, retrying: %s", path, e)
            await asyncio.sleep(min(2.0, self._retry_s * 2**attempt))

    # ----------------------------------------------------------------- requests

    # ----------------------------------------------------------------- requests

    async def _settle(self, what: str, pending: Sequence[Any]) -> list[object]:
        return await zk.settle(pending, what, self._request_timeout_s)

    async def _one(self, what: str, pending: Any) -> Any:
        return await zk.one(pending, what, self._request_timeout_s)
