"""The composition root: the one place that picks concrete backends for the settings."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from adapters import zk
from adapters.redis_changes import RedisChangeLog
from adapters.redis_cluster import cluster_from_url
from adapters.redis_conn import client_options
from adapters.redis_demand import RedisDemandBoard
from adapters.redis_endpoints import RedisEndpointBoard
from adapters.redis_history import RedisHistoryStore
from adapters.redis_jobs import RedisJobStore
from adapters.redis_packing import packed_by_hiredis
from adapters.redis_plans import RedisPlanStore
from adapters.redis_queue import RedisQueueBackend
from adapters.redis_queue import connect as connect_redis
from adapters.redis_replay import RedisReplayStore
from adapters.redis_schedules import RedisScheduleStore
from adapters.redis_subscriptions import RedisSubscriptionStore
from adapters.redis_transactions import RedisTransactionStore
from adapters.zk_config import connect as connect_zk
from allocator.fleet import join as join_fleet
from allocator.routes import RouteWatch
from allocator.settings import FleetSettings
from allocator.view import ZkFleetView
from emq.core.endpoints import EndpointBoard
from emq.core.errors import ConfigError
from emq.core.interfaces import AssignmentSource, ConfigStore, FleetView, HistoryStore, QueueBackend
from emq.core.jobs import JobStore
from emq.core.model import Namespace
from emq.core.naming import RedisKeys
from emq.core.plans import PlanStore
from emq.core.rollouts import RolloutStore
from emq.core.settings import Durability, Settings
from emq.core.signals import SignalRoutes


async def open_queues(settings: Settings, routes: SignalRoutes | None = None) -> QueueBackend:
    """The Redis queues, with what ``EMQ_DURABILITY`` asks of them: ``replica`` makes each put
    wait for replicas; ``fsync`` refuses a server that does not fsync every write. ``routes``
    (see :func:`open_signal_routes`) address the hints of the puts to the groups' owners."""
    wait: dict[str, Any] = {"addressed": settings.signal_routes}
    if routes is not None and settings.signal_routes:
        wait["routes"] = routes
    if settings.durability is Durability.REPLICA:
        wait = {
            "wait_replicas": settings.durability_replicas,
            "wait_timeout_ms": settings.durability_timeout_ms,
        }
    queues = await connect_redis(
        settings.redis_url,
        cluster=settings.redis_cluster,
        prefix=settings.redis_key_prefix,
        **wait,
    )
    try:
        if settings.durability is Durability.FSYNC:
            await _require_fsync_always(queues)
    except BaseException:
        await queues.aclose()
        raise
    return queues


async def _require_fsync_always(queues: RedisQueueBackend) -> None:
    """``EMQ_DURABILITY=fsync``: refuse to run unless every Redis primary fsyncs each write.

    Checked once at start-up (CONFIG GET): an operator who turns it off later is not caught.
    A server that refuses CONFIG (some managed offerings) cannot be checked, so it is refused.
    """
    try:
        found = await queues.persistence()
    except ConfigError as e:
        raise ConfigError(f"EMQ_DURABILITY=fsync: {e}") from e
    for node, appendonly, appendfsync in found:
        if (appendonly, appendfsync) != ("yes", "always"):
            raise ConfigError(
                f"EMQ_DURABILITY=fsync needs Redis with appendonly yes and appendfsync always; "
                f"{node} has appendonly {appendonly} and appendfsync {appendfsync}"
            )


def zk_client_factory(settings: Settings) -> zk.ClientFactory:
    """How every EMQ process makes its ZooKeeper clients: with ``EMQ_ZK_AUTH`` set, ones that
    authenticate with the digest credentials (and the previous ones while rotating) and create
    every node with ACLs granting all to those identities only (see :mod:`adapters.zk`)."""
    return zk.client_factory(settings.zk_credentials())


def zk_acl(settings: Settings) -> list[object]:
    """The ACL of EMQ's nodes under ``EMQ_ZK_AUTH`` (and ``EMQ_ZK_PREVIOUS_AUTH``)."""
    return zk.digest_acl(settings.zk_credentials())


async def open_config(settings: Settings) -> ConfigStore:
    return await connect_zk(
        settings.zk_hosts,
        root=settings.zk_root,
        session_timeout_s=settings.zk_session_timeout_s,
        new_client=zk_client_factory(settings),
    )


async def open_fleet(
    settings: Settings, fleet: FleetSettings, worker_id: str, config: ConfigStore
) -> AssignmentSource:
    """Join the namespace's fleet as ``worker_id`` (its own ZooKeeper session)."""
    return await join_fleet(
        settings.zk_hosts,
        root=settings.zk_root,
        namespace=settings.namespace,
        worker_id=worker_id,
        config=config,
        settings=fleet,
        session_timeout_s=settings.zk_session_timeout_s,
        new_client=zk_client_factory(settings),
    )


