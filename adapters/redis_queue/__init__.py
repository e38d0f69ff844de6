"""Physical queues on Redis Streams, for a standalone Redis or a Redis Cluster.

Layout (keys from :class:`~emq.core.naming.RedisKeys`; every key of a group shares its hash tag,
so a group lives on one Cluster slot and each Lua script touches one slot only; the formats the
scripts share with the in-memory backend are in :mod:`adapters.redis_queue.lua`):

* ``stream(queue)``: the queue's log; one field ``d`` per entry holds the payload. Created by the
  first XADD, so a queue that never got a job costs no key.
* ``checkpoint(queue)``: hash ``{o: offset, e: epoch, n: entries committed so far}``.
* ``epoch(group)``: the owner epoch; checkpoints, trims and dead letters carrying an older one are
  refused (:class:`~emq.core.errors.Fenced`) inside the same script that would write.
* ``delayed(group)``: sorted set of ``<priority>|<payload>`` scored by due epoch milliseconds.
* ``dlq(group)``: stream of dead letters (fields priority, payload, error, status, attempts,
  failed_at), trimmed to the topic's retention (newest ``dlq_max_entries``, none older than
  ``dlq_max_age_s``) by each append and by :meth:`trim_dead`.
* ``idempotency(group, key)``: ``SET NX EX window`` marker holding the first job id.
* ``job_due(group)``: hash job id -> due time of each job parked by a put with a due time,
  removed when it is promoted (the job status lookup's way to a delayed job; see
  :mod:`adapters.redis_jobs`).

Two global keys, outside every group's hash tag, carry hints for the workers (never passed to a
script with group keys, so a Cluster never answers CROSSSLOT):

* ``ready()``: a stream (capped at ~:data:`READY_MAXLEN` entries); each write that appends jobs
  (put, promote_due, replay_dead) adds one entry whose field ``g`` holds the names
  (``str(GroupRef)``, one per line) of the groups it appended to. :meth:`wait_ready` blocks on it
  (XREAD BLOCK) on a dedicated client, so a worker owning 10 000 queues never polls idle ones.
* ``due_index()``: a sorted set, member ``str(GroupRef)``, score the earliest due time of the
  group's delayed set (or earlier: a stale entry is harmless, :meth:`reindex_delayed` refreshes it).

In a fleet, hints go to the owner's inbox instead (``inbox(worker)``, ``due_inbox(worker)``,
one hash tag per worker) and the two global keys remain the fallback every worker also reads:
see :mod:`adapters.redis_queue.signals`.

Hints are not atomic with the writes they announce (they live on another slot): they are sent
after them (on a standalone server in the same pipeline, which one server runs in order; on a
Cluster in a second round trip, since a pipeline's nodes run concurrently), so a worker woken by
one finds the work. A lost hint (a failure between the two) only delays the work until the
worker's periodic sweep, so a failed hint is logged, not raised.

Backlog is ``entries-added`` (XINFO STREAM, Redis >= 7.0) minus the checkpoint's committed count,
which stays right after trims. Every many-queue call is one pipeline (``transaction=False``; a
Cluster pipeline splits by node). A put sends its plain items as one APPEND script per Cluster
slot (one in all on a standalone server) rather than one XADD each: redis-py spends ~20 us of
Python per pipelined command, which would cap a 2-core API far below 30k jobs/s; jobs with an
idempotency key or a due time take one PUT script each. Scripts run by EVALSHA; a node that lost
its script cache (restart, failover) answers NOSCRIPT, and those commands, which did not run, are
re-sent once after SCRIPT LOAD.

Driver errors are translated at the seam (:mod:`adapters.redis_conn`, which also says how
clients survive restarts and failovers), and :attr:`RedisQueueBackend.health` records what the

Where each part lives, one module per role of :class:`~emq.core.interfaces.QueueBackend`, each
with the Lua scripts it runs:

* :mod:`~adapters.redis_queue.base` — clients, script registration, pipelines, Cluster slots,
  the hints (what every role shares);
* :mod:`~adapters.redis_queue.producer` — :class:`~emq.core.interfaces.JobProducer` (the API):
  put, backlog, delayed counts;
* :mod:`~adapters.redis_queue.owner` — :class:`~emq.core.interfaces.GroupOwner` (a worker):
  claim and holds, read, checkpoints, trims, ready signals;
  :mod:`~adapters.redis_queue.delayed` — its delayed jobs and the due index;
  :mod:`~adapters.redis_queue.signals` — hints addressed to owners, a worker's inbox;
* :mod:`~adapters.redis_queue.dead_letters` — writing and ageing dead letters (the owner) and
  :class:`~emq.core.interfaces.DeadLetterAdmin` (list, replay);
* :mod:`~adapters.redis_queue.backend` — :class:`RedisQueueBackend`, composed of the roles, and
  :func:`connect`.
"""

from adapters.redis_queue.backend import RedisQueueBackend, connect
from adapters.redis_queue.base import DEFAULT_IDEMPOTENCY_WINDOW_S, READY_MAXLEN

__all__ = ["DEFAULT_IDEMPOTENCY_WINDOW_S", "READY_MAXLEN", "RedisQueueBackend", "connect"]
