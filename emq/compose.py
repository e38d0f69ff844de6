"""The composition root: the one place that picks concrete backends for the settings."""

from __future__ import annotations

import redis.asyncio as aioredis

from adapters.redis_history import RedisHistoryStore
from adapters.redis_queue import client_options
from adapters.redis_queue import connect as connect_redis
from adapters.zk_config import connect as connect_zk
from allocator.fleet import join as join_fleet
from allocator.settings import FleetSettings
from allocator.view import ZkFleetView
from emq.interfaces import AssignmentSource, ConfigStore, FleetView, HistoryStore, QueueBackend
from emq.naming import RedisKeys
from emq.settings import Settings


async def open_queues(settings: Settings) -> QueueBackend:
    return await connect_redis(
        settings.redis_url, cluster=settings.redis_cluster, prefix=settings.redis_key_prefix
    )


async def open_config(settings: Settings) -> ConfigStore:
    return await connect_zk(
        settings.zk_hosts, root=settings.zk_root, session_timeout_s=settings.zk_session_timeout_s
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
    )


def open_fleet_view(settings: Settings) -> FleetView:
    """The fleet's members and assignment on ZooKeeper (connects on first use)."""
    return ZkFleetView(
        settings.zk_hosts, root=settings.zk_root, session_timeout_s=settings.zk_session_timeout_s
    )


def open_history(settings: Settings) -> HistoryStore:
    options = client_options(settings.redis_cluster)
    client = (
        aioredis.RedisCluster.from_url(settings.redis_url, **options)
        if settings.redis_cluster
        else aioredis.Redis.from_url(settings.redis_url, **options)
    )
    return RedisHistoryStore(client, RedisKeys(settings.redis_key_prefix), owns_client=True)
