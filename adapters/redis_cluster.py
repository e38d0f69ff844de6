"""The Redis Cluster client EMQ uses: one shard's failover touches only that shard's commands.

redis-py's asyncio ``RedisCluster`` (8.x) answers several errors of one node by calling its own
``aclose()``: a pipeline retried after a ConnectionError, a CLUSTERDOWN or an uncovered slot,
every few MOVED replies. That disconnects every connection of every node, including the ones
other tasks are using at that moment on healthy shards: their commands then fail with asyncio's
torn-down transport (``RuntimeError: unable to perform operation on <TCPTransport
closed=True>``, ``'NoneType' object has no attribute 'writelines'``), and a pipeline whose nodes
were half done is sent again (commands whose reply was falsy are re-sent too). In a failover
that made every shard pause and sent writes twice.

:class:`ShardedCluster` keeps what that ``aclose()`` is for (the next command re-learns the
slots, ``CLUSTER SLOTS``) and drops the rest: when redis-py calls it on itself, no connection is
closed. The owner's own ``aclose()`` closes everything, as before. The per-node connection
pools stay; a node that failed has its idle connections dropped by redis-py itself.

The options (:func:`cluster_options`) complete it:

* ``retry`` with no retries: a command or pipeline that meets a dead node fails at once
  (BackendUnavailable at the seam) instead of being re-sent up to ten times over ~6 s, which
  held every caller of a pipeline that touched the dead shard, and re-sent commands that had
  run. Each caller retries with backoff (worker loops through :mod:`worker.outage`, the API's
  client after a 503), and says which of its calls may be repeated (:mod:`adapters.redis_conn`).
* its pipelines (:class:`_Pipeline`) mark the slots for re-reading when a node failed under
  them, as redis-py's single commands do; without retries its own pipelines never would.
* ``require_full_coverage=False``: a topology with a slot not served for the moment (a master
  failed, its replica not yet promoted) is taken as it is; the other slots keep working. (With
  it on, re-learning the slots failed, and redis-py then closed every node's connections.)
"""

from __future__ import annotations

import sys
from typing import Any

from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

_REDIS_PY = "redis.asyncio.cluster"


class ShardedCluster(RedisCluster):
    """``RedisCluster`` whose error handling re-learns the slots without closing healthy nodes'
    connections (see the module docstring)."""

    async def aclose(self) -> None:
        if sys._getframe(1).f_globals.get("__name__") == _REDIS_PY:
            # redis-py's own "reinitialize after an error": the next command re-reads the slots.
            self._initialize = True
            return
        await super().aclose()

    def pipeline(
        self, transaction: Any | None = None, shard_hint: Any | None = None
    ) -> ClusterPipeline:
        if transaction or shard_hint:
            return super().pipeline(transaction, shard_hint)
        return _Pipeline(self, transaction)  # type: ignore[abstract]  # (as redis-py's own)


class _Pipeline(ClusterPipeline):
    """A pipeline that has its client re-learn the slots when a node failed under it.

    Without retries redis-py's pipeline neither re-reads the slots after a node's
    ConnectionError nor after a reply that is one (a single command does): its slots would
    name a dead master for good, and every later command to its slots fail although a replica
    took over."""

    async def execute(
        self, raise_on_error: bool = True, allow_redirections: bool = True
    ) -> list[Any]:
        try:
            replies: list[Any] = await super().execute(raise_on_error, allow_redirections)
        except RedisCluster.ERRORS_ALLOW_RETRY:
            self.cluster_client._initialize = True
            raise
        if any(isinstance(r, RedisCluster.ERRORS_ALLOW_RETRY) for r in replies):
            self.cluster_client._initialize = True
        return replies


def cluster_options() -> dict[str, Any]:
    """The options of :class:`ShardedCluster` (see the module docstring)."""
    return {"retry": Retry(NoBackoff(), 0), "require_full_coverage": False}


def cluster_from_url(url: str, **options: Any) -> ShardedCluster:
    """A :class:`ShardedCluster` for the node named by ``url``."""
    client = ShardedCluster.from_url(url, **options)
    assert isinstance(client, ShardedCluster)  # (from_url is typed as the base class's)
    return client
