"""The Redis Cluster client EMQ uses: one shard's failover touches only that shard's commands.

redis-py's asyncio ``RedisCluster`` (8.1) gets several things wrong when one master dies, each
seen in a failover under load (issue 26):

* It answers some errors of one node by calling its own ``aclose()`` (a pipeline retried after
  a ConnectionError, a CLUSTERDOWN, an uncovered slot, every few MOVED replies). That
  disconnects every connection of every node, including those other tasks are using at that
  moment on healthy shards: their commands fail with asyncio's torn-down transport
  (``RuntimeError: unable to perform operation on <TCPTransport closed=True>``, ``'NoneType'
  object has no attribute 'writelines'``), and a pipeline whose nodes were half done is sent
  again (a command whose reply was falsy, too). Every shard paused; writes went twice.
* Re-learning the slots runs ``COMMAND`` on the first master; while that one is the dead master
  (until its replica is promoted) the re-learning fails, and redis-py then closes every
  connection again. Routing an XREAD asks that same node (``COMMAND GETKEYS``) on every call,
  so the ready-signal listener failed for good once the node it asked was gone.
* A pipeline without retries never re-learns the slots after a node failed under it: every
  later command to a failed master's slots went to the dead node although its replica had
  taken over.
* A client first used after the node named by its URL died cannot find the cluster.

:class:`ShardedCluster` fixes these through redis-py's public methods: when redis-py calls
``aclose()`` on itself, it re-reads the slots (``nodes_manager.initialize``) instead of closing
anything; the command table is read once per client, and XREAD's keys are found without asking
a server (:class:`_KeptCommands`); its pipelines re-read the slots when a node failed under
them (:class:`_Pipeline`); every client of the process starts from every node any of them has
seen (:data:`_SEEN`). The owner's own ``aclose()`` closes everything, as before.

The options (:func:`cluster_options`) complete it:

* ``retry`` with no retries: a command or pipeline that meets a dead node fails at once
  (BackendUnavailable at the seam) instead of being re-sent up to ten times over ~6 s, which
  held every caller of a pipeline that touched the dead shard, and re-sent commands that had
  run. Each caller retries with backoff (worker loops through :mod:`worker.outage`, the API's
  client after a 503), and says which of its calls may be repeated (:mod:`adapters.redis_conn`).
* ``require_full_coverage=False``: a topology with a slot not served for the moment (a master
  failed, its replica not yet promoted) is taken as it is; the other slots keep working.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from redis import exceptions as rex
from redis._parsers import AsyncCommandsParser  # (redis-py names it there; its cluster imports it)
from redis.asyncio.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.cluster import get_node_name

log = logging.getLogger(__name__)

_REDIS_PY = "redis.asyncio.cluster"
# Errors meaning a node failed under a command: the slots may have moved (a failover).
NODE_FAILED = (rex.ConnectionError, rex.TimeoutError, rex.ClusterDownError, rex.SlotNotCoveredError)
# Every node any client of this process has seen, by the URL it was made for (see the module).
_SEEN: dict[str, dict[tuple[str, int], None]] = {}


class _KeptCommands(AsyncCommandsParser):
    """redis-py's command table, read once (it does not change while a client lives), and
    XREAD's keys read from the command itself: neither asks a node that may be dead."""

    async def initialize(self, node: ClusterNode | None = None) -> None:
        if node is not None:
            self.node = node
        if not self.commands:
            await super().initialize()

    async def get_keys(self, *args: Any) -> tuple[Any, ...] | None:
        if args and str(args[0]).upper() == "XREAD":
            return _stream_keys(args)
        return await super().get_keys(*args)


def _stream_keys(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The keys of ``XREAD [COUNT n] [BLOCK ms] STREAMS key ... id ...``."""
    words = [a.decode() if isinstance(a, bytes) else str(a) for a in args]
    start = next(i for i, w in enumerate(words) if w.upper() == "STREAMS") + 1
    rest = args[start:]
    return tuple(rest[: len(rest) // 2])


class ShardedCluster(RedisCluster):
    """``RedisCluster`` whose error handling re-reads the slots without closing healthy nodes'
    connections (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands_parser = _KeptCommands()
        first = self.nodes_manager.startup_nodes.values()
        self.seed = ",".join(sorted(node.name for node in first))
        _SEEN.setdefault(self.seed, {})

    async def initialize(
        self,
        additional_startup_nodes_info: list[tuple[str, int]] | None = None,
        last_failed_node_name: str | None = None,
    ) -> ShardedCluster:
        self._know_seen_nodes()
        await super().initialize(additional_startup_nodes_info, last_failed_node_name)
        _SEEN[self.seed].update(dict.fromkeys((n.host, int(n.port)) for n in self.get_nodes()))
        return self

    def _know_seen_nodes(self) -> None:
        """Start from every node of the process's other clients too (the node named by the URL
        may be the one that died): they join the startup nodes, which the client manages."""
        startup = self.nodes_manager.startup_nodes
        for host, port in _SEEN[self.seed]:
            if get_node_name(host, port) not in startup:
                node = ClusterNode(host, port, **self.nodes_manager.connection_kwargs)
                startup[node.name] = node

    async def aclose(self) -> None:
        if sys._getframe(1).f_globals.get("__name__") == _REDIS_PY:
            await self.relearn_slots()  # redis-py's own "reinitialize after an error"
            return
        await super().aclose()

    async def relearn_slots(self) -> None:
        """Read the slots again (a failover moved some); a failure waits for the next error."""
        try:
            await self.nodes_manager.initialize()
        except (rex.RedisError, OSError) as e:
            log.debug("redis cluster slots not re-read: %s", e)

    def pipeline(
        self, transaction: Any | None = None, shard_hint: Any | None = None
    ) -> ClusterPipeline:
        if transaction or shard_hint:
            return super().pipeline(transaction, shard_hint)
        return _Pipeline(self, transaction)  # type: ignore[abstract]  # (as redis-py's own)


class _Pipeline(ClusterPipeline):
    """A pipeline that has its client re-read the slots when a node failed under it (raised,
    or as a reply), as redis-py's single commands do; without retries its own never would."""

    async def execute(
        self, raise_on_error: bool = True, allow_redirections: bool = True
    ) -> list[Any]:
        client = self.cluster_client
        assert isinstance(client, ShardedCluster)
        try:
            replies: list[Any] = await super().execute(raise_on_error, allow_redirections)
        except NODE_FAILED:
            await client.relearn_slots()
            raise
        if any(isinstance(r, NODE_FAILED) for r in replies):
            await client.relearn_slots()
        return replies


def cluster_options() -> dict[str, Any]:
    """The options of :class:`ShardedCluster` (see the module docstring)."""
    return {"retry": Retry(NoBackoff(), 0), "require_full_coverage": False}


def cluster_from_url(url: str, **options: Any) -> ShardedCluster:
    """A :class:`ShardedCluster` for the node named by ``url``."""
    client = ShardedCluster.from_url(url, **options)
    assert isinstance(client, ShardedCluster)  # (from_url is typed as the base class's)
    return client
