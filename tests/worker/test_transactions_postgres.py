"""A business row and its jobs committed together on PostgreSQL (issue 30): the SQLite example
of docs/concepts/transactions.md, the very block, run against a PostgreSQL of Debian's packages
(through psycopg) on the real stack (Redis, ZooKeeper, ``emq api``, ``emq worker``, a receiver
on loopback). Its producers are processes of their own; the one killed (SIGKILL) between its
database commit and EMQ's is committed by the check-back (its check_url reads PostgreSQL), the
one killed before its database commit is rolled back; exactly the committed orders' jobs are
delivered, once each, and the database holds exactly their rows."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import psycopg

from emq.core.settings import Settings
from emq.rigs.sink import Sink
from emq.stack import free_port
from tests.docs.blocks import runnable
from tests.worker.test_transactions_faults import ADMIN_TOKEN, ApiProcess

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "concepts" / "transactions.md"


def _example(scratch: Path) -> Path:
    """The page's business-row example, as the docs' harness writes it."""
    (code,) = [b.code for b in runnable(PAGE.read_text()) if "SHOP_DATABASE_URL" in b.code]
    path = scratch / "orders.py"
    path.write_text(code)
    return path


async def test_the_business_row_and_its_jobs_commit_together_on_postgresql(
    settings: Settings, tmp_path: Path, worker_process: Any, sink: Sink, postgres_url: str
) -> None:
    worker_process()  # (starting while the API starts)
    api = ApiProcess(settings, tmp_path / "api.log", free_port())
    try:
        await api.ready()
        env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")} | {
            "EMQ_API_URL": api.url,
            "EMQ_ADMIN_TOKEN": ADMIN_TOKEN,
            "EMQ_SINK_URL": sink.url("orders"),
            "SHOP_DATABASE_URL": postgres_url,
            "PYTHONPATH": str(ROOT),
        }
        shop = await asyncio.create_subprocess_exec(
            sys.executable, str(_example(tmp_path)), cwd=tmp_path, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(shop.communicate(), 60)
        assert shop.returncode == 0, (err.decode()[-3000:], api.log())
        orders = {o["order"]: o for o in map(json.loads, out.decode().splitlines())}
        assert {o: (v["killed"], v["state"], v["source"]) for o, v in orders.items()} == {
            "o-1": ("never", "committed", "producer"),
            "o-2": ("after-db-commit", "committed", "check_back"),
            "o-3": ("before-db-commit", "rolled_back", "check_back"),
        }
        committed = orders["o-1"]["jobs"] + orders["o-2"]["jobs"]
        assert await sink.wait_for(lambda: len(sink.of("orders")) >= len(committed), 20)
        await asyncio.sleep(0.5)  # anything more would arrive now
        delivered = sink.of("orders")
        assert sorted(d.job_id for d in delivered) == sorted(committed)
        assert sorted(json.loads(d.body)["order"] for d in delivered) == ["o-1", "o-2"]
        with psycopg.connect(postgres_url) as db:  # the business rows, as PostgreSQL has them
            rows = db.execute("SELECT id, tx FROM orders ORDER BY id").fetchall()
        assert rows == [(o, orders[o]["transaction"]) for o in ("o-1", "o-2")]
    finally:
        api.stop()
