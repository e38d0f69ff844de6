"""The seams: small abstract classes that ``adapters``, ``allocator`` and ``worker`` implement,
one module per seam (this package exports every public name, so callers import from here).

* :class:`QueueBackend` (:mod:`~emq.core.interfaces.queues`) — physical queues as append-only
  logs with offsets, checkpoints guarded by an owner epoch, backlog and trimming (``adapters``:
  Redis standalone/Cluster, in-memory), seen by its users through one role each:
  :class:`JobProducer` (put, count what waits), :class:`GroupOwner` (a worker: claim, read,
  checkpoint, trim, retry, dead-letter), :class:`DeadLetterAdmin` (list and replay dead
  letters); :class:`ApiQueues` is the API's two.
* :class:`ConfigStore` (:mod:`~emq.core.interfaces.config`) — tenants and topics, versioned and
  watchable (``adapters``: ZooKeeper, in-memory).
* :class:`AssignmentSource` (:mod:`~emq.core.interfaces.assignment`) — which groups this worker
  owns, with their epochs (``allocator``: the ZooKeeper fleet; ``worker``: the standalone "own
  everything" source).
* :class:`Pusher` (:mod:`~emq.core.interfaces.push`) — delivers one HTTP request (``worker``: the
  lean HTTP/1.1 client or the aiohttp session, by ``EMQ_WORKER_HTTP_CLIENT``).
* :class:`FleetView` (:mod:`~emq.core.interfaces.fleet`) — the fleet's members and assignment,
  for operators (``allocator``).
* :class:`HistoryStore` (:mod:`~emq.core.interfaces.history`) — traffic history and rates.

Callers depend on these only; the composition root (``emq.cli.main`` / ``emq.compose``) picks the
concrete classes. Every resource is an async context manager with ``aclose()``
(:class:`AsyncResource`, :mod:`~emq.core.interfaces.resource`).
"""

from emq.core.interfaces.assignment import AssignmentSource, OwnedGroups
from emq.core.interfaces.config import ConfigStore
from emq.core.interfaces.fleet import FleetMember, FleetState, FleetView
from emq.core.interfaces.history import HistoryRow, HistoryStore
from emq.core.interfaces.push import NotSent, Pusher, PushRequest, PushResult
from emq.core.interfaces.queues import (
    ZERO_OFFSET,
    ApiQueues,
    BackendHealth,
    Checkpoint,
    Claimed,
    DeadLetter,
    DeadLetterAdmin,
    Entry,
    GroupOwner,
    JobProducer,
    Offset,
    PutItem,
    PutResult,
    QueueBackend,
    QueueProbe,
    Scheduled,
)
from emq.core.interfaces.resource import AsyncResource

__all__ = [
    "ZERO_OFFSET",
    "ApiQueues",
    "AssignmentSource",
    "AsyncResource",
    "BackendHealth",
    "Checkpoint",
    "Claimed",
    "ConfigStore",
    "DeadLetter",
    "DeadLetterAdmin",
    "Entry",
    "FleetMember",
    "FleetState",
    "FleetView",
    "GroupOwner",
    "HistoryRow",
    "HistoryStore",
    "JobProducer",
    "NotSent",
    "Offset",
    "OwnedGroups",
    "PushRequest",
    "PushResult",
    "Pusher",
    "PutItem",
    "PutResult",
    "QueueBackend",
    "QueueProbe",
    "Scheduled",
]
