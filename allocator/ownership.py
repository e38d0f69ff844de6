"""What one fleet member owns: the assignment document and the topics, offered as snapshots.

Use case: turn ``/assignments`` (followed with a data watch) and the namespace's topics (from the
config store) into the :class:`~emq.core.interfaces.OwnedGroups` snapshots the worker applies:
the groups the document gives this worker, of topics the worker knows, each once its handover
has settled (:class:`~allocator.handover.HandoverGate`), and nothing while the member is fenced.

It also keeps what the worker *touches*: the groups of the snapshot it applies and of the one
before, until it asks for the next (then it has released what it lost). A snapshot's
``generation`` is the document's; ``version`` counts the snapshots offered, and a fence
remembers the version it offered, so :meth:`Ownership.caught_up` says whether the worker has
applied the empty snapshot of a fence (or a later one).

The data watch's callback runs on a kazoo thread and only hands the bytes to the loop; a large
document is decoded off the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from kazoo.client import KazooClient  # type: ignore[import-untyped]
from kazoo.recipe.watchers import DataWatch  # type: ignore[import-untyped]

from adapters import zk
from allocator.document import Document, Entry
from allocator.handover import HandoverGate
from emq.core.interfaces import ConfigStore, OwnedGroups
from emq.core.model import GroupRef, Namespace, Topic, TopicRef

log = logging.getLogger(__name__)

TOPIC_SETTLE_S = 0.2  # let the worker's own topic watch take a new topic before we hand it over
RETRY_S = 0.5
LARGE_DOCUMENT = 65536  # bytes: decoded in a thread (20 000 groups: some 50 ms)
Key = tuple[str, int]  # (str(GroupRef), epoch)


def parse_group(name: str) -> GroupRef | None:
    """The :class:`GroupRef` of ``str(GroupRef)`` (``ns/tenant/topic/g<i>``), or None."""
    parts = name.split("/")
    if len(parts) != 4 or not parts[3].startswith("g") or not parts[3][1:].isdigit():
        return None
    try:
        ns = Namespace(parts[0])
    except ValueError:
        return None
    return GroupRef(TopicRef(ns, parts[1], parts[2]), int(parts[3][1:]))


def keys_of(owned: OwnedGroups) -> frozenset[Key]:
    return frozenset((str(g), e) for g, e in owned.groups.items())


class Ownership:
    """The document, the topics and the snapshots offered to the worker (see the module)."""

    def __init__(
        self,
        worker_id: str,
        gate: HandoverGate,
        *,
        fenced: Callable[[], bool],
        on_document: Callable[[Document], None],
        on_applied: Callable[[], None],
    ) -> None:
        self.id = worker_id
        self._gate = gate
        self._fenced = fenced
        self._on_document = on_document
        self._on_applied = on_applied
        self._loop = asyncio.get_running_loop()
        self.document = Document()
        self.mine: dict[str, Entry] = {}
        self.waiting_on_me: set[Key] = set()  # (group, epoch) whose new owner waits for us
        self.topics: Mapping[TopicRef, Topic] | None = None
        self.group_names: list[str] | None = None
        self.topics_changed = zk.Poke()  # the leader re-assigns when the group set changes
        self.current = OwnedGroups(0)
        self._version = 0
        self._bump = asyncio.Event()
        self._applied = OwnedGroups(0)
        self.applied_version = 0
        self.fence_version = 0
        self.touching: frozenset[Key] = frozenset()
        self._decoding: set[asyncio.Task[None]] = set()
        self._failure: BaseException | None = None
        self.closed = False

    # ----------------------------------------------------------------- the worker's side

    async def updates(self) -> AsyncIterator[OwnedGroups]:
        seen = -1
        while True:
            while self._version == seen:
                self._bump.clear()
                await self._bump.wait()
                if self._failure is not None:
                    raise self._failure
            snapshot, seen = self.current, self._version
            self.touching = keys_of(self._applied) | keys_of(snapshot)
            yield snapshot
            # Asked for the next one: the worker has applied this one (released what it lost).
            self._applied, self.applied_version = snapshot, seen
            self.touching = keys_of(snapshot)
            self._on_applied()

    def let_go(self, key: Key) -> None:
        """The worker stopped touching ``key`` (released it)."""
        self.touching = self.touching - {key}

    def caught_up(self) -> bool:
        """True once the worker applied the snapshot of the last fence (or a later one)."""
        return self.applied_version >= self.fence_version

    def fail(self, error: BaseException) -> None:
        """The member failed: the worker's next wait for a snapshot raises ``error``."""
        self._failure = error
        self._bump.set()

    def fence(self) -> None:
        """Offer the empty snapshot of a fence, and remember it must be applied."""
        self.publish()
        self.fence_version = self._version

    def publish(self) -> None:
        """Offer the worker the groups it may own now (nothing while fenced)."""
        groups: dict[GroupRef, int] = {}
        if not self._fenced() and self.topics is not None:
            now = time.monotonic()
            for name, entry in self.mine.items():
                ref = parse_group(name)
                if (
                    ref is not None
                    and ref.topic in self.topics
                    and self._gate.ready(name, entry, now)
                ):
                    groups[ref] = entry.epoch
        snapshot = OwnedGroups(self.document.generation, groups)
        if snapshot != self.current:
            self.current = snapshot
            self._version += 1
            self._bump.set()

    # ----------------------------------------------------------------- the assignment

    async def follow(self, client: KazooClient, path: str, timeout_s: float) -> None:
        """Arm the data watch on ``path`` (kazoo keeps it armed, across new sessions too)."""
        while True:
            try:
                await zk.one(client.ensure_path_async(path), "setup", timeout_s)
                # DataWatch reads the node (and calls back once) in its constructor: off the loop.
                await asyncio.to_thread(DataWatch, client, path, self._on_data)
                return
            except Exception as e:
                log.debug("cannot watch %s yet: %s", path, e)
                await asyncio.sleep(RETRY_S)

    def _on_data(self, data: bytes | None, stat: Any, event: Any = None) -> bool | None:
        """The data watch's callback, on a kazoo thread: hands the bytes to the loop."""
        if self.closed or data is None:
            return False if self.closed else None
        raw = bytes(data)
        if not zk.call_soon(self._loop, self._spawn_take, raw):
            return False
        return None

    def _spawn_take(self, raw: bytes) -> None:
        task = self._loop.create_task(self.take_document(raw))
        self._decoding.add(task)  # referenced until done: the loop keeps only weak references
        task.add_done_callback(self._decoding.discard)

    async def take_document(self, raw: bytes) -> None:
        """Adopt the document ``raw`` unless it is older than the one we act on."""
        decode = Document.decode
        try:
            doc = await asyncio.to_thread(decode, raw) if len(raw) > LARGE_DOCUMENT else decode(raw)
        except ValueError as e:
            log.error("worker %s: %s", self.id, e)
            return
        if doc.generation <= self.document.generation and self.document.generation:
            return  # an older (or the same) document arriving late
        self.document = doc
        self.mine = doc.of(self.id)
        self.waiting_on_me = {
            (g, ep) for g, e in doc.groups.items() for w, ep in e.waits_for if w == self.id
        }
        self._gate.forget(self.mine)
        self._on_document(doc)
        self.publish()

    # ----------------------------------------------------------------- topics

    async def watch_topics(self, config: ConfigStore, namespace: Namespace) -> None:
        async for topics in config.watch_topics(namespace):
            grew = self.topics is not None and not set(topics) <= set(self.topics)
            names = sorted(str(g) for t in topics.values() for g in t.group_refs())
            self.topics = topics
            if names != self.group_names:
                self.group_names = names
                self.topics_changed.set()
            if grew:
                await asyncio.sleep(TOPIC_SETTLE_S)
            self.publish()
