"""The API served for real (aiohttp test server on loopback) over real Redis and ZooKeeper."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient, TestServer
from kazoo.client import KazooClient

from emq.api import ApiSettings, make_app
from emq.compose import open_config, open_history, open_plans, open_queues, open_replays
from emq.core.interfaces import ConfigStore, HistoryStore, QueueBackend
from emq.core.plans import PlanStore
from emq.core.replays import ReplayStore
from emq.core.settings import Settings

ADMIN = {"Authorization": "Bearer test-admin-token"}


@dataclass
class Api:
    client: TestClient
    queues: QueueBackend
    config: ConfigStore
    settings: Settings
    history: HistoryStore | None = None

    async def tenant(self, name: str) -> dict[str, str]:
        """Create a tenant; returns the headers that authenticate as it."""
        r = await self.client.post("/v1/tenants", json={"tenant": name}, headers=ADMIN)
        assert r.status == 201, await r.text()
        return {"Authorization": f"Bearer {(await r.json())['token']}"}

    async def topic(self, tenant: str, topic: str, qps: int, **extra: Any) -> dict[str, Any]:
        r = await self.client.post(
            f"/v1/tenants/{tenant}/topics",
            json={"topic": topic, "qps": qps, **extra},
            headers=ADMIN,
        )
        assert r.status == 201, await r.text()
        return dict(await r.json())


async def serve(
    settings: Settings,
    queues: QueueBackend,
    config: ConfigStore,
    api: ApiSettings | None = None,
    history: HistoryStore | None = None,
    replays: ReplayStore | None = None,
    plans: PlanStore | None = None,
) -> TestClient:
    app = make_app(
        settings,
        api or ApiSettings(),
        config,
        queues,
        history,
        replays=replays,
        plan_store=plans,
    )
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[Api]:
    queues = await open_queues(settings)
    config = await open_config(settings)
    history = open_history(settings)
    replays = open_replays(settings)
    plans = open_plans(settings)
    client = await serve(
        settings, queues, config, ApiSettings(history_interval_s=1), history, replays, plans
    )
    yield Api(client, queues, config, settings, history)
    await client.close()
    await replays.aclose()
    await plans.aclose()
    await history.aclose()
    await config.aclose()
    await queues.aclose()


@pytest.fixture
def snapshot(redis_client: aioredis.Redis, zk_client: KazooClient, test_id: str):  # type: ignore[no-untyped-def]
    """A callable returning everything this test stored: Redis keys with values, ZooKeeper tree."""

    async def take() -> tuple[dict[bytes, bytes], dict[str, bytes]]:
        # Telemetry (history rows, rates) is written on a timer, not by the request under test.
        telemetry = {f"{test_id}:history".encode(), f"{test_id}:rates".encode()}
        keys = sorted([k async for k in redis_client.scan_iter(match=f"{test_id}:*")])
        keys = [k for k in keys if k not in telemetry]
        values = {k: await redis_client.dump(k) for k in keys}
        tree: dict[str, bytes] = {}

        def walk(path: str) -> None:
            data, _ = zk_client.get(path)
            tree[path] = data
            for child in zk_client.get_children(path):
                walk(f"{path.rstrip('/')}/{child}")

        walk("/")
        return values, tree

    return take
