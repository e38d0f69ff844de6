"""The fleet's assignment as a :class:`~emq.core.signals.SignalRoutes` table, kept current.

A writer of hints (the API's puts, replays) addresses each group's signal to its owner's inbox.
:class:`RouteWatch` follows each namespace's ``/assignments`` document and ``/running`` members
on its own ZooKeeper session and fills the table with ``group -> owner`` (group names carry their
namespace, so one table serves every namespace) for the owners that are running: a group whose
owner left (before the leader re-assigns it), or every group when no fleet runs (``emq worker
--standalone``, or a stale document from an earlier fleet), is left out, so its hints go to the
shared keys that every worker reads.

States: *starting* (connecting, retried every :data:`RETRY_S` while ZooKeeper cannot be reached;
the table stays empty, so hints use the shared keys), *following* (kazoo's watches call back on
its threads on every change and across reconnections; the callback decodes the document there
and hands the new table to the loop), *closed*.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient  # type: ignore[import-untyped]
from kazoo.recipe.watchers import ChildrenWatch, DataWatch  # type: ignore[import-untyped]

from adapters import zk
from allocator.document import Document
from emq.core.model import Namespace
from emq.core.naming import ZkPaths
from emq.core.signals import SignalRoutes

log = logging.getLogger(__name__)

RETRY_S = 1.0


class RouteWatch:
    """Fill ``routes`` from the fleets of ``namespaces`` until :meth:`aclose` (module doc)."""

    def __init__(
        self,
        hosts: str,
        namespaces: Sequence[Namespace],
        routes: SignalRoutes,
        *,
        root: str = "/emq",
        session_timeout_s: float = 10.0,
        request_timeout_s: float = 5.0,
        new_client: Callable[..., KazooClient] = zk.plain_client,
    ) -> None:
        self.routes = routes
        self._hosts, self._namespaces, self._paths = hosts, tuple(namespaces), ZkPaths(root)
        self._session_timeout_s, self._timeout_s = session_timeout_s, request_timeout_s
        self._new_client = new_client
        self._client: KazooClient | None = None
        self._lock = threading.Lock()  # the two watches call back on kazoo's threads
        self._docs: dict[Namespace, Document] = {}
        self._running: dict[Namespace, frozenset[str]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Begin following in the background (the table fills once the watches fire)."""
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(self._follow())

    async def _follow(self) -> None:
        while not self._closed:
            client = self._new_client(hosts=self._hosts, timeout=self._session_timeout_s)
            try:
                await zk.start(client, self._timeout_s)
                self._client = client
                for ns in self._namespaces:
                    await self._watch(client, ns)
                return
            except Exception as e:
                log.warning("signal routes: cannot follow the fleet yet (%s); retrying", e)
                self._client = None
                await zk.stop(client)
                await asyncio.sleep(RETRY_S)

    async def _watch(self, client: KazooClient, ns: Namespace) -> None:
        running = self._paths.running(ns)
        await zk.one(client.ensure_path_async(running), "setup", self._timeout_s)

        def on_running(children: list[str]) -> bool | None:
            with self._lock:
                self._running[ns] = frozenset(str(c) for c in children)
            return self._publish()

        def on_document(data: bytes | None, _stat: Any, _event: Any = None) -> bool | None:
            try:
                doc = Document.decode(bytes(data)) if data else Document()
            except ValueError as e:
                log.error("signal routes: %s", e)
                return False if self._closed else None
            with self._lock:
                if not data or doc.generation >= self._docs.get(ns, doc).generation:
                    self._docs[ns] = doc
            return self._publish()

        # Both read their node (and call back once) in the constructor: off the loop.
        await asyncio.to_thread(ChildrenWatch, client, running, on_running)
        await asyncio.to_thread(DataWatch, client, self._paths.assignments(ns), on_document)

    def _publish(self) -> bool | None:
        """Build the table on the calling (kazoo) thread; hand it to the loop to switch.

        Returns what a kazoo watch callback returns: False (stop watching) once closed."""
        if self._closed:
            return False
        with self._lock:
            table = {
                g: e.owner
                for ns, doc in self._docs.items()
                for g, e in doc.groups.items()
                if e.owner in self._running.get(ns, ())
            }
        if self._loop is not None:
            zk.call_soon(self._loop, self.routes.replace, table)
        return None

    async def aclose(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        client, self._client = self._client, None
        if client is not None:
            await zk.stop(client)
