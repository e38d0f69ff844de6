"""Bad input gets one clear 4xx with a JSON error, and writes nothing (Redis and ZooKeeper
contents are compared before and after every rejected request)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from emq.api import ApiSettings
from emq.compose import open_config, open_queues
from emq.core.settings import Settings
from emq.stack import Service, free_port
from tests.api.conftest import ADMIN, Api, serve

TOPIC = "/v1/tenants/acme/topics/orders"
JOBS = TOPIC + "/jobs"
JOB = {"url": "https://example.com/hook"}


@pytest.fixture
async def seeded(api: Api) -> AsyncIterator[tuple[Api, dict[str, str]]]:
    acme = await api.tenant("acme")
    await api.tenant("globex")
    await api.topic("acme", "orders", 100, max_backlog=50)
    await api.client.post(JOBS, json={"jobs": [JOB] * 10}, headers=acme)
    yield api, acme


async def _rejected(
    api: Api,
    snapshot: Any,
    method: str,
    path: str,
    status: int,
    code: str,
    field: str | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    before = await snapshot()
    r = await api.client.request(method, path, **kwargs)
    assert r.status == status, await r.text()
    assert r.content_type == "application/json"
    error = (await r.json())["error"]
    assert error["code"] == code
    assert error["message"]
    if field is not None:
        assert error["field"] == field
    assert await snapshot() == before, "a rejected request changed stored data"
    return dict(error)


# ------------------------------------------------------------------ malformed and invalid jobs

BAD_JOBS = [
    (JOB | {"url": "ftp://example.com/x"}, "url"),
    (JOB | {"url": "http://"}, "url"),
    ({"method": "POST"}, "url"),
    (JOB | {"priority": "urgent"}, "priority"),
    (JOB | {"delay_s": -1}, "delay_s"),
    (JOB | {"headers": {"X-A": "a\r\nInjected: 1"}}, "headers.X-A"),
    (JOB | {"headers": {"X-A": "line\nbreak"}}, "headers.X-A"),
    (JOB | {"headers": {"X-A": 5}}, "headers.X-A"),
    (JOB | {"headers": {"webhook-id": "forged"}}, "headers.webhook-id"),
    (JOB | {"method": "TRACE"}, "method"),
    (JOB | {"surprise": 1}, "surprise"),
]


@pytest.mark.parametrize(("job", "field"), BAD_JOBS)
async def test_invalid_job_is_422_naming_the_field(
    seeded: tuple[Api, dict[str, str]], snapshot: Any, job: dict[str, Any], field: str
) -> None:
    api, acme = seeded
    await _rejected(api, snapshot, "POST", JOBS, 422, "invalid", field, json=job, headers=acme)


@pytest.mark.parametrize(("job", "field"), BAD_JOBS)
async def test_one_bad_job_rejects_the_whole_batch(
    seeded: tuple[Api, dict[str, str]], snapshot: Any, job: dict[str, Any], field: str
) -> None:
    api, acme = seeded
    batch = {"jobs": [JOB, JOB, job]}
    await _rejected(
        api, snapshot, "POST", JOBS, 422, "invalid", f"jobs[2].{field}", json=batch, headers=acme
    )


@pytest.mark.parametrize(
    "data",
    [b"{not json", b"", b"\xff\xfe", b'{"url": "https://e.com"'],
    ids=["syntax", "empty", "binary", "cut"],
)
async def test_malformed_json_is_400(
    seeded: tuple[Api, dict[str, str]], snapshot: Any, data: bytes
) -> None:
    api, acme = seeded
    headers = acme | {"Content-Type": "application/json"}
    await _rejected(api, snapshot, "POST", JOBS, 400, "malformed", data=data, headers=headers)


async def test_non_object_bodies_are_refused(
    seeded: tuple[Api, dict[str, str]], snapshot: Any
) -> None:
    api, acme = seeded
    await _rejected(
        api, snapshot, "POST", JOBS, 422, "invalid", json=["https://e.com"], headers=acme
    )
    await _rejected(api, snapshot, "POST", "/v1/tenants", 400, "malformed", json=[1], headers=ADMIN)
    await _rejected(
        api, snapshot, "POST", JOBS, 422, "invalid", "jobs", json={"jobs": []}, headers=acme
    )
    await _rejected(
        api, snapshot, "POST", JOBS, 422, "invalid", "jobs", json={"jobs": {}}, headers=acme
    )


# ------------------------------------------------------------------ sizes


async def test_oversize_job_is_413(seeded: tuple[Api, dict[str, str]], snapshot: Any) -> None:
    api, acme = seeded
    big = JOB | {"body": "x" * (256 * 1024 + 1)}
    await _rejected(api, snapshot, "POST", JOBS, 413, "too_large", "body", json=big, headers=acme)


async def test_batch_over_1000_jobs_is_413(
    seeded: tuple[Api, dict[str, str]], snapshot: Any
) -> None:
    api, acme = seeded
    await _rejected(
        api,
        snapshot,
        "POST",
        JOBS,
        413,
        "too_large",
        "jobs",
        json={"jobs": [JOB] * 1001},
        headers=acme,
    )


async def test_oversize_request_is_413(api: Api, snapshot: Any) -> None:
    small = await serve(
        api.settings, api.queues, api.config, ApiSettings(max_request_bytes=64 * 1024)
    )
    try:
        other = Api(small, api.queues, api.config, api.settings)
        acme = await other.tenant("acme")
        await other.topic("acme", "orders", 100)
        jobs = {"jobs": [JOB | {"body": "x" * 1000}] * 100}
        await _rejected(
            other, snapshot, "POST", JOBS, 413, "too_large", data=json.dumps(jobs), headers=acme
        )
    finally:
        await small.close()


# ------------------------------------------------------------------ who may do what


async def test_missing_or_garbage_token_is_401(
    seeded: tuple[Api, dict[str, str]], snapshot: Any
) -> None:
    api, _ = seeded
    for headers in (
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic dXNlcjpwdw=="},
        {"Authorization": "Bearer garbage"},
        {"Authorization": "Bearer acme.wrong-secret"},
        {"Authorization": "Bearer nobody.secret"},
    ):
        await _rejected(api, snapshot, "POST", JOBS, 401, "unauthorized", json=JOB, headers=headers)
        await _rejected(
            api,
            snapshot,
            "POST",
            "/v1/tenants",
            401,
            "unauthorized",
            json={"tenant": "x"},
            headers=headers,
        )


async def test_tenant_token_on_admin_routes_is_403(
    seeded: tuple[Api, dict[str, str]], snapshot: Any
) -> None:
    api, acme = seeded
    await _rejected(
        api, snapshot, "POST", "/v1/tenants", 403, "forbidden", json={"tenant": "x"}, headers=acme
    )
    await _rejected(api, snapshot, "GET", "/v1/tenants", 403, "forbidden", headers=acme)
    await _rejected(
        api,
        snapshot,
        "POST",
        "/v1/tenants/acme/topics",
        403,
        "forbidden",
        json={"topic": "t", "qps": 1},
        headers=acme,
    )
    await _rejected(
        api, snapshot, "PATCH", TOPIC, 403, "forbidden", json={"qps": 1000}, headers=acme
    )


async def test_another_tenants_topic_is_404(
    seeded: tuple[Api, dict[str, str]], snapshot: Any
) -> None:
    api, acme = seeded
    await api.topic("globex", "orders", 100)
    for method, path in [
        ("POST", "/v1/tenants/globex/topics/orders/jobs"),
        ("GET", "/v1/tenants/globex/topics/orders"),
        ("GET", "/v1/tenants/globex/topics/orders/dlq"),
        ("POST", "/v1/tenants/globex/topics/orders/dlq/replay"),
    ]:
        await _rejected(api, snapshot, method, path, 404, "not_found", json=JOB, headers=acme)


async def test_unknown_tenant_topic_and_route_are_404(
    seeded: tuple[Api, dict[str, str]], snapshot: Any
) -> None:
    api, acme = seeded
    await _rejected(
        api,
        snapshot,
        "POST",
        "/v1/tenants/acme/topics/nope/jobs",
        404,
        "not_found",
        json=JOB,
        headers=acme,
    )
    await _rejected(
        api,
        snapshot,
        "POST",
        "/v1/tenants/nope/topics/x/jobs",
        404,
        "not_found",
        json=JOB,
        headers=ADMIN,
    )
    await _rejected(
        api,
        snapshot,
        "POST",
        "/v1/tenants/nope/topics",
        404,
        "not_found",
        json={"topic": "t", "qps": 5},
        headers=ADMIN,
    )
    await _rejected(api, snapshot, "GET", "/v1/nothing-here", 404, "not_found")
    await _rejected(api, snapshot, "DELETE", TOPIC, 405, "method_not_allowed", headers=ADMIN)


# ------------------------------------------------------------------ admin input


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/tenants", {"tenant": "a/b"}, "tenant"),
        ("/v1/tenants", {"tenant": "ok", "extra": 1}, "extra"),
        ("/v1/tenants/acme/topics", {"topic": "t", "qps": 0}, "qps"),
        ("/v1/tenants/acme/topics", {"topic": "t", "qps": "100"}, "qps"),
        ("/v1/tenants/acme/topics", {"topic": "t{1}", "qps": 100}, "topic"),
        ("/v1/tenants/acme/topics", {"topic": "t", "qps": 100, "namespace": "prod"}, "namespace"),
        (
            "/v1/tenants/acme/topics",
            {"topic": "t", "qps": 100, "retry": {"max_attempts": 0}},
            "retry.max_attempts",
        ),
        (
            "/v1/tenants/acme/topics",
            {"topic": "t", "qps": 100, "priority_mode": "fair"},
            "priority_mode",
        ),
    ],
)
async def test_invalid_admin_input_is_422(
    seeded: tuple[Api, dict[str, str]], snapshot: Any, path: str, body: dict[str, Any], field: str
) -> None:
    api, _ = seeded
    await _rejected(api, snapshot, "POST", path, 422, "invalid", field, json=body, headers=ADMIN)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"qps": -5}, "qps"),
        ({"paused": "yes"}, "paused"),
        ({"colour": "red"}, "colour"),
        ({}, None),
    ],
)
async def test_invalid_patch_is_422(
    seeded: tuple[Api, dict[str, str]], snapshot: Any, body: dict[str, Any], field: str | None
) -> None:
    api, _ = seeded
    await _rejected(api, snapshot, "PATCH", TOPIC, 422, "invalid", field, json=body, headers=ADMIN)


async def test_duplicate_tenant_and_topic_are_409(
    seeded: tuple[Api, dict[str, str]], snapshot: Any
) -> None:
    api, _ = seeded
    await _rejected(
        api,
        snapshot,
        "POST",
        "/v1/tenants",
        409,
        "conflict",
        json={"tenant": "acme"},
        headers=ADMIN,
    )
    await _rejected(
        api,
        snapshot,
        "POST",
        "/v1/tenants/acme/topics",
        409,
        "conflict",
        json={"topic": "orders", "qps": 5},
        headers=ADMIN,
    )


# ------------------------------------------------------------------ backlog and outages


async def test_backlog_above_max_is_429_with_retry_after(
    seeded: tuple[Api, dict[str, str]], snapshot: Any
) -> None:
    api, acme = seeded  # max_backlog 50, 10 queued
    ok = await api.client.post(JOBS, json={"jobs": [JOB] * 40}, headers=acme)
    assert ok.status == 202
    before = await snapshot()
    r = await api.client.post(JOBS, json=JOB, headers=acme)
    assert r.status == 429
    assert int(r.headers["Retry-After"]) >= 1
    assert (await r.json())["error"]["code"] == "backlog_full"
    assert await snapshot() == before


@pytest.fixture
async def own_stack(tmp_path: Path) -> AsyncIterator[tuple[Api, Service, Service]]:
    """An API over a Redis and a ZooKeeper of this test's own, so the test may stop them."""
    redis = Service("redis", "redis.sh", tmp_path / "redis", free_port())
    zk = Service("zookeeper", "zookeeper.sh", tmp_path / "zk", free_port(), ("500",))
    redis.start()
    zk.start()
    settings = Settings(
        redis_url=f"redis://{redis.address}/0",
        zk_hosts=zk.address,
        admin_token="test-admin-token",
        zk_session_timeout_s=4.0,
    )
    queues = await open_queues(settings)
    config = await open_config(settings)
    client = await serve(settings, queues, config)
    try:
        yield Api(client, queues, config, settings), redis, zk
    finally:
        await client.close()
        await config.aclose()
        await queues.aclose()
        zk.stop()
        redis.stop()


