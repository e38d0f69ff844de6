"""Schedules through the HTTP API on real Redis and ZooKeeper, with a firer running: CRUD,
422s naming the field (and changing nothing), the last tick's job and state, the next ticks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from emq.api import ApiSettings, make_app
from emq.compose import open_config, open_jobs, open_queues, open_schedules
from emq.core.settings import Settings
from emq.scheduler.firer import Firer
from emq.scheduler.settings import SchedulerSettings
from tests.api.conftest import ADMIN

pytestmark = pytest.mark.integration

PATH = "/v1/tenants/acme/topics/ticks/schedules"
JOB = {"url": "http://127.0.0.1:9/hook", "method": "post", "headers": {"X-A": "1"}, "body": "hi"}


@pytest.fixture
async def rig(settings: Settings) -> AsyncIterator[tuple[TestClient, Firer]]:
    queues = await open_queues(settings)
    config = await open_config(settings)
    jobs = open_jobs(settings)
    store = open_schedules(settings)
    app = make_app(settings, ApiSettings(), config, queues, jobs=jobs, schedules=store)
    client = TestClient(TestServer(app))
    await client.start_server()
    firer = Firer(store, config, queues, SchedulerSettings(poll_s=0.05, lookahead_s=0))
    yield client, firer
    await client.close()
    for closing in (store, jobs, config, queues):
        await closing.aclose()


async def _ok(response: Any, status: int = 200) -> dict[str, Any]:
    assert response.status == status, await response.text()
    return dict(await response.json())


async def test_schedule_crud_and_firing(rig: tuple[TestClient, Firer]) -> None:
    client, firer = rig
    token = (await _ok(await client.post("/v1/tenants", json={"tenant": "acme"}, headers=ADMIN),
                       201))["token"]  # fmt: skip
    tenant = {"Authorization": f"Bearer {token}"}
    topic = {"topic": "ticks", "qps": 10}
    await _ok(await client.post("/v1/tenants/acme/topics", json=topic, headers=ADMIN), 201)

    # bad input: one 422 naming the field, nothing stored
    for body, field in (
        ({"cron": "61 * * * *", "job": JOB}, "cron"),
        ({"cron": "* * * * *", "timezone": "Mars/Base", "job": JOB}, "timezone"),
        ({"cron": "* * * * *", "job": {"url": "ftp://x"}}, "job.url"),
        ({"cron": "* * * * *", "job": {**JOB, "idempotency_key": "k"}}, "job.idempotency_key"),
        ({"cron": "* * * * *", "job": JOB, "catch_up": "never"}, "catch_up"),
        ({"cron": "* * * * *", "job": JOB, "start_at": 100, "end_at": 50}, "end_at"),
    ):
        r = await client.post(PATH, json=body, headers=tenant)
        assert r.status == 422, (body, await r.text())
        assert (await r.json())["error"]["field"] == field
    assert (await _ok(await client.get(PATH, headers=tenant)))["schedules"] == []

    every_second = {"id": "beat", "cron": "* * * * * *", "timezone": "Europe/Paris", "job": JOB}
    created = await _ok(await client.post(PATH, json=every_second, headers=tenant), 201)
    assert created["job"]["method"] == "POST" and len(created["next_ticks"]) == 5
    assert created["last_tick"] is None and created["fired"] == 0
    r = await client.post(PATH, json=every_second, headers=tenant)
    assert r.status == 409

    stop = asyncio.Event()
    task = asyncio.create_task(firer.run(stop))
    shown: dict[str, Any] = {}
    for _ in range(100):
        await asyncio.sleep(0.1)
        shown = await _ok(await client.get(PATH + "/beat?next=3", headers=tenant))
        if shown["fired"] >= 2:
            break
    stop.set()
    await task
    last = shown["last_tick"]
    assert shown["fired"] >= 2 and last["job_id"].startswith("msg_")
    assert last["job_state"] == "queued"  # no worker runs here
    assert last["local"].endswith(("+01:00", "+02:00")) and 0 <= last["lag_s"] < 5  # (no lookahead)
    assert len(shown["next_ticks"]) == 3 and shown["next_ticks"][0]["at"] > last["at"]
    status = await _ok(await client.get(f"/v1/tenants/acme/topics/ticks/jobs/{last['job_id']}",
                                        headers=tenant))  # fmt: skip
    assert status["id"] == last["job_id"]

    paused = await _ok(await client.patch(PATH + "/beat", json={"paused": True}, headers=tenant))
    assert paused["paused"] and paused["next_tick"] is None and paused["next_ticks"] == []
    r = await client.patch(PATH + "/beat", json={"cron": "nope"}, headers=tenant)
    assert r.status == 422 and (await r.json())["error"]["field"] == "cron"
    resumed = await _ok(await client.patch(PATH + "/beat", json={"paused": False, "cron":
                                           "0 9 * * 1"}, headers=tenant))  # fmt: skip
    assert resumed["next_tick"]["local"].startswith(resumed["next_ticks"][0]["local"][:10])
    assert "T09:00:00" in resumed["next_tick"]["local"]

    other = await _ok(await client.post("/v1/tenants", json={"tenant": "other"}, headers=ADMIN),
                      201)  # fmt: skip
    r = await client.get(PATH + "/beat", headers={"Authorization": f"Bearer {other['token']}"})
    assert r.status == 404
    assert (await _ok(await client.delete(PATH + "/beat", headers=tenant)))["deleted"]
    assert (await client.get(PATH + "/beat", headers=tenant)).status == 404
