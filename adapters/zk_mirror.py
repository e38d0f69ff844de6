"""A config map kept fresh from ZooKeeper: one DataWatch on a version node, a full or partial
reload on each bump, and this process's own writes visible at once.

**Mirrors (the cache).** One per namespace for topics and one for tenants, made on first use::

    ARMING --DataWatch set--> LOADING --full reload--> LIVE --version bumped--> DIRTY
      ^ (ZooKeeper down: retry)                         ^                      |
      |                                                 +-------refresh--------+
    every state --aclose()--> CLOSED    (a failed refresh stays DIRTY, retries with a full reload)

The DataWatch callback runs on a kazoo thread and only hands the bump (its data and version)
to the loop with ``loop.call_soon_threadsafe``; refreshes run on the event loop with kazoo's
async calls, all requests of a phase in flight at once (a large batch is sent and decoded in a
worker thread, so a full reload never stalls the loop for long). Each bump's data names the
topic (or tenant) it changed, so when a notification's version follows the last one seen, the
refresh re-reads just those nodes. A gap in versions (a burst between two notifications, a
reconnection) or a failure means a full reload: kazoo answers some 6-7 k reads/s, so a full
reload of 10 000 topics takes about 2 s, and a per-change reload would not keep the bound on
large namespaces. A mirror waits ``coalesce_s`` after being marked dirty before it refreshes,
and bumps arriving during a refresh mark it dirty once more, so a burst of changes costs one or
two refreshes. A watcher is only woken when the map actually changed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from emq.core.errors import BackendUnavailable
from emq.core.threads import call_soon

log = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")


class Mirror(Generic[K, V]):
    """A map kept fresh by one DataWatch on a version node (see the module)."""

    def __init__(
        self,
        name: str,
        *,
        arm: Callable[[Callable[..., bool | None]], Awaitable[None]],
        load_all: Callable[[], Awaitable[dict[K, V]]],
        load_some: Callable[[list[K]], Awaitable[dict[K, V | None]]],
        key_of: Callable[[bytes], K | None],
        issued: Callable[[], int],
        coalesce_s: float,
        retry_s: float,
    ) -> None:
        self.name = name
        self._arm, self._load_all, self._load_some = arm, load_all, load_some
        self._key_of, self._issued = key_of, issued
        self._coalesce_s, self._retry_s = coalesce_s, retry_s
        self._loaded: dict[K, V] = {}
        self._overlay: dict[K, tuple[int, V]] = {}  # own writes/reads a reload has not seen yet
        self._installed_seq = -1  # when the last full reload was sent
        self._last_version: int | None = None  # of the version node, as last notified
        self._full = True  # the next refresh must reload everything
        self._failures = 0  # consecutive failed refreshes
        self._changed: set[K] = set()  # else: the keys named by consecutive bumps
        self._published: Mapping[K, V] | None = None  # read-only view of _published_view
        self._published_view: dict[K, V] | None = None
        self._subscribers: set[asyncio.Event] = set()
        self._dirty = asyncio.Event()
        self._closed = False
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._run(), name=f"zk-config-mirror-{name}")

    def get(self, key: K) -> V | None:
        """The cached value, or None (not cached yet, or not existing)."""
        held = self._overlay.get(key)
        return held[1] if held is not None else self._loaded.get(key)

    def note(self, key: K, value: V, seq: int) -> None:
        """Remember what this process wrote (or read) by request number ``seq``."""
        if seq <= self._installed_seq:
            return  # the installed reload was sent after it, so it already holds this or newer
        held = self._overlay.get(key)
        if held is None or held[0] < seq:
            self._overlay[key] = (seq, value)

    def on_version(self, data: bytes | None, stat: Any, _event: object = None) -> bool | None:
        """DataWatch callback, on a kazoo thread: it must not block, so it only wakes the loop."""
        version = None if stat is None else int(stat.version)
        if self._closed or not call_soon(self._loop, self._bumped, data, version):
            return False  # tells kazoo to drop the watch
        return None

    def _bumped(self, data: bytes | None, version: int | None) -> None:
        # The bump's data names what changed. Only a bump right after the last one we saw
        # says everything that changed; after a gap (a burst, a reconnection) reload it all.
        key = self._key_of(data) if data else None
        last = self._last_version
        if key is None or version is None or last is None or version != last + 1:
            self._full = True
        else:
            self._changed.add(key)
        self._last_version = version
        self._dirty.set()

    async def snapshots(self) -> AsyncGenerator[Mapping[K, V], None]:
        """The whole map once loaded, then again after every change (latest only)."""
        wake = asyncio.Event()
        self._subscribers.add(wake)
        try:
            last: Mapping[K, V] | None = None
            while not self._closed:
                current = self._published
                if current is not None and current is not last:
                    last = current
                    yield current
                    continue
                await wake.wait()
                wake.clear()
        finally:
            self._subscribers.discard(wake)

    async def aclose(self) -> None:
        """End every snapshot iterator and the refresh task."""
        self._closed = True
        for wake in self._subscribers:
            wake.set()
        self._task.cancel()
        await asyncio.wait([self._task])  # not "await task": our own cancellation must propagate

    async def _run(self) -> None:
        await self._arm(self.on_version)  # its first callback marks us dirty: the first load
        while True:
            await self._dirty.wait()
            if self._published is not None:  # the first load is awaited by someone: no pause
                await asyncio.sleep(self._coalesce_s)  # let the rest of a burst land first
            self._dirty.clear()
            await self._refresh()

    async def _refresh(self) -> None:
        full, changed = self._full, sorted(self._changed, key=str)
        self._full, self._changed = False, set()
        started = self._issued()  # everything sent up to here is visible to the reads below
        try:
            if full:
                self._install_all(await self._load_all(), started)
            else:
                self._install_some(await self._load_some(changed), started)
        except BackendUnavailable as e:
            level = logging.DEBUG if self._failures else logging.WARNING  # once per outage
            log.log(level, "config mirror %s: refresh failed, retrying: %s", self.name, e)
        except Exception:
            log.exception("config mirror %s: refresh failed unexpectedly, retrying", self.name)
        else:
            if self._failures:
                log.info("config mirror %s: refreshed again", self.name)
            self._failures = 0
            return
        self._full = True  # whatever we missed meanwhile, a full reload catches up
        self._failures += 1
        # Capped at 2 s so that, once ZooKeeper is back, the mirror catches up within the bound.
        await asyncio.sleep(min(2.0, self._retry_s * 2 ** (self._failures - 1)))
        self._dirty.set()

    def _install_all(self, loaded: dict[K, V], started: int) -> None:
        self._loaded = loaded
        self._installed_seq = started
        self._overlay = {k: held for k, held in self._overlay.items() if held[0] > started}
        self._publish()

    def _install_some(self, changed: dict[K, V | None], started: int) -> None:
        for key, value in changed.items():
            if value is None:
                self._loaded.pop(key, None)
            else:
                self._loaded[key] = value
            held = self._overlay.get(key)
            if held is not None and held[0] <= started:  # only keys this refresh read
                del self._overlay[key]
        self._publish()

    def _publish(self) -> None:
        view = {**self._loaded, **{k: v for k, (_, v) in self._overlay.items()}}
        if view == self._published_view:
            return  # a watcher is woken only by a real change
        self._published_view = view
        self._published = MappingProxyType(view)
        log.debug("config mirror %s: %d entries", self.name, len(view))
        for wake in self._subscribers:
            wake.set()