def open_signal_routes(settings: Settings) -> tuple[SignalRoutes, RouteWatch | None]:
    """Who owns which group, followed on ZooKeeper in the background (every namespace), for
    the hints of a process that writes jobs (the API); no watch with ``EMQ_SIGNAL_ROUTES=false``.
    The caller closes the watch."""
    routes = SignalRoutes()
    if not settings.signal_routes:
        return routes, None
    watch = RouteWatch(
        settings.zk_hosts,
        list(Namespace),
        routes,
        root=settings.zk_root,
        session_timeout_s=settings.zk_session_timeout_s,
        new_client=zk_client_factory(settings),
    )
    watch.start()
    return routes, watch


def open_fleet_view(settings: Settings) -> FleetView:
    """The fleet's members and assignment on ZooKeeper (connects on first use)."""
    return ZkFleetView(
        settings.zk_hosts,
        root=settings.zk_root,
        session_timeout_s=settings.zk_session_timeout_s,
        new_client=zk_client_factory(settings),
    )


def _own_redis(settings: Settings) -> aioredis.Redis | aioredis.RedisCluster:
    """A Redis client of its own for one store (each store closes the client it owns)."""
    options = client_options(settings.redis_cluster)
    if settings.redis_cluster:
        return cluster_from_url(settings.redis_url, **options)
    return packed_by_hiredis(aioredis.Redis.from_url(settings.redis_url, **options))


def open_history(settings: Settings) -> HistoryStore:
    keys = RedisKeys(settings.redis_key_prefix)
    return RedisHistoryStore(_own_redis(settings), keys, owns_client=True)


def open_endpoint_board(settings: Settings) -> EndpointBoard:
    """Where workers post their endpoints' statuses and the API reads them."""
    keys = RedisKeys(settings.redis_key_prefix)
    return RedisEndpointBoard(_own_redis(settings), keys, owns_client=True)


def open_plans(settings: Settings) -> PlanStore:
    """The latest capacity plans the API was given (``GET /v1/plans/latest``)."""
    options = client_options(settings.redis_cluster)
    client = (
        cluster_from_url(settings.redis_url, **options)
        if settings.redis_cluster
        else aioredis.Redis.from_url(settings.redis_url, **options)
    )
    return RedisPlanStore(client, RedisKeys(settings.redis_key_prefix), owns_client=True)


def open_rollouts(settings: Settings) -> RolloutStore:
    """Plan rollouts (``/v1/rollouts``: what ``emq plan apply --canary`` is doing)."""
    from adapters.redis_rollouts import RedisRolloutStore

    return RedisRolloutStore(
        _own_redis(settings), RedisKeys(settings.redis_key_prefix), owns_client=True
    )


def open_changes(settings: Settings) -> RedisChangeLog:
    """The change log of quotas, splits, weights and caps (kept as ``EMQ_CHANGES_RETENTION_S``
    and ``EMQ_CHANGES_MAX_ENTRIES`` say)."""
    return RedisChangeLog(
        _own_redis(settings),
        RedisKeys(settings.redis_key_prefix),
        retention_s=settings.changes_retention_s,
        max_entries=settings.changes_max_entries,
        owns_client=True,
    )


def open_jobs(settings: Settings) -> JobStore:
    """Job records and group snapshots (``EMQ_JOB_RECORD_TTL_S``)."""
    keys = RedisKeys(settings.redis_key_prefix)
    return RedisJobStore(
        _own_redis(settings),
        keys,
        ttl_s=settings.job_record_ttl_s,
        attempt_budget_bytes=settings.attempt_log_max_bytes,
        owns_client=True,
    )


def open_replays(settings: Settings) -> RedisReplayStore:
    """DLQ replays and their progress (issue 16)."""
    keys = RedisKeys(settings.redis_key_prefix)
    return RedisReplayStore(_own_redis(settings), keys, owns_client=True)


def open_subscriptions(settings: Settings) -> RedisSubscriptionStore:
    """Topics' subscriptions and their events' records (issue 28; records kept an hour at
    least, and as long as job records)."""
    keys = RedisKeys(settings.redis_key_prefix)
    ttl_s = max(3600, settings.job_record_ttl_s)
    return RedisSubscriptionStore(_own_redis(settings), keys, event_ttl_s=ttl_s, owns_client=True)


def open_demand(settings: Settings) -> RedisDemandBoard:
    """The tenant quota's demand board (worker.tenant_quota)."""
    keys = RedisKeys(settings.redis_key_prefix)
    return RedisDemandBoard(_own_redis(settings), keys, owns_client=True)


def open_transactions(settings: Settings) -> RedisTransactionStore:
    """Transactions and their prepared jobs (issue 30), as durable as a put
    (``EMQ_DURABILITY=replica``: each write waits for the replicas)."""
    wait: dict[str, Any] = {}
    if settings.durability is Durability.REPLICA:
        wait = {
            "wait_replicas": settings.durability_replicas,
            "wait_timeout_ms": settings.durability_timeout_ms,
        }
    keys = RedisKeys(settings.redis_key_prefix)
    return RedisTransactionStore(_own_redis(settings), keys, owns_client=True, **wait)
def open_schedules(settings: Settings) -> RedisScheduleStore:
    """Schedules, their cursors and the due index (issue 28)."""
    keys = RedisKeys(settings.redis_key_prefix)
    return RedisScheduleStore(_own_redis(settings), keys, owns_client=True)
