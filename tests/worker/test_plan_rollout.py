"""``emq plan apply --canary --watch`` end to end: real Redis and ZooKeeper, ``emq api``, one
``emq worker --standalone`` and a loopback receiver, history every second.

Two rollouts run at once on separate topics, each from its own plan:

(a) quotas raised on four topics of two tenants with steady traffic: the canary (one topic) is
    healthy, the rest follows in one step, the rollout ends ``done`` and every quota is live;
(b) a quota lowered from 50 to 1 under 40 jobs/s, in the canary: its backlog grows past the
    threshold, the rollout rolls the canary back by itself (its quota as before, the topic of
    the other tenant never touched) and ends ``rolled-back`` with the reason.

The change log shows each plan change and the rollback, with the reason as its why; the API's
/metrics counts the two rollouts by how they ended and the plan's changes by their route.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from emq.core.model import Namespace, Tenant
from emq.core.settings import Settings
from emq.rigs.procs import Proc
from emq.rigs.sink import Sink
from emq.stack import free_port
from tests.worker.conftest import Stack

ROOT = Path(__file__).resolve().parents[2]
ADMIN = {"Authorization": "Bearer test-admin-token"}
HEALTHY = {"acme": ["h1", "h2"], "beta": ["h3", "h4"]}


def env_of(settings: Settings, api_url: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")} | {
        "EMQ_REDIS_URL": settings.redis_url,
        "EMQ_ZK_HOSTS": settings.zk_hosts,
        "EMQ_REDIS_KEY_PREFIX": settings.redis_key_prefix,
        "EMQ_ADMIN_TOKEN": "test-admin-token",
        "EMQ_API_URL": api_url,
        "EMQ_API_HISTORY_INTERVAL_S": "1",
        "EMQ_PUSH_ALLOW_CIDRS": "127.0.0.0/8",
        "PYTHONPATH": str(ROOT),
    }


@contextlib.asynccontextmanager
async def api_process(settings: Settings, tmp_path: Path) -> Any:
    url = f"http://127.0.0.1:{free_port()}"
    proc = Proc("api", ["api"], env_of(settings, url), tmp_path / "api.log")
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(150):
                proc.check()
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"{url}/healthz") as r:
                        if r.status == 200:
                            break
                await asyncio.sleep(0.1)
        yield url
    finally:
        proc.stop(10)


async def emq(env: dict[str, str], *argv: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "emq", *argv, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    except TimeoutError:  # say where it was, then fail
        proc.kill()
        out, err = await proc.communicate()
        raise AssertionError(f"emq {argv} still running after 60 s: {out!r} {err!r}") from None
    return proc.returncode or 0, out.decode(), err.decode()


def plan_file(path: Path, topics: dict[tuple[str, str], int]) -> str:
    rows = [
        {"namespace": "online", "tenant": t, "topic": n, "qps": q, "groups": 1}
        for (t, n), q in topics.items()
    ]
    path.write_text(json.dumps({"topics": rows}))
    return str(path)


async def traffic(stack: Stack, sink: Sink, rates: dict[tuple[str, str], int]) -> None:
    """Jobs to every topic at its rate per second, until cancelled."""
    from emq.core.model import TopicRef

    while True:
        for (tenant, name), rate in rates.items():
            ref = TopicRef(Namespace.ONLINE, tenant, name)
            await stack.enqueuer.enqueue(ref, [{"url": sink.url(name)}] * (rate // 4), batch=True)
        await asyncio.sleep(0.25)


async def scraped(http: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """The API's /metrics samples of the rollouts and changes, by their text name."""
    async with http.get(f"{url}/metrics") as r:
        text = await r.text()
    out = {}
    for line in text.splitlines():
        if line.startswith(("emq_rollout", "emq_changes_total", "emq_change_reverts")):
            name, _, number = line.rpartition(" ")
            out[name] = float(number)
    return out


async def changes_of(http: aiohttp.ClientSession, url: str, tenant: str, topic: str) -> Any:
    query = {"tenant": tenant, "topic": topic}
    async with http.get(f"{url}/v1/changes", params=query, headers=ADMIN) as r:
        return (await r.json())["changes"]


