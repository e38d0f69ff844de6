"""Events published into a transaction through the API on real Redis and ZooKeeper (issue 30):
``POST .../events?transaction_id=`` prepares every delivery (queues untouched, job status
``prepared`` in the event's record), a commit queues them, a rollback discards them, a decided
transaction is a 409 with its final state and stores nothing, the transaction's limits apply to
the deliveries, an idempotent event repeated in a transaction is delivered once; and the Python
client's ``tx.publish`` and ``emq event publish --transaction-id``."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from emq.api import ApiSettings, make_app
from emq.client import Client
from emq.compose import open_config, open_jobs, open_queues, open_subscriptions, open_transactions
from emq.core.model import Namespace, TopicRef
from emq.core.settings import Settings
from tests.api.conftest import ADMIN

T = "/v1/tenants/acme/topics/orders"
REF = TopicRef(Namespace.ONLINE, "acme", "orders")
CHECK_URL = "http://127.0.0.1:9/never"  # not asked: the transactions end before their timeout


@dataclasses.dataclass
class EvApi:
    client: TestClient
    store: Any
    h: dict[str, str]

    async def open(self) -> str:
        body = {"check_url": CHECK_URL, "timeout_s": 600}
        r = await self.client.post(T + "/transactions", json=body, headers=self.h)
        assert r.status == 201, await r.text()
        return str((await r.json())["transaction_id"])

    async def publish(self, body: Any, tx_id: str | None = None) -> tuple[int, Any]:
        params = {"transaction_id": tx_id} if tx_id is not None else {}
        r = await self.client.post(T + "/events", json=body, params=params, headers=self.h)
        return r.status, await r.json()

    async def decide(self, tx_id: str, action: str) -> dict[str, Any]:
        r = await self.client.post(f"{T}/transactions/{tx_id}/{action}", headers=self.h)
        assert r.status == 200, await r.text()
        return dict(await r.json())

    async def jobs_in(self, tx_id: str) -> int:
        r = await self.client.get(f"{T}/transactions/{tx_id}", headers=self.h)
        return int((await r.json())["jobs"])

    async def backlog(self) -> int:
        r = await self.client.get(T, headers=self.h)
        b = (await r.json())["backlog"]
        return int(b["high"] + b["medium"] + b["low"])

    async def deliveries(self, event_id: str) -> list[dict[str, Any]]:
        r = await self.client.get(f"{T}/events/{event_id}", headers=self.h)
        assert r.status == 200, await r.text()
        return list((await r.json())["deliveries"])


@pytest.fixture
async def evapi(settings: Settings) -> AsyncIterator[EvApi]:
    settings = dataclasses.replace(
        settings, push_allow_cidrs=(ipaddress.ip_network("127.0.0.0/8"),)
    )
    queues, config = await open_queues(settings), await open_config(settings)
    jobs, subs = open_jobs(settings), open_subscriptions(settings)
    store = open_transactions(settings)
    app = make_app(settings, ApiSettings(transaction_max_jobs=5), config, queues, jobs=jobs,
                   subscription_store=subs, transaction_store=store)  # fmt: skip
    client = TestClient(TestServer(app))
    await client.start_server()
    r = await client.post("/v1/tenants", json={"tenant": "acme"}, headers=ADMIN)
    h = {"Authorization": f"Bearer {(await r.json())['token']}"}
    r = await client.post("/v1/tenants/acme/topics", json={"topic": "orders", "qps": 300},
                          headers=ADMIN)  # fmt: skip
    for patterns in (["invoice.*"], ["*"], ["order.*"]):
        body = {"url": "https://hooks.example/in", "event_types": patterns}
        r = await client.post(T + "/subscriptions", json=body, headers=h)
        assert r.status == 201, await r.text()
    yield EvApi(client, store, h)
    await client.close()
    for closing in (store, subs, jobs, config, queues):
        await closing.aclose()


async def test_deliveries_are_prepared_then_queued_or_discarded(evapi: EvApi) -> None:
    tx = await evapi.open()
    events = {"events": [{"type": "invoice.paid", "payload": {"n": 1}}, {"type": "user.seen"}]}
    status, body = await evapi.publish(events, tx)
    assert status == 202, body
    assert body["transaction_id"] == tx and [e["deliveries"] for e in body["events"]] == [2, 1]
    paid = body["events"][0]["event_id"]
    assert await evapi.backlog() == 0 and await evapi.jobs_in(tx) == 3  # invisible to workers
    held = await evapi.deliveries(paid)
    assert [d["state"] for d in held] == ["prepared", "prepared"]
    assert {d["status"]["transaction_id"] for d in held} == {tx}
    r = await evapi.client.get(f"{T}/jobs/{held[0]['job_id']}", headers=evapi.h)
    assert (await r.json())["state"] == "prepared"

    done = await evapi.decide(tx, "commit")
    assert (done["state"], done["released"]) == ("committed", True)
    assert await evapi.backlog() == 3
    after = await evapi.deliveries(paid)
    assert [d["job_id"] for d in after] == [d["job_id"] for d in held]
    assert [d["state"] for d in after] == ["queued", "queued"]

    back = await evapi.open()
    status, body = await evapi.publish({"type": "order.made"}, back)
    assert status == 202 and body["deliveries"] == 2
    await evapi.decide(back, "rollback")
    assert await evapi.backlog() == 3 and await evapi.store.prepared_jobs(REF) == 0
    assert [d["state"] for d in await evapi.deliveries(body["event_id"])] == ["unknown"] * 2


async def test_closed_unknown_and_too_many_store_nothing(evapi: EvApi) -> None:
    committed, rolled = await evapi.open(), await evapi.open()
    await evapi.decide(committed, "commit")
    await evapi.decide(rolled, "rollback")
    for tx, state in ((committed, "committed"), (rolled, "rolled_back")):
        for event in ({"type": "invoice.paid"}, {"type": "nothing.matches"}):
            status, body = await evapi.publish(event, tx)
            assert status == 409 and body["error"]["code"] == "transaction_closed", body
            assert body["transaction"]["state"] == state
    status, body = await evapi.publish({"type": "invoice.paid"}, f"tx_{'0' * 22}")
    assert status == 404, body
    status, body = await evapi.publish({"type": "invoice.paid"}, "bad")
    assert (status, body["error"]["field"]) == (422, "transaction_id")
    tx = await evapi.open()
    three = {"events": [{"type": "invoice.paid"}] * 3}  # 6 deliveries; at most 5 in one
    status, body = await evapi.publish(three, tx)
    assert (status, body["error"]["field"]) == (413, "events")
    assert await evapi.jobs_in(tx) == 0 and await evapi.backlog() == 0
    assert await evapi.store.prepared_jobs(REF) == 0

    # An idempotent event sent twice into the transaction (a retry) is delivered once, and its
    # record names the deliveries that are queued
    once = {"type": "invoice.paid", "idempotency_key": "inv-7"}
    _, first = await evapi.publish(once, tx)
    _, again = await evapi.publish(once, tx)
    assert first["event_id"] == again["event_id"] and await evapi.jobs_in(tx) == 4
    await evapi.decide(tx, "commit")
    assert await evapi.backlog() == 2
    assert [d["state"] for d in await evapi.deliveries(first["event_id"])] == ["queued"] * 2


async def test_the_client_and_the_cli_publish_into_a_transaction(evapi: EvApi) -> None:
    url, token = str(evapi.client.make_url("")).rstrip("/"), evapi.h["Authorization"][7:]
    async with Client(url, token) as emq:
        async with emq.transaction("acme", "orders", check_url=CHECK_URL) as tx:
            sent = await tx.publish("invoice.paid", {"n": 1}, key="c1")
            assert (sent["deliveries"], sent["duplicates"]) == (2, 0)
            assert await evapi.backlog() == 0 and (await tx.show())["jobs"] == 2
        assert (await tx.show())["state"] == "committed" and await evapi.backlog() == 2
        with pytest.raises(RuntimeError):
            async with emq.transaction("acme", "orders", check_url=CHECK_URL) as failed:
                await failed.publish_events([{"type": "order.made"}, {"type": "user.seen"}])
                raise RuntimeError("the database commit failed")
        assert (await failed.show())["state"] == "rolled_back" and await evapi.backlog() == 2

        cli_tx = await evapi.open()
        env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
        env |= {"EMQ_API_URL": url, "EMQ_TOKEN": token}
        args = ("event", "publish", "acme", "orders", "--type", "order.made", "--transaction-id")
        said = []
        for tx_id in (cli_tx, "bad"):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "emq", *args, tx_id, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, err = await asyncio.wait_for(proc.communicate(), 30)
            said.append((proc.returncode, out.decode(), err.decode().strip()))
        assert said[0][0] == 0 and f"2 deliveries, prepared in transaction {cli_tx}" in said[0][1]
        code, _, err = said[1]  # the bad id: one line naming the field
        assert code != 0 and "transaction_id" in err and "\n" not in err, said[1]
        assert await evapi.jobs_in(cli_tx) == 2 and await evapi.backlog() == 2
