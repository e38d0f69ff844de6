"""The test servers are real, and each test's slice of them is isolated."""

from __future__ import annotations

import redis.asyncio as aioredis
from kazoo.client import KazooClient

from emq.core.naming import RedisKeys
from emq.core.settings import Settings
from emq.stack import Service


async def test_redis_is_real_with_aof(redis_client: aioredis.Redis) -> None:
    info = await redis_client.info("server")
    assert int(info["redis_version"].split(".")[0]) >= 7
    assert await redis_client.config_get("appendonly") == {"appendonly": "yes"}


async def test_key_prefix_isolates_tests(
    redis_client: aioredis.Redis, settings: Settings, test_id: str
) -> None:
    assert settings.redis_key_prefix == test_id
    keys = RedisKeys(settings.redis_key_prefix)
    await redis_client.set(keys.ready(), "1")
    assert [k async for k in redis_client.scan_iter(match=f"{test_id}:*")] == [
        keys.ready().encode()
    ]


def test_zookeeper_chroot_isolates_tests(
    zk_client: KazooClient, zk_server: Service, test_id: str
) -> None:
    zk_client.ensure_path("/emq/online/running")
    root = KazooClient(hosts=zk_server.address)
    root.start(timeout=10)
    try:
        assert root.exists(f"/{test_id}/emq/online/running")
        assert root.exists("/emq") is None
    finally:
        root.stop()
        root.close()


def test_server_logs_are_at_hand(redis_server: Service, zk_server: Service) -> None:
    # Whole logs: by now other tests may have pushed the start-up lines out of a tail.
    assert "Ready to accept connections" in redis_server.log_tail(10**9)
    assert "binding to port" in zk_server.log_tail(10**9)
    assert redis_server.log_tail(5).count("\n") <= 4
