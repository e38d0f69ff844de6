"""Transactions through the API over real Redis and ZooKeeper (issue 30): open, prepare (both
routes), job status ``prepared``, commit and rollback (idempotent; the other decision is 409 with
the final state), the limits and bad input (one 4xx, nothing changed), and the check-back
against a real HTTP receiver on loopback: signed, answered commit, unknown until the topic's
default, unreachable, and a producer's commit racing it."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families
from standardwebhooks import Webhook

from emq.api import ApiSettings, make_app
from emq.compose import open_config, open_jobs, open_queues, open_transactions
from emq.core.model import Namespace, TopicRef
from emq.core.settings import Settings
from emq.core.transactions import TxState
from tests.api.conftest import ADMIN

T = "/v1/tenants/acme/topics/orders"
JOB = {"url": "https://example.com/hook", "body": "{}"}


@dataclasses.dataclass
class Receiver:
    """The producer's check_url: answers per path, remembers every request."""

    url: str
    answers: dict[str, Any]
    seen: list[tuple[str, dict[str, str], bytes]]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    seen: list[tuple[str, dict[str, str], bytes]] = []
    answers: dict[str, Any] = {}

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append((request.path, dict(request.headers), body))
        answer = answers.get(request.path, {"decision": "unknown"})
        if isinstance(answer, int):
            return web.Response(status=answer)
        return web.json_response(answer)

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield Receiver(f"http://127.0.0.1:{server.port}", answers, seen)
    await server.close()


@dataclasses.dataclass
class TxApi:
    client: TestClient
    queues: Any
    store: Any
    tenant: dict[str, str]
    secret: str

    async def open(self, check_url: str, timeout_s: int = 60, **kw: Any) -> dict[str, Any]:
        r = await self.client.post(
            T + "/transactions", json={"check_url": check_url, "timeout_s": timeout_s, **kw},
            headers=self.tenant,
        )  # fmt: skip
        assert r.status == 201, await r.text()
        return dict(await r.json())

    async def backlog(self) -> int:
        r = await self.client.get(T, headers=self.tenant)
        b = (await r.json())["backlog"]
        return int(b["high"] + b["medium"] + b["low"])

    async def show(self, tx_id: str) -> dict[str, Any]:
        r = await self.client.get(f"{T}/transactions/{tx_id}", headers=self.tenant)
        assert r.status == 200, await r.text()
        return dict(await r.json())

    async def until(self, tx_id: str, state: str, timeout_s: float = 10.0) -> dict[str, Any]:
        async with asyncio.timeout(timeout_s):
            while (shown := await self.show(tx_id))["state"] != state:
                await asyncio.sleep(0.05)
        return shown


@pytest.fixture
async def txapi(settings: Settings) -> AsyncIterator[TxApi]:
    settings = dataclasses.replace(
        settings, push_allow_cidrs=(ipaddress.ip_network("127.0.0.0/8"),)
    )
    api = ApiSettings(
        transaction_max_jobs=5,
        transaction_max_open=3,
        transaction_check_attempts=2,
        transaction_check_backoff_s=0.2,
        transaction_check_timeout_s=2.0,
        transaction_runner_interval_s=0.1,
    )
    queues = await open_queues(settings)
    config = await open_config(settings)
    store = open_transactions(settings)
    jobs = open_jobs(settings)
    app = make_app(settings, api, config, queues, jobs=jobs, transaction_store=store)
    client = TestClient(TestServer(app))
    await client.start_server()
    r = await client.post("/v1/tenants", json={"tenant": "acme"}, headers=ADMIN)
    tenant = {"Authorization": f"Bearer {(await r.json())['token']}"}
    r = await client.post("/v1/tenants/acme/topics", json={"topic": "orders", "qps": 300},
                          headers=ADMIN)  # fmt: skip
    secret = (await r.json())["secret"]
    yield TxApi(client, queues, store, tenant, secret)
    await client.close()
    await store.aclose()
    await jobs.aclose()
    await config.aclose()
    await queues.aclose()


