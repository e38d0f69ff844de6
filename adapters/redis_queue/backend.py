"""The Redis queue backend: every role composed into one :class:`RedisQueueBackend`, and
:func:`connect`, which opens the clients and loads the scripts."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from adapters.redis_cluster import cluster_from_url
from adapters.redis_conn import Client, client_options
from adapters.redis_packing import packed_by_hiredis
from adapters.redis_queue.base import DEFAULT_IDEMPOTENCY_WINDOW_S
from adapters.redis_queue.dead_letters import RedisDeadLetters
from adapters.redis_queue.delayed import RedisDelayed
from adapters.redis_queue.owner import RedisOwner
from adapters.redis_queue.producer import RedisProducer
from adapters.redis_queue.signals import RedisSignals
from emq.core.interfaces import QueueBackend
from emq.core.naming import RedisKeys


class RedisQueueBackend(
    RedisProducer, RedisSignals, RedisOwner, RedisDelayed, RedisDeadLetters, QueueBackend
):
    """:class:`~emq.core.interfaces.QueueBackend` on Redis Streams (standalone or Cluster client).

    Takes ownership of ``client`` and ``blocking_client``: :meth:`aclose` closes them.
    ``blocking_client`` (made by :func:`connect`, with no socket timeout) serves the blocking
    reads of :meth:`wait_ready`; without it one is derived from a standalone ``client``'s pool,
    and a Cluster ``client`` is shared (its socket timeout must then exceed the wait). The
    constructor is :class:`~adapters.redis_queue.base.RedisQueueBase`'s.
    """


async def connect(url: str, *, cluster: bool, prefix: str, **opts: Any) -> RedisQueueBackend:
    """Connect to ``url`` (one node of a Cluster if ``cluster``) and return a backend on it.

    ``opts`` go to :class:`RedisQueueBackend` when they are its own (``idempotency_window_s``)
    and to the redis client otherwise (timeouts, retries; see :func:`client_options`). Loading
    the scripts checks that Redis answers: an unreachable one is
    :class:`~emq.core.errors.BackendUnavailable` here, not later.
    """
    window = opts.pop("idempotency_window_s", DEFAULT_IDEMPOTENCY_WINDOW_S)
    own = ("wait_replicas", "wait_timeout_ms", "routes", "addressed")
    wait = {k: opts.pop(k) for k in own if k in opts}
    opts = client_options(cluster, **opts)
    make = cluster_from_url if cluster else aioredis.Redis.from_url
    client: Client = packed_by_hiredis(make(url, **opts))
    # Blocking reads are bounded by their BLOCK time (and wait_ready's own deadline).
    blocking: Client = packed_by_hiredis(make(url, **{**opts, "socket_timeout": None}))
    try:
        backend = RedisQueueBackend(
            client, RedisKeys(prefix), idempotency_window_s=window, blocking_client=blocking, **wait
        )
    except BaseException:
        await blocking.aclose()
        await client.aclose()
        raise
    try:
        await backend.load_scripts()
    except BaseException:
        await backend.aclose()
        raise
    return backend
