"""Redis connections: the client options EMQ uses, and driver errors translated at the seam.

Driver errors are translated here: unreachable or transiently refusing Redis becomes
:class:`~emq.core.errors.BackendUnavailable` (the backend's ``health`` records what the last
call found, for the health endpoints).

Restarts and failovers : the pool checks a pooled connection before
lending it, so one the server closed (restart, failover) is replaced instead of failing the
next command; TCP keepalive finds the ones that died silently. A call that still meets a broken
connection is sent once more when repeating it cannot apply anything twice (every call but a
put of jobs without idempotency keys, a dead letter and a DLQ replay: their outcome is unknown,
and the caller decides). A Cluster client re-learns the slots after an error and leaves the
retry to its callers too (failover: :mod:`adapters.redis_cluster`).
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeAlias

import redis.asyncio as aioredis
from redis import exceptions as rex
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.maint_notifications import MaintNotificationsConfig

from adapters.redis_cluster import cluster_options
from adapters.redis_replies import Command, text
from emq.core.errors import BackendUnavailable
from emq.core.interfaces import BackendHealth

Client: TypeAlias = "aioredis.Redis | RedisCluster"

log = logging.getLogger(__name__)


# Errors that mean "Redis can't serve this now" rather than "this request is wrong".
UNAVAILABLE = (
    rex.ConnectionError,  # also BusyLoadingError (restarting with AOF), MaxConnectionsError
    rex.TimeoutError,
    rex.ClusterDownError,  # also MasterDownError
    rex.TryAgainError,  # slot migrating
    rex.ReadOnlyError,  # failover in progress
    rex.OutOfMemoryError,
    rex.SlotNotCoveredError,
)


def is_unreachable_cluster(e: BaseException) -> bool:
    # RedisCluster wraps "no startup node answered" in a bare RedisClusterException, and while a
    # failover is under way re-learning the slots can find some uncovered ("All slots are not
    # covered after query all startup_nodes"): both pass once the cluster has a primary again.
    if not isinstance(e, rex.RedisClusterException):
        return False
    return isinstance(e.__cause__, UNAVAILABLE) or "slots are not covered" in str(e)


@contextlib.contextmanager
def translated(what: str) -> Iterator[None]:
    """Turn driver errors meaning "unavailable" into :class:`BackendUnavailable`."""
    try:
        yield
    except UNAVAILABLE as e:
        raise BackendUnavailable(f"redis unavailable during {what}: {e}") from e
    except rex.RedisClusterException as e:
        if is_unreachable_cluster(e):
            raise BackendUnavailable(f"redis cluster unreachable during {what}: {e}") from e
        raise
    except (AttributeError, TypeError, RuntimeError) as e:
        if not is_closed_transport(e):
            raise
        raise BackendUnavailable(f"redis connection closed during {what}: {e}") from e


# What asyncio says of a write on a transport closed under it (RuntimeError), and what a write
# on a connection whose transport is gone says (AttributeError/TypeError about None).
_CLOSED = ("NoneType", "handler is closed", "unable to perform operation on")


def is_closed_transport(error: Exception) -> bool:
    """redis-py (8.1 and master) lets a command on a connection closed under it (the peer
    closed it, or the client disconnected it meanwhile: a Cluster client re-learning its slots)
    leak asyncio's torn-down transport as ``AttributeError``/``TypeError`` about ``None`` or
    ``RuntimeError: unable to perform operation on <TCPTransport closed=True>; the handler is
    closed`` instead of a ConnectionError (redis/redis-py#4287; seen here in a Cluster
    failover). Only errors raised inside redis-py or asyncio count: the same error from our own
    code stays a bug."""
    message = str(error)
    if not any(sign in message for sign in _CLOSED):
        return False
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = tb.tb_frame.f_code.co_filename if tb is not None else ""
    return "/redis/" in where or "/asyncio/" in where


# redis-py 8 (unlike 5) caps a client's pool at 100 connections and fails the next concurrent
# command with MaxConnectionsError (a ConnectionError: it would read as "Redis unavailable"). A
# worker claims 64 groups at a time with four round trips each, so the cap is Redis's own
# default ``maxclients`` instead, as it was with redis-py 5.
DEFAULT_MAX_CONNECTIONS = 10_000


def blocking_twin(client: Client) -> Client:
    """A client for blocking reads with ``client``'s settings but no socket timeout.

    Only a standalone client's pool says how to make one; a Cluster client is returned itself.
    """
    if isinstance(client, RedisCluster):
        return client
    pool = client.connection_pool
    kwargs = {**pool.connection_kwargs, "socket_timeout": None}
    twin_pool = aioredis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    return aioredis.Redis.from_pool(twin_pool)  # the twin owns (and closes) its pool


def check_acknowledged(replicas: int, wanted: int, timeout_ms: int) -> None:
    """Raise BackendUnavailable unless WAIT reported ``wanted`` replicas."""
    if replicas < wanted:
        raise BackendUnavailable(
            f"jobs written to the Redis primary but acknowledged by {replicas} of {wanted} "
            f"replicas within {timeout_ms} ms: they are possibly stored; retry with the same "
            "idempotency_key to avoid a duplicate"
        )


def conf(config: Mapping[Any, Any], name: str) -> str:
    """One CONFIG GET value, whatever the client decoded."""
    value = config.get(name, config.get(name.encode(), b""))
    return text(value)


def client_options(cluster: bool, **opts: Any) -> dict[str, Any]:
    """The redis-py client options EMQ uses (``opts`` override them), for every client it makes.

    * ``maint_notifications_config`` off: redis-py 8 leaves it ``"auto"``, which its pool
      reads as on, and then skips checking a pooled connection before lending it; after a
      restart every pooled connection was lent closed and failed its next command (the API
      answered 503 for minutes, a worker's claim failed). EMQ runs its own Redis, which sends
      no maintenance notifications.
    * TCP keepalive (idle 10 s, then 3 probes 5 s apart): a connection whose server vanished
      without closing it (host crash, partition) breaks within ~25 s instead of hanging.
    * ``retry``: no client re-sends a command by itself (``from_url`` made a standalone one
      that doesn't either, but implicitly): the backend knows which calls may be repeated and
      does it (:meth:`RedisCalls.pipeline`). A Cluster client still follows MOVED and ASK; it
      re-learns the slots after an error and its callers retry with backoff: that is how it
      follows a failover (:mod:`adapters.redis_cluster` says why it does no more).
    """
    keepalive: dict[int, int] = {}
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, name):  # Linux names; other systems keep their defaults
            keepalive[getattr(socket, name)] = value
    base: dict[str, Any] = {
        "max_connections": DEFAULT_MAX_CONNECTIONS,
        "maint_notifications_config": MaintNotificationsConfig(enabled=False),
        "socket_keepalive": True,
        "socket_keepalive_options": keepalive,
        "socket_connect_timeout": 5.0,
    }
    base["retry"] = Retry(NoBackoff(), 0)
    if cluster:
        base |= cluster_options()
    return base | opts


class RedisCalls:
    """Pipelined commands on one client: translated errors, one retry, scripts reloaded.

    Every call is one pipeline (``transaction=False``; a Cluster pipeline splits by node) whose
    replies come back in order, the first error raised. Scripts run by EVALSHA; a node that lost
    its script cache (restart, failover) answers NOSCRIPT, and those commands, which did not
    run, are re-sent once after SCRIPT LOAD. ``health`` records what each call found.
    """

    def __init__(
        self, client: Client, scripts: Sequence[AsyncScript], health: BackendHealth
    ) -> None:
        self._client = client
        self._scripts = scripts
        self._health = health

    async def load_scripts(self) -> None:
        """Load every script into Redis (on a Cluster client, into every primary)."""
        with translated("script load"):
            await self._load_scripts()

    async def _load_scripts(self) -> None:
        for script in self._scripts:
            await self._client.script_load(script.script)
        log.info("loaded %d Lua scripts into redis", len(self._scripts))

    async def pipeline(
        self, commands: Sequence[Command], what: str, *, repeatable: bool = True
    ) -> list[Any]:
        """Send ``commands`` in one pipeline; replies in order, the first error raised.

        ``repeatable``: sending the commands twice applies nothing twice, so a broken
        connection is worth one more try on a fresh one (see the module docstring).
        """
        if not commands:
            return []
        try:
            with translated(what):
                replies = await self._pipeline_once(commands, repeatable)
        except BackendUnavailable as e:
            self._health.failed(e.message)
            raise
        self._health.ok()
        return replies

    async def _pipeline_once(self, commands: Sequence[Command], repeatable: bool) -> list[Any]:
        try:
            replies = await self._send(commands)
        except rex.ConnectionError as e:
            if not repeatable:
                raise
            log.debug("redis connection broke (%s); sending once more", e)
            replies = await self._send(commands)
        retry = [i for i, r in enumerate(replies) if isinstance(r, rex.NoScriptError)]
        if retry:
            # Those commands did not run: re-sending them cannot apply anything twice.
            await self._load_scripts()
            for i, reply in zip(retry, await self._send([commands[i] for i in retry]), strict=True):
                replies[i] = reply
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    async def packed(self, data: bytes, replies: int, what: str) -> list[Any]:
        """Send commands already packed in the Redis protocol (``data``, holding ``replies``
        commands) on a standalone client; their replies in order, the first error raised.

        For a command sent often and rarely changed (the hold check): redis-py packs each
        argument anew, ~1 us each. Repeatable only: a broken connection is tried once more.
        """
        try:
            with translated(what):
                try:
                    out = await self._send_packed(data, replies)
                except rex.ConnectionError as e:
                    log.debug("redis connection broke (%s); sending once more", e)
                    out = await self._send_packed(data, replies)
        except BackendUnavailable as e:
            self._health.failed(e.message)
            raise
        self._health.ok()
        return out

    async def _send_packed(self, data: bytes, replies: int) -> list[Any]:
        assert not isinstance(self._client, RedisCluster), "a Cluster routes commands by slot"
        pool = self._client.connection_pool
        conn = await pool.get_connection()  # type: ignore[no-untyped-call]  # (untyped in redis-py)
        try:
            await conn.send_packed_command(data)
            out = [await conn.read_response() for _ in range(replies)]
        except BaseException:
            # Replies may be left unread (cancelled, broken): the connection cannot be reused.
            await conn.disconnect()
            raise
        finally:
            await pool.release(conn)
        return out

    async def _send(self, commands: Sequence[Command]) -> list[Any]:
        pipe = self._client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        replies: list[Any] = await pipe.execute(raise_on_error=False)
        return replies


class OwnedClient:
    """A store on a Redis client it may own: with ``owns_client`` (each store the composition
    root opens runs on a client of its own), :meth:`aclose` closes the client."""

    def __init__(self, client: Client, *, owns_client: bool = False) -> None:
        self._client = client
        self._owns = owns_client

    async def aclose(self) -> None:
        if self._owns:
            await self._client.aclose()