async def test_prepare_commit_rollback_and_status(txapi: TxApi, receiver: Receiver) -> None:
    c, h = txapi.client, txapi.tenant
    tx = await txapi.open(receiver.url + "/never")
    assert (tx["state"], tx["jobs"], tx["timeout_s"]) == ("open", 0, 60)
    r = await c.post(f"{T}/transactions/{tx['transaction_id']}/jobs",
                     json={"jobs": [JOB, JOB | {"key": "k"}]}, headers=h)  # fmt: skip
    assert r.status == 202, await r.text()
    ids = (await r.json())["ids"]
    r = await c.post(f"{T}/jobs", params={"transaction_id": tx["transaction_id"]}, json=JOB,
                     headers=h)  # fmt: skip
    assert r.status == 202, await r.text()
    ids += (await r.json())["ids"]
    assert await txapi.backlog() == 0  # invisible to workers
    r = await c.get(f"{T}/jobs/{ids[0]}", headers=h)
    status = await r.json()
    assert (status["state"], status["transaction_id"]) == ("prepared", tx["transaction_id"])
    r = await c.post(f"{T}/transactions/{tx['transaction_id']}/commit", headers=h)
    done = await r.json()
    assert (r.status, done["state"], done["jobs"], done["released"]) == (200, "committed", 3, True)
    assert done["decision"]["source"] == "producer"
    assert await txapi.backlog() == 3
    r = await c.post(f"{T}/transactions/{tx['transaction_id']}/commit", headers=h)
    assert r.status == 200 and await txapi.backlog() == 3  # idempotent: nothing twice
    r = await c.post(f"{T}/transactions/{tx['transaction_id']}/rollback", headers=h)
    assert r.status == 409 and (await r.json())["transaction"]["state"] == "committed"
    r = await c.get(f"{T}/jobs/{ids[0]}", headers=h)
    assert (await r.json())["state"] != "prepared"

    back = await txapi.open(receiver.url + "/never")
    r = await c.post(f"{T}/transactions/{back['transaction_id']}/jobs", json=JOB, headers=h)
    assert r.status == 202
    for _ in range(2):
        r = await c.post(f"{T}/transactions/{back['transaction_id']}/rollback", headers=h)
        assert r.status == 200 and (await r.json())["state"] == "rolled_back"
    r = await c.post(f"{T}/transactions/{back['transaction_id']}/commit", headers=h)
    body = await r.json()
    assert r.status == 409 and body["error"]["code"] == "transaction_closed"
    assert body["transaction"]["decision"]["state"] == "rolled_back"
    r = await c.post(f"{T}/transactions/{back['transaction_id']}/jobs", json=JOB, headers=h)
    assert r.status == 409
    assert await txapi.backlog() == 3
    assert await txapi.store.prepared_jobs(TopicRef(Namespace.ONLINE, "acme", "orders")) == 0
    r = await c.get(f"{T}/transactions", headers=h)
    listed = [t["transaction_id"] for t in (await r.json())["transactions"]]
    assert listed == [back["transaction_id"], tx["transaction_id"]]


