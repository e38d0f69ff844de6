"""``EMQ_DURABILITY`` (issue 11, item 9) on this test's own Redis: ``fsync`` refuses a server
that does not fsync every write, ``replica`` answers 503 when no replica acknowledged a put and
202 once one does (a replica started by ``deploy/redis.sh --replicaof``)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from emq.compose import open_queues
from emq.core.errors import BackendUnavailable, ConfigError
from emq.core.interfaces import PutItem
from emq.core.model import GroupRef, Namespace, Priority, TopicRef
from emq.core.settings import Durability, Settings
from emq.stack import Service, free_port, local_stack
from tests.conftest import RestartableRedis

QUEUE = GroupRef(TopicRef(Namespace.ONLINE, "acme", "orders"), 0).queue(Priority.MEDIUM)


@pytest.fixture
def redis_url(own_redis: RestartableRedis) -> str:
    return own_redis.url


@pytest.fixture
def replica(own_redis: RestartableRedis, tmp_path: Path) -> Iterator[Service]:
    primary_port = str(own_redis.service.port)
    service = Service(
        "redis", "redis.sh", tmp_path / "replica", free_port(),
        ("--replicaof", "127.0.0.1", primary_port),
    )  # fmt: skip
    yield service
    service.stop()


def _item(n: int, key: str | None = None) -> PutItem:
    return PutItem(QUEUE, f"job-{n}", b"payload", idempotency_key=key)


async def test_fsync_refuses_a_server_that_fsyncs_every_second(
    settings: Settings, redis_client: aioredis.Redis
) -> None:
    fsync = dataclasses.replace(settings, durability=Durability.FSYNC)
    with pytest.raises(ConfigError, match=r"appendfsync always.*appendfsync everysec"):
        await open_queues(fsync)
    await redis_client.config_set("appendfsync", "always")
    queues = await open_queues(fsync)
    await queues.put([_item(1)])
    await queues.aclose()


async def test_replica_mode_answers_unavailable_until_a_replica_acknowledges(
    settings: Settings, redis_client: aioredis.Redis, replica: Service
) -> None:
    wait = dataclasses.replace(settings, durability=Durability.REPLICA, durability_timeout_ms=100)
    queues = await open_queues(wait)
    try:
        with pytest.raises(BackendUnavailable, match="acknowledged by 0 of 1 replicas"):
            await queues.put([_item(1, "k1")])
        replica.start()
        for _ in range(200):  # the replica's first sync
            info = await redis_client.info("replication")
            if info.get("connected_slaves") == 1 and "state=online" in str(info.get("slave0")):
                break
            await asyncio.sleep(0.05)
        (again,) = await queues.put([_item(2, "k1")])
        assert again.duplicate, "the retry with the same key was stored twice"
        (stored,) = await queues.put([_item(3)])
        assert stored.offset is not None and not stored.duplicate
    finally:
        await queues.aclose()


def test_the_local_stack_starts_redis_with_fsync_always_for_fsync_durability() -> None:
    redis, _ = local_stack(Settings(durability=Durability.FSYNC))
    assert redis.extra_args == ("--appendfsync", "always")
    plain, _ = local_stack(Settings())
    assert plain.extra_args == ()
