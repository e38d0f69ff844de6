"""The change log end to end: real Redis and ZooKeeper, the API on loopback, the CLI as a
subprocess and ``emq plan apply``: every route's quota change is recorded with who, route,
before, after and why; a revert restores the value and is recorded; a stale revert is 409; bad
input is one 4xx with a JSON body and changes nothing."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from emq.api import ApiSettings, make_app
from emq.api.app import API_KEY
from emq.cli.main import main
from emq.compose import open_changes, open_config, open_queues
from emq.core.settings import Settings
from tests.api.conftest import ADMIN

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[TestClient]:
    queues = await open_queues(settings)
    config = await open_config(settings)
    changes = open_changes(settings)
    app = make_app(settings, ApiSettings(), config, queues, changes=changes)
    http = TestClient(TestServer(app, host="127.0.0.1"))
    await http.start_server()
    yield http
    await http.close()
    await changes.aclose()
    await config.aclose()
    await queues.aclose()


async def emq(http: TestClient, *argv: str) -> tuple[int, str, str]:
    """``emq ARGV`` in a subprocess against the test's API."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    env |= {
        "EMQ_API_URL": str(http.make_url("")).rstrip("/"),
        "EMQ_ADMIN_TOKEN": "test-admin-token",
        "PYTHONPATH": str(ROOT),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "emq", *argv, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


async def call(http: TestClient, method: str, path: str, status: int, **kw: Any) -> Any:
    r = await http.request(method, path, headers=ADMIN | kw.pop("headers", {}), **kw)
    body = await r.json()
    assert r.status == status, body
    return body


async def qps(http: TestClient) -> tuple[int, int]:
    topic = await call(http, "GET", "/v1/tenants/acme/topics/orders", 200)
    return topic["qps"], topic["groups"]


def recorded(c: dict[str, Any]) -> tuple[Any, ...]:
    return (c["actor"], c["route"], c["tenant"], c["topic"], c["before"], c["after"], c["reason"])


