"""The server against its own OpenAPI document: schemathesis, every check, zero failures.

``emq api``'s app and runner (connection guards included) serve on a loopback port over the
session's real Redis and ZooKeeper; schemathesis (``--checks all``) reads ``/openapi.json`` and
sends what it generates from it, valid and invalid, as the admin on admin routes and as a
tenant on a tenant's routes (pinned to that tenant's topic, so its jobs are really accepted).
The examples are bounded to keep this under a minute; the README shows the long run. The
rules a JSON Schema cannot state are taught to schemathesis by ``fuzz_hooks.py``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from emq.api import ApiSettings, make_app
from emq.api.server import make_runner
from emq.compose import (
    open_changes,
    open_config,
    open_fleet_view,
    open_history,
    open_jobs,
    open_plans,
    open_queues,
    open_replays,
    open_schedules,
    open_subscriptions,
    open_transactions,
)
from emq.core.model import MAX_TOPIC_QPS
from emq.core.settings import Settings
from tests.api.conftest import ADMIN

ROOT = Path(__file__).resolve().parents[2]
# Examples per operation and phase: bounded so the run takes well under a minute here;
# ``FUZZ_EXAMPLES=1000`` for the long run (README, "The API contract").
MAX_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "10"))
SEED = 13
TENANT_ROUTES = {
    "GET /v1/tenants/{tenant}/topics",
    "GET /v1/tenants/{tenant}/topics/{topic}",
    "POST /v1/tenants/{tenant}/topics/{topic}/jobs",
    "GET /v1/tenants/{tenant}/topics/{topic}/dlq",
    "GET /v1/tenants/{tenant}/topics/{topic}/jobs/{id}",
    "POST /v1/tenants/{tenant}/topics/{topic}/dlq/replay",
    "POST /v1/tenants/{tenant}/topics/{topic}/dlq/replays",
    "GET /v1/tenants/{tenant}/topics/{topic}/dlq/replays",
    "GET /v1/tenants/{tenant}/topics/{topic}/dlq/replays/{replay}",
    "DELETE /v1/tenants/{tenant}/topics/{topic}/dlq/replays/{replay}",
    "POST /v1/tenants/{tenant}/topics/{topic}/dlq/replays/{replay}/cancel",
    "POST /v1/tenants/{tenant}/topics/{topic}/subscriptions",
    "GET /v1/tenants/{tenant}/topics/{topic}/subscriptions",
    "GET /v1/tenants/{tenant}/topics/{topic}/subscriptions/{subscription}",
    "PATCH /v1/tenants/{tenant}/topics/{topic}/subscriptions/{subscription}",
    "DELETE /v1/tenants/{tenant}/topics/{topic}/subscriptions/{subscription}",
    "POST /v1/tenants/{tenant}/topics/{topic}/subscriptions/{subscription}/rotate-secret",
    "POST /v1/tenants/{tenant}/topics/{topic}/events",
    "GET /v1/tenants/{tenant}/topics/{topic}/events/{event}",
    "POST /v1/tenants/{tenant}/topics/{topic}/transactions",
    "GET /v1/tenants/{tenant}/topics/{topic}/transactions",
    "GET /v1/tenants/{tenant}/topics/{topic}/transactions/{transaction_id}",
    "POST /v1/tenants/{tenant}/topics/{topic}/transactions/{transaction_id}/jobs",
    "POST /v1/tenants/{tenant}/topics/{topic}/transactions/{transaction_id}/commit",
    "POST /v1/tenants/{tenant}/topics/{topic}/transactions/{transaction_id}/rollback",
    "POST /v1/tenants/{tenant}/topics/{topic}/schedules",
    "GET /v1/tenants/{tenant}/topics/{topic}/schedules",
    "GET /v1/tenants/{tenant}/topics/{topic}/schedules/{schedule}",
    "PATCH /v1/tenants/{tenant}/topics/{topic}/schedules/{schedule}",
    "DELETE /v1/tenants/{tenant}/topics/{topic}/schedules/{schedule}",
}
ADMIN_ROUTES = {
    "POST /v1/tenants",
    "GET /v1/tenants",
    "POST /v1/tenants/{tenant}/topics",
    "PATCH /v1/tenants/{tenant}/topics/{topic}",
    "GET /v1/workers",
    "POST /v1/plans",
    "GET /v1/plans/latest",
    "GET /v1/changes",
    "GET /v1/changes/{change}",
    "POST /v1/changes/{change}/revert",
}


@pytest.fixture
async def live_api(settings: Settings) -> AsyncIterator[str]:
    """``emq api`` as it serves in production (its runner, a fleet view), on a free port.

    Every topic has one group (``EMQ_MAX_GROUP_QPS`` at the largest quota): groups never
    shrink, so a topic created at 1 000 000 QPS (6667 groups) would refuse a later quota below
    6667, a rule of the topic's history that no request schema can state.
    """
    settings = replace(settings, max_group_qps=MAX_TOPIC_QPS)
    queues = await open_queues(settings)
    config = await open_config(settings)
    history = open_history(settings)
    fleet = open_fleet_view(settings)
    jobs = open_jobs(settings)
    replays = open_replays(settings)
    plans = open_plans(settings)
    subscriptions = open_subscriptions(settings)
    transactions = open_transactions(settings)
    schedules = open_schedules(settings)
    changes = open_changes(settings)
    app = make_app(
        settings,
        ApiSettings(),
        config,
        queues,
        history,
        fleet,
        jobs,
        replays=replays,
        plan_store=plans,
        subscription_store=subscriptions,
        transaction_store=transactions,
        schedules=schedules,
        changes=changes,
    )
    runner = make_runner(app, ApiSettings())
    await runner.setup()
    port = await runner.listen("127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
        await changes.aclose()
        await schedules.aclose()
        await replays.aclose()
        await subscriptions.aclose()
        await transactions.aclose()
        await plans.aclose()
        await jobs.aclose()
        await fleet.aclose()
        await history.aclose()
        await config.aclose()
        await queues.aclose()


def config_toml(
    admin: str,
    tenant: str,
    examples: int,
    job_id: str,
    replay_id: str,
    ids: dict[str, str],
    txs: dict[str, str],
) -> str:
    """Who calls what: the admin token on admin routes; the tenant's token, on its own topic,
    on the tenant routes. A 413 (too many jobs) is a rejection too."""
    rejections = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "429"]
    lines = [
        'hooks = "tests.api.fuzz_hooks"',
        f"seed = {SEED}",
        "workers = 1",
        # Deleting the one schedule makes the later DELETEs of it 404 ("missing test data"):
        # the other warnings still show
        'warnings = ["missing_auth", "validation_mismatch", "missing_deserializer", '
        '"unused_openapi_auth", "method_not_allowed"]',
        "[generation]",
        f"max-examples = {examples}",
        "deterministic = true",
        "[checks.negative_data_rejection]",
        f"expected-statuses = {rejections}",
    ]
    for name in sorted(ADMIN_ROUTES):
        lines += [
            "[[operations]]",
            f'include-name = "{name}"',
            f'headers = {{ Authorization = "Bearer {admin}" }}',
        ]
        if "{change}" in name:  # a recorded change, reverted and then stale (409)
            lines.append(f'parameters = {{ change = "{ids["change"]}" }}')
    for name in sorted(TENANT_ROUTES):
        lines += [
            "[[operations]]",
            f'include-name = "{name}"',
            f'headers = {{ Authorization = "Bearer {tenant}" }}',
            'parameters = { tenant = "fuzz", topic = "orders"'
            + (f', id = "{job_id}"' if "{id}" in name else "")
            + (f', replay = "{replay_id}"' if "{replay}" in name else "")
            + "".join(f', {k} = "{v}"' for k, v in _path_ids(name, ids).items())
            + (f', transaction_id = "{_tx_for(name, txs)}"' if "{transaction_id}" in name else "")
            + (', schedule = "beat"' if "{schedule}" in name else "")
            + " }",
        ]
    return "\n".join(lines) + "\n"


def _path_ids(name: str, ids: dict[str, str]) -> dict[str, str]:
    """The ids of ``name``'s path parameters: ``ids["<param> <METHOD>"]`` for that method
    (the subscription the fuzzer deletes is not the one the other routes use), else
    ``ids["<param>"]``."""
    method = name.split()[0]
    wanted = [k for k in ids if " " not in k and f"{{{k}}}" in name]
    return {k: ids.get(f"{k} {method}", ids[k]) for k in wanted}


async def schemathesis_run(url: str, config: Path, report: Path) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(config),
        "run",
        f"{url}/openapi.json",
        "--checks",
        "all",
        # DELETE of a paced replay cancels it, and a cancelled replay stays readable (its
        # progress is what an operator looks at): no use after free, though the check says so
        # once the stateful phase reaches that pair (it does with the schedule routes listed)
        "--exclude-checks",
        "use_after_free",
        "--report",
        "junit",
        "--report-junit-path",
        str(report),
        cwd=config.parent,  # schemathesis keeps a cache in its working directory
        env={**os.environ, "PYTHONPATH": str(ROOT)},  # for the hooks module
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode(errors="replace")


def _tx_for(name: str, txs: dict[str, str]) -> str:
    """The transaction an operation is pinned to: commit and rollback each have their own (a
    decided one answers 409 to the other), the others share one that stays open."""
    return txs.get(name.rsplit("/", 1)[-1], txs["open"])


@pytest.mark.timeout(max(300, 10 * MAX_EXAMPLES))
async def test_schemathesis_finds_nothing(live_api: str, tmp_path: Path) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as http:
        r = await http.post(f"{live_api}/v1/tenants", json={"tenant": "fuzz"}, headers=ADMIN)
        token = (await r.json())["token"]
        r = await http.post(
            f"{live_api}/v1/tenants/fuzz/topics",
            json={"topic": "orders", "qps": 100},
            headers=ADMIN,
        )
        assert r.status == 201, await r.text()
        r = await http.post(  # a job whose status the fuzzer asks for
            f"{live_api}/v1/tenants/fuzz/topics/orders/jobs",
            json={"url": "http://127.0.0.1:9/x", "delay_s": 3600},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status == 202, await r.text()
        (job_id,) = (await r.json())["ids"]
        r = await http.post(  # a replay the fuzzer shows and cancels (no worker moves it)
            f"{live_api}/v1/tenants/fuzz/topics/orders/dlq/replays",
            json={},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status == 201, await r.text()
        replay_id = (await r.json())["id"]
        tenant = {"Authorization": f"Bearer {token}"}
        r = await http.post(  # a subscription and an event the fuzzer shows and changes
            f"{live_api}/v1/tenants/fuzz/topics/orders/subscriptions",
            json={"url": "http://127.0.0.1:9/x", "event_types": ["*"]},
            headers=tenant,
        )
        assert r.status == 201, await r.text()
        ids = {"subscription": (await r.json())["id"]}
        r = await http.post(  # one the fuzzer deletes (the other stays for the other routes)
            f"{live_api}/v1/tenants/fuzz/topics/orders/subscriptions",
            json={"url": "http://127.0.0.1:9/x", "event_types": ["*"]},
            headers=tenant,
        )
        ids["subscription DELETE"] = (await r.json())["id"]
        r = await http.post(
            f"{live_api}/v1/tenants/fuzz/topics/orders/events", json={"type": "a"}, headers=tenant
        )
        assert r.status == 202, await r.text()
        ids["event"] = (await r.json())["event_id"]
        txs = {}
        for use in ("open", "commit", "rollback"):  # transactions the fuzzer works on
            r = await http.post(
                f"{live_api}/v1/tenants/fuzz/topics/orders/transactions",
                json={"check_url": "https://example.com/check"},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert r.status == 201, await r.text()
            txs[use] = (await r.json())["transaction_id"]
        r = await http.post(  # a schedule the fuzzer shows, changes and deletes
            f"{live_api}/v1/tenants/fuzz/topics/orders/schedules",
            json={"id": "beat", "cron": "0 9 * * *", "job": {"url": "http://127.0.0.1:9/x"}},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status == 201, await r.text()
        r = await http.patch(  # a recorded change the fuzzer shows and reverts
            f"{live_api}/v1/tenants/fuzz/topics/orders", json={"qps": 101}, headers=ADMIN
        )
        assert r.status == 200, await r.text()
        r = await http.get(f"{live_api}/v1/changes?limit=1", headers=ADMIN)
        ids["change"] = (await r.json())["changes"][0]["id"]
    config = tmp_path / "schemathesis.toml"
    config.write_text(
        config_toml("test-admin-token", token, MAX_EXAMPLES, job_id, replay_id, ids, txs)
    )
    code, out = await schemathesis_run(live_api, config, tmp_path / "junit.xml")
    assert code == 0, out
    assert "No issues found" in out, out