async def _error_code(response: Any) -> str:
    assert response.content_type == "application/json"
    return str((await response.json())["error"]["code"])


async def test_redis_outage_is_503_then_recovers_with_nothing_lost(
    own_stack: tuple[Api, Service, Service],
) -> None:
    api, redis, _ = own_stack
    acme = await api.tenant("acme")
    await api.topic("acme", "orders", 100)
    assert (await api.client.post(JOBS, json=JOB, headers=acme)).status == 202
    redis.stop()
    down = await api.client.post(JOBS, json=JOB, headers=acme)
    assert down.status == 503 and await _error_code(down) == "unavailable"
    shown = await api.client.get(TOPIC, headers=acme)
    assert shown.status == 503 and await _error_code(shown) == "unavailable"
    health = await api.client.get("/healthz")
    assert health.status == 503
    assert (await health.json())["redis"].startswith("unavailable")
    redis.start()  # same data directory: the AOF brings the accepted job back
    assert (await api.client.post(JOBS, json=JOB, headers=acme)).status == 202
    shown = await api.client.get(TOPIC, headers=acme)
    assert (await shown.json())["backlog"]["medium"] == 2


async def test_zookeeper_outage_is_503_for_config_but_enqueue_goes_on(
    own_stack: tuple[Api, Service, Service],
) -> None:
    api, _, zk = own_stack
    acme = await api.tenant("acme")
    await api.topic("acme", "orders", 100)
    zk.stop()
    created = await api.client.post("/v1/tenants", json={"tenant": "late"}, headers=ADMIN)
    assert created.status == 503 and await _error_code(created) == "unavailable"
    patched = await api.client.patch(TOPIC, json={"qps": 5}, headers=ADMIN)
    assert patched.status == 503
    health = await api.client.get("/healthz")
    assert health.status == 503
    assert (await health.json())["zookeeper"].startswith("unavailable")
    # Tenants and topics are cached: accepting jobs does not depend on ZooKeeper being up.
    assert (await api.client.post(JOBS, json=JOB, headers=acme)).status == 202