async def test_every_route_is_recorded_and_a_revert_restores(
    client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await call(client, "POST", "/v1/tenants", 201, json={"tenant": "acme"})
    await call(client, "POST", "/v1/tenants/acme/topics", 201, json={"topic": "orders", "qps": 100})
    why = {"X-EMQ-Change-Why": "black%20friday%20%E2%9C%93"}
    patch = {"json": {"qps": 200}, "headers": why}
    await call(client, "PATCH", "/v1/tenants/acme/topics/orders", 200, **patch)
    code, _, err = await emq(client, "topic", "set-quota", "acme", "orders", "300", "--why", "peak")
    assert code == 0, err
    plan = tmp_path / "plan.json"
    planned = {"namespace": "online", "tenant": "acme", "topic": "orders", "qps": 450, "groups": 3}
    plan.write_text(json.dumps({"format": 1, "topics": [planned]}))
    monkeypatch.setenv("EMQ_API_URL", str(client.make_url("")).rstrip("/"))
    monkeypatch.setenv("EMQ_ADMIN_TOKEN", "test-admin-token")
    for name in ("EMQ_REDIS_URL", "EMQ_REDIS_KEY_PREFIX", "EMQ_ZK_HOSTS"):
        monkeypatch.delenv(name, raising=False)
    assert await asyncio.to_thread(main, ["plan", "apply", str(plan)]) == 0
    await call(client, "PATCH", "/v1/tenants/acme", 200, json={"qps_cap": 500})

    listed = await call(client, "GET", "/v1/changes?tenant=acme&topic=orders", 200)
    by_plan, by_cli, by_api, created = listed["changes"]
    assert listed["next_cursor"] is None
    assert [recorded(c) for c in (created, by_api, by_cli, by_plan)] == [
        ("admin", "api", "acme", "orders", {}, {"qps": 100, "groups": 1, "weight": 1, "burst": 0},
         ""),
        ("admin", "api", "acme", "orders", {"qps": 100, "groups": 1}, {"qps": 200, "groups": 2},
         "black friday ✓"),
        ("admin", "cli", "acme", "orders", {"qps": 200}, {"qps": 300}, "peak"),
        ("admin", "plan", "acme", "orders", {"qps": 300, "groups": 2}, {"qps": 450, "groups": 3},
         f"emq plan apply {plan}"),
    ]  # fmt: skip
    (cap,) = (await call(client, "GET", "/v1/changes?limit=1", 200))["changes"]  # the newest
    assert (cap["topic"], cap["before"], cap["after"]) == (None, {"qps_cap": None}, {"qps_cap": 500})  # noqa: E501
    assert await call(client, "GET", f"/v1/changes/{by_cli['id']}", 200) == by_cli

    # Stale: qps is 450 now, not the 200 the API's change left.
    stale = await call(client, "POST", f"/v1/changes/{by_api['id']}/revert", 409)
    assert stale["error"]["code"] == "conflict" and "qps is 450" in stale["error"]["message"]
    creation = await call(client, "POST", f"/v1/changes/{created['id']}/revert?force=true", 409)
    assert "a creation is not reverted" in creation["error"]["message"]
    assert await qps(client) == (450, 3)

    code, out, err = await emq(client, "changes", "revert", by_plan["id"], "--yes")
    assert code == 0, err
    assert await qps(client) == (300, 3)  # groups are never removed
    newest = (await call(client, "GET", "/v1/changes?limit=1", 200))["changes"][0]
    assert recorded(newest) == (
        "admin", "cli", "acme", "orders", {"qps": 450}, {"qps": 300}, f"revert of {by_plan['id']}"
    )  # fmt: skip
    assert newest["revert_of"] == by_plan["id"] and newest["id"] in out
    forced = await call(client, "POST", f"/v1/changes/{by_cli['id']}/revert?force=true", 200)
    assert forced["change"]["after"] == {"qps": 200} and await qps(client) == (200, 3)

    await call(client, "POST", f"/v1/changes/{cap['id']}/revert", 200)
    assert "qps_caps" not in (await call(client, "GET", "/v1/tenants", 200))["tenants"][0]

    # Counted where applied, by route: the refused reverts (stale, a creation) are not.
    assert client.app is not None
    registry = client.app[API_KEY].metrics.registry
    counts = {
        (name, route): registry.get_sample_value(
            name, {"namespace": "online", "tenant": "acme", "route": route}
        )
        for name in ("emq_changes_total", "emq_change_reverts_total")
        for route in ("api", "cli", "plan")
    }
    assert counts == {
        ("emq_changes_total", "api"): 5,  # creation, PATCH, cap, the two reverts
        ("emq_changes_total", "cli"): 2,
        ("emq_changes_total", "plan"): 1,
        ("emq_change_reverts_total", "api"): 2,
        ("emq_change_reverts_total", "cli"): 1,
        ("emq_change_reverts_total", "plan"): None,
    }


async def test_bad_input_is_one_4xx_and_changes_nothing(client: TestClient) -> None:
    await call(client, "POST", "/v1/tenants", 201, json={"tenant": "acme"})
    await call(client, "POST", "/v1/tenants/acme/topics", 201, json={"topic": "orders", "qps": 100})
    await call(client, "PATCH", "/v1/tenants/acme/topics/orders", 200, json={"qps": 150})
    before = await call(client, "GET", "/v1/changes", 200)
    for path, status, field in [
        ("/v1/changes/1-0", 404, None),
        ("/v1/changes/nonsense", 404, None),
        ("/v1/changes?limit=0", 422, "limit"),
        ("/v1/changes?since=yesterday", 422, "since"),
        ("/v1/changes?cursor=abc", 422, "cursor"),
        ("/v1/changes?tenant=a%20b", 422, "tenant"),
        ("/v1/changes?colour=red", 422, "colour"),
    ]:
        error = (await call(client, "GET", path, status))["error"]
        assert error.get("field") == field and error["message"], (path, error)
    for method, path, kw, status, field in [
        ("POST", "/v1/changes/1-0/revert", {}, 404, None),
        ("POST", "/v1/changes/1-0/revert?force=maybe", {}, 422, "force"),
        ("PATCH", "/v1/tenants/acme/topics/orders", {"json": {"qps": 300},
         "headers": {"X-EMQ-Change-Route": "fax"}}, 422, "X-EMQ-Change-Route"),
        ("PATCH", "/v1/tenants/acme/topics/orders", {"json": {"qps": 300},
         "headers": {"X-EMQ-Change-Why": "%FF"}}, 422, "X-EMQ-Change-Why"),
    ]:  # fmt: skip
        error = (await call(client, method, path, status, **kw))["error"]
        assert error.get("field") == field, (path, error)
    r = await client.get("/v1/changes", headers={"Authorization": "Bearer wrong"})
    assert r.status == 401 and "error" in await r.json()
    assert await qps(client) == (150, 1)
    assert await call(client, "GET", "/v1/changes", 200) == before
    scraped = await (await client.get("/metrics")).text()
    assert 'emq_changes_total{namespace="online",route="api",tenant="acme"} 2.0' in scraped
    code, out, err = await emq(client, "changes", "show", "1-0")
    assert (code, out) == (1, "") and err.count("\n") == 1 and "not_found" in err