@pytest.mark.timeout(120)
async def test_a_healthy_canary_rolls_out_and_a_sick_one_rolls_back(
    settings: Settings, stack: Stack, sink: Sink, worker_process: Any, tmp_path: Path
) -> None:
    await stack.config.create_tenant(Tenant("beta", "Beta", "1" * 64, time.time()))
    for tenant, names in HEALTHY.items():
        stack.tenant = tenant
        for name in names:
            await stack.topic(name, 20)
    stack.tenant = "acme"
    await stack.topic("sick", 50)
    stack.tenant = "beta"
    await stack.topic("spare", 20)
    rates = {(t, n): 8 for t, ns in HEALTHY.items() for n in ns}
    rates |= {("acme", "sick"): 40, ("beta", "spare"): 8}
    worker_process("w1", EMQ_WORKER_HISTORY_INTERVAL_S="1")
    async with api_process(settings, tmp_path) as url:
        env = env_of(settings, url)
        sending = asyncio.ensure_future(traffic(stack, sink, rates))
        await asyncio.sleep(1.5)  # a baseline: a history interval of steady delivery
        raised = {(t, n): 30 for t, ns in HEALTHY.items() for n in ns}
        healthy = plan_file(tmp_path / "a.json", raised)
        sick = plan_file(tmp_path / "b.json", {("acme", "sick"): 1, ("beta", "spare"): 30})
        common = ("--yes", "--json")
        a, b = await asyncio.gather(
            emq(env, "plan", "apply", healthy, "--canary", "25%", "--steps", "1", "--watch",
                "2s", *common),
            emq(env, "plan", "apply", sick, "--canary", "50%", "--force", "--watch", "3s",
                "--max-backlog-growth-s", "1", *common),
        )  # fmt: skip
        sending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sending

        code, out, err = a
        assert code == 0, err
        done = json.loads(out)
        assert done["state"] == "done" and done["breaches"] == {}
        assert [len(s) for s in done["steps"]] == [1, 3]
        code, out, err = b
        assert code == 4, (out, err)
        back = json.loads(out)
        assert back["state"] == "rolled-back"
        assert back["steps"] == [["online/acme/sick"], ["online/beta/spare"]]
        assert back["applied"] == ["online/acme/sick"]
        assert back["reason"].startswith("online/acme/sick: backlog_growth ")
        assert "rolling back 1 topic(s)" in err

        async with aiohttp.ClientSession() as http:
            for tenant, names in HEALTHY.items():
                for name in names:
                    path = f"{url}/v1/tenants/{tenant}/topics/{name}"
                    async with http.get(path, headers=ADMIN) as r:
                        assert (await r.json())["qps"] == 30
            async with http.get(f"{url}/v1/tenants/acme/topics/sick", headers=ADMIN) as r:
                assert (await r.json())["qps"] == 50  # set back
            async with http.get(f"{url}/v1/tenants/beta/topics/spare", headers=ADMIN) as r:
                assert (await r.json())["qps"] == 20  # never applied
            async with http.get(f"{url}/v1/rollouts/{back['rollout']}", headers=ADMIN) as r:
                shown = await r.json()
            assert shown["state"] == "rolled-back" and shown["reason"] == back["reason"]
            by_name = {t["name"]: t for t in shown["topics"]}
            assert by_name["online/acme/sick"]["status"] == "rolled-back"
            assert by_name["online/beta/spare"]["status"] == "pending"

            rollback, applied = (await changes_of(http, url, "acme", "sick"))[:2]
            assert (applied["route"], applied["before"]["qps"], applied["after"]["qps"]) == (
                "plan", 50, 1,
            )  # fmt: skip
            assert (rollback["before"]["qps"], rollback["after"]["qps"]) == (1, 50)
            assert rollback["reason"] == f"rollback of rollout {back['rollout']}: {back['reason']}"
            (raised, *_) = await changes_of(http, url, "beta", "h3")
            assert raised["after"]["qps"] == 30 and raised["reason"].endswith("--canary")

            metrics = await scraped(http, url)
            assert metrics["emq_rollouts_started_total"] == 2
            assert metrics['emq_rollouts_ended_total{state="done"}'] == 1
            assert metrics['emq_rollouts_ended_total{state="rolled-back"}'] == 1
            plan = 'emq_changes_total{namespace="online",route="plan",tenant="%s"}'
            # acme: h1, h2 raised, sick lowered and set back; beta: h3, h4 raised
            assert (metrics[plan % "acme"], metrics[plan % "beta"]) == (4, 2)