async def test_limits_and_bad_input_change_nothing(txapi: TxApi, receiver: Receiver) -> None:
    c, h = txapi.client, txapi.tenant
    cases: list[tuple[dict[str, Any], int, str | None]] = [
        ({}, 422, "check_url"),
        ({"check_url": "ftp://x.example/"}, 422, "check_url"),
        ({"check_url": "http://10.1.2.3/check"}, 422, "check_url"),  # private, not allowed
        ({"check_url": receiver.url, "timeout_s": 0}, 422, "timeout_s"),
        ({"check_url": receiver.url, "timeout_s": 86_401}, 422, "timeout_s"),
        ({"check_url": receiver.url, "other": 1}, 422, "other"),
    ]
    for body, status, field in cases:
        r = await c.post(T + "/transactions", json=body, headers=h)
        error = (await r.json())["error"]
        assert (r.status, error.get("field")) == (status, field), (body, error)
    r = await c.get(T + "/transactions", headers=h)
    assert (await r.json())["transactions"] == []
    tx = await txapi.open(receiver.url)
    path = f"{T}/transactions/{tx['transaction_id']}/jobs"
    r = await c.post(path, json={"jobs": [JOB] * 6}, headers=h)  # max 5 per transaction
    assert r.status == 413 and (await r.json())["error"]["field"] == "jobs"
    r = await c.post(path, json={"jobs": [JOB, {"url": "nope"}]}, headers=h)
    assert r.status == 422 and (await r.json())["error"]["field"] == "jobs[1].url"
    assert (await txapi.show(tx["transaction_id"]))["jobs"] == 0
    r = await c.post(path, json={"jobs": [JOB] * 5}, headers=h)
    assert r.status == 202
    r = await c.post(path, json=JOB, headers=h)
    assert r.status == 413
    r = await c.post(f"{T}/transactions/tx_{'0' * 22}/commit", headers=h)
    assert r.status == 404
    r = await c.post(f"{T}/jobs", params={"transaction_id": "bad"}, json=JOB, headers=h)
    assert r.status == 422
    for _ in range(2):
        await txapi.open(receiver.url)
    r = await c.post(T + "/transactions", json={"check_url": receiver.url}, headers=h)
    assert r.status == 429 and (await r.json())["error"]["code"] == "too_many_transactions"


async def test_check_back_decides_signed_with_backoff_and_default(
    txapi: TxApi, receiver: Receiver
) -> None:
    c, h = txapi.client, txapi.tenant
    receiver.answers["/yes"] = {"decision": "commit"}
    receiver.answers["/no"] = {"decision": "rollback"}
    receiver.answers["/broken"] = 500
    yes = await txapi.open(receiver.url + "/yes", timeout_s=1)
    no = await txapi.open(receiver.url + "/no", timeout_s=1)
    broken = await txapi.open(receiver.url + "/broken", timeout_s=1)
    for tx in (yes, no, broken):
        r = await c.post(f"{T}/transactions/{tx['transaction_id']}/jobs", json=JOB, headers=h)
        assert r.status == 202
    shown = await txapi.until(yes["transaction_id"], "committed")
    assert shown["decision"]["source"] == "check_back" and shown["checks"] == 1
    assert (await txapi.until(no["transaction_id"], "rolled_back"))["checks"] == 1
    shown = await txapi.until(broken["transaction_id"], "rolled_back")
    assert (shown["decision"]["source"], shown["checks"]) == ("default", 2)
    assert [e["event"] for e in shown["log"]] == ["created", "prepared", "check", "decided"]
    assert "HTTP 500" in shown["log"][2]["detail"]
    async with asyncio.timeout(5):
        while await txapi.backlog() != 1:  # the committed one's job, released
            await asyncio.sleep(0.05)
    _, headers, body = next(s for s in receiver.seen if s[0] == "/yes")
    signed = Webhook(txapi.secret).verify(body, headers)  # Standard Webhooks, topic's secret
    assert signed["transaction_id"] == yes["transaction_id"]

    # The topic's default applies after the bound; a commit racing the check-back loses to it
    r = await c.patch(T, json={"transaction_default": "commit"}, headers=ADMIN)
    assert r.status == 200 and (await r.json())["transaction_default"] == "commit"
    late = await txapi.open(receiver.url + "/unknown", timeout_s=1)
    shown = await txapi.until(late["transaction_id"], "committed")
    assert shown["decision"]["source"] == "default"
    r = await c.post(f"{T}/transactions/{late['transaction_id']}/rollback", headers=h)
    assert r.status == 409 and (await r.json())["transaction"]["state"] == "committed"


