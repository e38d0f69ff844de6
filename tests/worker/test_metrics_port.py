"""Several ``emq worker`` processes on one host: each finds a metrics port and says which."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from typing import Any

import aiohttp

from allocator.view import ZkFleetView
from emq.core.model import Namespace
from emq.core.settings import Settings
from tests.worker.conftest import Stack, stack

__all__ = ["stack"]


async def _members_with_metrics(settings: Settings, count: int) -> dict[str, str]:
    view = ZkFleetView(settings.zk_hosts)
    try:
        for _ in range(400):
            state = await view.state(Namespace.ONLINE)
            found = {m.id: m.metrics for m in state.members if m.metrics}
            if len(found) == count:
                return found
            await asyncio.sleep(0.05)
    finally:
        await view.aclose()
    raise AssertionError(f"not {count} members advertising metrics: {state.members}")


async def test_two_workers_side_by_side_both_serve_metrics(
    stack: Stack, worker_process: Any
) -> None:
    await stack.topic("m", 10)
    auto = {"EMQ_WORKER_METRICS_PORT": "auto"}
    workers = [worker_process(f"m{i}", standalone=False, **auto) for i in range(2)]
    found = await _members_with_metrics(stack.settings, 2)
    assert set(found) == {"m0", "m1"} and len(set(found.values())) == 2, found
    async with aiohttp.ClientSession() as http:
        for address in found.values():
            async with http.get(f"http://{address}/metrics") as r:
                assert r.status == 200
                assert "emq_worker_groups" in await r.text()
    assert all(w.proc is not None and w.proc.poll() is None for w in workers)


def test_an_explicit_taken_port_is_one_line_and_a_non_zero_exit(settings: Settings) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")} | {
            "EMQ_REDIS_URL": settings.redis_url,
            "EMQ_ZK_HOSTS": settings.zk_hosts,
            "EMQ_REDIS_KEY_PREFIX": settings.redis_key_prefix,
            "EMQ_WORKER_METRICS_PORT": str(port),
            "EMQ_LOG_LEVEL": "ERROR",
        }
        done = subprocess.run(
            [sys.executable, "-m", "emq", "worker", "--standalone"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("emq: error: EMQ_WORKER_METRICS_PORT") and str(port) in lines[0]


def test_a_malformed_port_is_refused_at_start(settings: Settings) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")} | {
        "EMQ_WORKER_METRICS_PORT": "91010",
    }
    done = subprocess.run(
        [sys.executable, "-m", "emq", "worker"], env=env, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0 and "EMQ_WORKER_METRICS_PORT" in done.stderr
