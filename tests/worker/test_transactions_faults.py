"""Transactions end to end (issue 30) on real Redis, ZooKeeper, ``emq api`` and ``emq worker``
processes and real receivers on loopback: the client's ``async with`` commits on exit (every
job delivered, across groups) and rolls back on an exception (none delivered); the API process
killed (SIGKILL) between prepare and commit leaves the jobs stored and undelivered, and the next
API process's check-back decides them: commit (all delivered) or rollback (none), as the
producer's check_url answers; ``emq transaction show`` tells where each decision came from."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from emq.client import Client
from emq.core.settings import Settings
from emq.rigs.procs import Proc
from emq.rigs.sink_recorder import Sink
from emq.stack import free_port

ROOT = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "test-admin-token"
TIMEOUT_S = 3


def _env(settings: Settings, url: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    return base | {
        "EMQ_REDIS_URL": settings.redis_url,
        "EMQ_ZK_HOSTS": settings.zk_hosts,
        "EMQ_REDIS_KEY_PREFIX": settings.redis_key_prefix,
        "EMQ_ADMIN_TOKEN": ADMIN_TOKEN,
        "EMQ_API_URL": url,
        "EMQ_PUSH_ALLOW_CIDRS": "127.0.0.0/8",
        "EMQ_API_SHUTDOWN_GRACE_S": "1",
        "EMQ_API_TRANSACTION_RUNNER_INTERVAL_S": "0.2",
        "EMQ_API_TRANSACTION_CHECK_BACKOFF_S": "0.2",
        "EMQ_API_TRANSACTION_CHECK_TIMEOUT_S": "2",
        "EMQ_LOG_LEVEL": "INFO",
    }


class ApiProcess(Proc):
    def __init__(self, settings: Settings, log: Path, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        env = _env(settings, self.url)
        super().__init__("api", ["api", "--port", str(port)], env, log)

    async def ready(self) -> None:
        async with asyncio.timeout(30), Client(self.url, "") as c:
            while True:
                self.check()
                try:
                    await c.health()
                    return
                except Exception:  # not listening yet
                    await asyncio.sleep(0.1)


@pytest.fixture
async def decisions() -> AsyncIterator[dict[str, str]]:
    """The producer's check_url: answers ``/check/<name>`` with ``decisions[name]``."""
    answers: dict[str, str] = {}

    async def check(request: web.Request) -> web.Response:
        return web.json_response({"decision": answers.get(request.match_info["name"], "unknown")})

    app = web.Application()
    app.router.add_post("/check/{name}", check)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    answers["_base"] = f"http://127.0.0.1:{server.port}/check/"
    yield answers
    await server.close()


async def test_commit_rollback_and_the_api_killed_between_prepare_and_commit(
    settings: Settings, tmp_path: Path, worker_process: Any, sink: Sink, decisions: dict[str, str]
) -> None:
    port = free_port()
    worker_process()  # (starting while the API starts)
    api = ApiProcess(settings, tmp_path / "api.log", port)
    try:
        await api.ready()
        async with Client(api.url, ADMIN_TOKEN) as admin:
            token = (await admin.create_tenant("acme"))["token"]
            await admin.create_topic("acme", "orders", 300)  # two groups
        job = {"url": sink.url("orders")}
        check = decisions["_base"]
        decisions["after"] = "commit"  # what the producer's database says
        decisions["before"] = "rollback"
        async with Client(api.url, token) as c:
            async with c.transaction("acme", "orders", check_url=check + "a") as tx:
                committed = await tx.send([job | {"body": f"c{i}"} for i in range(4)])
            with pytest.raises(RuntimeError):
                async with c.transaction("acme", "orders", check_url=check + "b") as tx:
                    rolled = await tx.send([job | {"body": "r0"}, job | {"body": "r1"}])
                    raise RuntimeError("the producer's database refused its commit")
            # the producer commits its database, then the API dies before EMQ's commit ...
            after_db = await c.create_transaction("acme", "orders", check_url=check + "after",
                                                  timeout_s=TIMEOUT_S)  # fmt: skip
            deadline = time.monotonic() + TIMEOUT_S
            kept = await after_db.send([job | {"body": f"k{i}"} for i in range(3)])
            # ... and one whose producer died before its database commit
            before_db = await c.create_transaction("acme", "orders", check_url=check + "before",
                                                   timeout_s=TIMEOUT_S)  # fmt: skip
            dropped = await before_db.send([job | {"body": "d0"}])
        api.kill()  # SIGKILL: between prepare and commit, before any check-back was due
        assert time.monotonic() < deadline, "too slow: killed after the timeout"
        api = ApiProcess(settings, tmp_path / "api2.log", port)
        await api.ready()
        assert await sink.wait_for(lambda: len(sink.of("orders")) >= 7, 30), api.log()
        await asyncio.sleep(0.5)  # anything extra would arrive now
        delivered = sorted(d.job_id for d in sink.of("orders"))
        assert delivered == sorted(committed + kept)
        assert not set(rolled + dropped) & set(delivered)
        shown = await _emq(api.url, token, "transaction", "show", "acme", "orders", after_db.id)
        assert "committed by check_back: check_url answered commit" in shown, shown
        async with Client(api.url, token) as c:
            listed = await c.transactions("acme", "orders")
        states = {t["transaction_id"]: (t["state"], t["decision"]["source"])
                  for t in listed["transactions"]}  # fmt: skip
        assert states[after_db.id] == ("committed", "check_back")
        assert states[before_db.id] == ("rolled_back", "check_back")
        assert sorted(states.values()).count(("rolled_back", "producer")) == 1
    finally:
        api.stop()


async def _emq(url: str, token: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "emq", *args, cwd=ROOT,
        env=env | {"EMQ_API_URL": url, "EMQ_TOKEN": token},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    return out.decode()