async def test_commit_racing_the_check_back_is_decided_once(
    txapi: TxApi, receiver: Receiver
) -> None:
    """The producer commits while the check-back asks (its receiver answers rollback slowly):
    whichever is stored first is the decision, the other gets it, and the jobs are in their
    queues exactly when the decision is commit."""
    c, h = txapi.client, txapi.tenant
    receiver.answers["/slow"] = {"decision": "rollback"}
    tx = await txapi.open(receiver.url + "/slow", timeout_s=1)
    r = await c.post(f"{T}/transactions/{tx['transaction_id']}/jobs", json={"jobs": [JOB] * 4},
                     headers=h)  # fmt: skip
    assert r.status == 202
    async with asyncio.timeout(10):
        while not receiver.seen:  # the check-back has asked
            await asyncio.sleep(0.01)
    r = await c.post(f"{T}/transactions/{tx['transaction_id']}/commit", headers=h)
    final = "rolled_back" if r.status == 409 else "committed"
    shown = await txapi.until(tx["transaction_id"], final)
    state = TxState(shown["state"])
    if r.status == 200:
        assert shown["decision"]["source"] == "producer"
    else:
        assert r.status == 409 and shown["decision"]["source"] == "check_back"
    await asyncio.sleep(0.3)  # a late runner step would show here
    assert await txapi.backlog() == (4 if state is TxState.COMMITTED else 0)


async def _metrics(txapi: TxApi) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """This API's /metrics as {(sample name, its labels but the topic's): value}, for acme's
    orders."""
    r = await txapi.client.get("/metrics")
    assert r.status == 200
    samples = {}
    for family in text_string_to_metric_families(await r.text()):
        for s in family.samples:
            if s.labels.get("tenant") == "acme" and s.labels.get("topic") == "orders":
                rest = {k: v for k, v in s.labels.items() if k not in ("tenant", "topic")}
                samples[(s.name, frozenset(rest.items()))] = s.value
    return samples


def _series(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset((labels | {"namespace": "online"}).items())


async def test_decisions_check_backs_and_open_transactions_in_the_metrics(
    txapi: TxApi, receiver: Receiver
) -> None:
    """/metrics counts each decision once by outcome and source (a repeated or refused one does
    not count), each check-back by its result, and shows the open transactions and prepared jobs
    of the topic when scraped."""
    c, h = txapi.client, txapi.tenant
    receiver.answers["/yes"] = {"decision": "commit"}
    receiver.answers["/broken"] = 503
    committed, rolled = await txapi.open(receiver.url), await txapi.open(receiver.url)
    for tx in (committed, rolled):
        r = await c.post(f"{T}/transactions/{tx['transaction_id']}/jobs", json=JOB, headers=h)
        assert r.status == 202
    for path in ("commit", "commit", "rollback"):  # the second commit is a repeat, then a 409
        await c.post(f"{T}/transactions/{committed['transaction_id']}/{path}", headers=h)
    await c.post(f"{T}/transactions/{rolled['transaction_id']}/rollback", headers=h)
    checked = await txapi.open(receiver.url + "/yes", timeout_s=1)
    broken = await txapi.open(receiver.url + "/broken", timeout_s=1)
    r = await c.post(f"{T}/transactions/{broken['transaction_id']}/jobs", json={"jobs": [JOB] * 3},
                     headers=h)  # fmt: skip
    assert r.status == 202
    early = await _metrics(txapi)  # (the first scrape reads the store)
    assert early[_series("emq_topic_open_transactions")] == 2
    assert early[_series("emq_topic_prepared_jobs")] == 3
    decisions = "emq_transaction_decisions_total"
    assert early[_series(decisions, outcome="committed", source="producer")] == 1
    assert early[_series(decisions, outcome="rolled_back", source="producer")] == 1
    await txapi.until(checked["transaction_id"], "committed")
    await txapi.until(broken["transaction_id"], "rolled_back")
    await asyncio.sleep(1.0)  # the gauges are read at most once a second
    late = await _metrics(txapi)
    assert late[_series(decisions, outcome="committed", source="check_back")] == 1
    assert late[_series(decisions, outcome="rolled_back", source="default")] == 1
    assert late[_series(decisions, outcome="committed", source="producer")] == 1
    checks = "emq_transaction_checks_total"
    assert late[_series(checks, result="commit")] == 1
    assert late[_series(checks, result="http_error")] == 2  # the policy's 2 asks
    assert late[_series("emq_topic_open_transactions")] == 0
    assert late[_series("emq_topic_prepared_jobs")] == 0
