"""The seams: small abstract classes that ``adapters``, ``allocator`` and ``worker`` implement.

* :class:`QueueBackend` — physical queues as append-only logs with offsets, checkpoints guarded
  by an owner epoch, backlog and trimming (``adapters``: Redis standalone/Cluster, in-memory).
* :class:`ConfigStore` — tenants and topics, versioned and watchable (``adapters``: ZooKeeper,
  in-memory).
* :class:`AssignmentSource` — which groups this worker owns, with their epochs (``allocator``:
  the ZooKeeper fleet; ``worker``: the standalone "own everything" source).
* :class:`Pusher` — delivers one HTTP request (``worker``: the aiohttp push executor).

Callers depend on these only; the composition root (``emq.cli`` / ``emq.compose``) picks the
concrete classes. Every resource is an async context manager with ``aclose()``.
"""

from __future__ import annotations

import abc
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

from emq.model import GroupRef, Namespace, QueueRef, Tenant, Topic, TopicRef

_OFFSET_RE = re.compile(r"^(\d+)-(\d+)$")


@dataclass(frozen=True, order=True, slots=True)
class Offset:
    """A position in a physical queue: ``ms-seq`` (the shape of a Redis stream id).

    Offsets grow strictly within a queue; :data:`ZERO_OFFSET` is before the first entry.
    """

    ms: int
    seq: int

    @classmethod
    def parse(cls, text: str) -> Offset:
        m = _OFFSET_RE.match(text)
        if not m:
            raise ValueError(f"not an offset: {text!r}")
        return cls(int(m.group(1)), int(m.group(2)))

    def __str__(self) -> str:
        return f"{self.ms}-{self.seq}"


ZERO_OFFSET = Offset(0, 0)
"""Before the first entry of every queue."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored job: its offset in the queue and its encoded payload."""

    offset: Offset
    payload: bytes


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A committed offset (everything at or below it is finished) and the epoch that wrote it."""

    offset: Offset
    epoch: int


class AsyncResource(abc.ABC):
    """Something holding connections or tasks: use ``async with`` or call ``aclose()``."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release every connection and task; calling it twice is harmless."""


class QueueBackend(AsyncResource):
    """Physical queues: append-only logs addressed by :class:`Offset`.

    Errors: :class:`~emq.errors.BackendUnavailable` when the store cannot be reached,
    :class:`~emq.errors.Fenced` when a guarded write carries a stale epoch.
    """

    @abc.abstractmethod
    async def put(self, items: Sequence[tuple[QueueRef, bytes]]) -> list[Offset]:
        """Append each payload to its queue (pipelined across queues).

        Returns the offsets in the order of ``items``. When it returns, every item is durable.
        """

    @abc.abstractmethod
    async def read(
        self, requests: Mapping[QueueRef, Offset], count: int
    ) -> dict[QueueRef, list[Entry]]:
        """Read up to ``count`` entries after each given offset, many queues per round trip.

        Queues with nothing new are left out of the result.
        """

    @abc.abstractmethod
    async def backlog(self, queue: QueueRef) -> int:
        """How many entries lie after the queue's checkpoint (its unfinished work)."""

    @abc.abstractmethod
    async def trim(self, queue: QueueRef, epoch: int, retain: int) -> int:
        """Drop entries at or below the checkpoint, keeping the newest ``retain`` of them.

        Guarded by ``epoch`` like a checkpoint write. Returns how many entries were dropped.
        """

    @abc.abstractmethod
    async def read_checkpoint(self, queue: QueueRef) -> Checkpoint | None:
        """The queue's committed checkpoint, or ``None`` if nothing was ever committed."""

    @abc.abstractmethod
    async def write_checkpoint(self, queue: QueueRef, offset: Offset, epoch: int) -> None:
        """Commit ``offset`` for the owner holding ``epoch``.

        Raises :class:`~emq.errors.Fenced` if the group's current epoch is newer than ``epoch``
        (a former owner must not move the offset). Offsets never move backwards.
        """


class ConfigStore(AsyncResource):
    """Tenants and topics: versioned, so concurrent admins never overwrite each other."""

    @abc.abstractmethod
    async def create_tenant(self, tenant: Tenant) -> None:
        """Store a new tenant; :class:`~emq.errors.AlreadyExists` if the name is taken."""

    @abc.abstractmethod
    async def get_tenant(self, name: str) -> Tenant:
        """One tenant; :class:`~emq.errors.NotFound` if there is none by that name."""

    @abc.abstractmethod
    async def list_tenants(self) -> list[Tenant]:
        """Every tenant, sorted by name."""

    @abc.abstractmethod
    async def create_topic(self, topic: Topic) -> None:
        """Store a new topic of an existing tenant; ``AlreadyExists`` if the name is taken."""

    @abc.abstractmethod
    async def get_topic(self, ref: TopicRef) -> Topic:
        """One topic; ``NotFound`` if the tenant or the topic does not exist."""

    @abc.abstractmethod
    async def update_topic(self, topic: Topic, *, expected: Topic) -> None:
        """Replace ``expected`` by ``topic``; ``ConfigConflict`` if someone changed it first."""

    @abc.abstractmethod
    async def list_topics(self, namespace: Namespace, tenant: str | None = None) -> list[Topic]:
        """The topics of a namespace (of one tenant if given), sorted by reference."""

    @abc.abstractmethod
    def watch_topics(self, namespace: Namespace) -> AsyncIterator[Mapping[TopicRef, Topic]]:
        """Yield the namespace's whole topic map now and after every change (within ~2 s)."""


@dataclass(frozen=True, slots=True)
class OwnedGroups:
    """What a worker owns: each group with its owner epoch, under an assignment generation.

    The generation only grows; a worker ignores a snapshot older than the one it acts on.
    """

    generation: int
    groups: Mapping[GroupRef, int] = field(default_factory=dict)


class AssignmentSource(AsyncResource):
    """Tells one worker which groups it owns. The fleet implementation lives in ``allocator``."""

    @abc.abstractmethod
    def current(self) -> OwnedGroups:
        """The latest snapshot (possibly empty before the first assignment arrives)."""

    @abc.abstractmethod
    def updates(self) -> AsyncIterator[OwnedGroups]:
        """Yield a snapshot whenever ownership changes (including self-fencing to empty)."""

    @abc.abstractmethod
    async def release(self, group: GroupRef, epoch: int) -> None:
        """Tell the fleet this worker has stopped touching ``group`` (handover may proceed)."""


@dataclass(frozen=True, slots=True)
class PushRequest:
    """One HTTP request to deliver, already signed."""

    url: str
    method: str
    headers: Mapping[str, str]
    body: bytes | None
    endpoint: str  # the concurrency-cap key: one topic's endpoint


@dataclass(frozen=True, slots=True)
class PushResult:
    """What the endpoint answered: ``status`` 0 means no HTTP response (see ``error``)."""

    status: int
    elapsed_s: float
    retry_after_s: float | None = None
    error: str | None = None


class Pusher(AsyncResource):
    """Delivers HTTP requests (one session, fixed sender pool, per-endpoint caps)."""

    @abc.abstractmethod
    async def push(self, request: PushRequest) -> PushResult:
        """Send ``request``; raises ``DestinationRefused`` if the SSRF guard refuses it."""
