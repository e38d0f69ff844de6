"""``emq plan apply --canary``: every refusal is one line naming what is wrong, made before
anything is applied (the API here runs on the in-memory adapters in a thread; the rollout
itself, on the real parts, is ``tests/worker/test_plan_rollout.py``)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from adapters.memory_config import MemoryConfigStore
from adapters.memory_queue import MemoryQueueBackend
from adapters.memory_rollouts import MemoryRolloutStore
from emq.api import ApiSettings, make_app
from emq.cli.main import main
from emq.core.model import Namespace, Tenant, Topic, TopicRef
from emq.core.settings import Settings
from emq.stack import free_port

ORDERS = TopicRef(Namespace.ONLINE, "acme", "orders")


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[MemoryConfigStore, MemoryRolloutStore]]:
    """An API on loopback (history every 10 s) with acme/orders (10 QPS) and acme/emails."""
    config, rollouts = MemoryConfigStore(), MemoryRolloutStore()
    port, loop, ready = free_port(), asyncio.new_event_loop(), threading.Event()

    async def start() -> web.AppRunner:
        await config.create_tenant(Tenant("acme", "", "0" * 64, 0.0))
        for name in ("orders", "emails"):
            await config.create_topic(Topic(TopicRef(Namespace.ONLINE, "acme", name), 10, 1))
        app = make_app(Settings(admin_token="t"), ApiSettings(), config, MemoryQueueBackend(),
                       rollout_store=rollouts)  # fmt: skip
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        return runner

    def serve() -> None:
        runner = loop.run_until_complete(start())
        ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    monkeypatch.setenv("EMQ_API_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("EMQ_ADMIN_TOKEN", "t")
    yield config, rollouts
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def plan(tmp_path: Path, name: str, *topics: tuple[str, int]) -> str:
    rows = [{"namespace": "online", "tenant": "acme", "topic": t, "qps": q, "groups": 1}
            for t, q in topics]  # fmt: skip
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"topics": rows}))
    return str(path)


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["plan", "apply", *argv]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("emq: error: "), err
    return err


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--canary", "0%", "--watch", "5m"], "--canary"),
        (["--canary", "150%", "--watch", "5m"], "at most 100%"),
        (["--canary", "ten", "--watch", "5m"], "percentage"),
        (["--canary", "10%"], "needs --watch"),
        (["--watch", "5m"], "pass --canary too"),
        (["--canary", "10%", "--watch", "soon"], "--watch"),
        (["--canary", "10%", "--watch", "5m", "--steps", "50,25,100"], "--steps"),
        (["--canary", "10%", "--watch", "5m", "--max-failed-share-rise", "200%"], "0% to 100%"),
    ],
)
def test_bad_flags_are_refused_before_anything_is_read(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, flags: list[str], says: str
) -> None:
    monkeypatch.setenv("EMQ_API_URL", "http://127.0.0.1:9")  # never reached
    assert says in refused(capsys, "no-such-plan.json", *flags)


async def qps(config: MemoryConfigStore) -> int:
    return (await config.get_topic(ORDERS)).qps


def test_refusals_that_read_the_api_apply_nothing(
    api: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, rollouts = api
    canary = ("--canary", "50%", "--watch", "5m")
    unknown = plan(tmp_path, "unknown", ("orders", 20), ("ghost", 5))
    assert "names unknown topics: online/acme/ghost; nothing applied" in refused(
        capsys, unknown, *canary, "--yes"
    )
    good = plan(tmp_path, "good", ("orders", 20), ("emails", 30))
    short = refused(capsys, good, "--canary", "50%", "--watch", "5s", "--yes")
    assert "5 s is shorter than the 10 s history interval" in short
    assert "EMQ_WORKER_HISTORY_INTERVAL_S" in short
    drop = plan(tmp_path, "drop", ("orders", 2))
    assert "--force" in refused(capsys, drop, *canary, "--yes")
    assert "pass --yes" in refused(capsys, good, *canary)  # no terminal to ask

    assert main(["plan", "apply", good, *canary, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "canary: 1 of 2 changed topics (50% asked, 1 tenant(s)), then 1 step(s)" in out

    assert asyncio.run(qps(config)) == 10  # nothing applied, no rollout started
    assert asyncio.run(rollouts.latest()) is None
