"""The API's transactions (:mod:`emq.core.transactions`): open, prepare jobs, commit, rollback.

Routes (``T`` = ``/v1/tenants/{tenant}/topics/{topic}``, tenant token or admin):

=====  ==========================================  =========================================
POST   T/transactions                              open one: ``{check_url, timeout_s?}`` → 201
GET    T/transactions                              the topic's, newest first
GET    T/transactions/{id}                         one, with its decision and log
POST   T/transactions/{id}/jobs                    prepare jobs (an enqueue's body) → 202
POST   T/jobs?transaction_id={id}                  the same, on the enqueue route
POST   T/transactions/{id}/commit                  → 200; 409 if rolled back
POST   T/transactions/{id}/rollback                → 200; 409 if committed
=====  ==========================================  =========================================

Commit and rollback are idempotent: deciding what is decided already answers 200 with it; the
other decision answers 409 with the final state. A commit stores the decision, then releases
the jobs into their queues at once; if that is cut short (this process dies, Redis blips) a
runner finishes it (:mod:`emq.api.checkback`), so the 200 says the decision is stored and every
job will be delivered.

Prepared jobs count against the topic's ``max_backlog`` when they are prepared (what waits in
the queues plus every prepared job of the topic), so that a commit, which cannot be refused,
never lands a topic far above it. :meth:`Transactions.prepare` takes jobs already validated and
:meth:`Transactions.prepare_items` placed queue entries, so other producers of jobs prepare
theirs too: ``POST T/events?transaction_id={id}`` prepares an event's deliveries
(:mod:`emq.api.events`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, NotRequired

from aiohttp import web
from pydantic import Field
from typing_extensions import TypedDict

from emq.api import checkback, jsonbody
from emq.api.checkback import CheckBackAsker, TransactionRunner
from emq.api.enqueue import Accepted, BacklogGuard, parse_body
from emq.api.transaction_metrics import TransactionMetrics
from emq.core import schema
from emq.core.errors import BackendUnavailable, InvalidInput, NotFound, PayloadTooLarge
from emq.core.interfaces import PutItem, PutResult
from emq.core.model import Job, Topic, TopicRef
from emq.core.outbound import push_url
from emq.core.schema.transactions import EnqueueQuery, TransactionIn, TransactionsQuery
from emq.core.transactions import (
    CheckPolicy,
    Source,
    Transaction,
    TransactionClosed,
    TransactionLimits,
    TransactionStore,
    TxState,
    is_transaction_id,
    new_transaction_id,
)

if TYPE_CHECKING:
    from emq.api.app import Api

_TOPIC = "/v1/tenants/{tenant}/topics/{topic}"
PATH = _TOPIC + "/transactions"


class TransactionDecision(TypedDict):
    state: Literal["committed", "rolled_back"]
    source: Annotated[
        str | None, Field(description="producer, check_back (its check_url) or default")
    ]
    detail: str
    at: float | None


class TransactionLogEntry(TypedDict):
    at_ms: int
    event: Annotated[str, Field(description="created, prepared, check, decided or released")]
    detail: str


class TransactionView(TypedDict):
    transaction_id: str
    tenant: str
    topic: str
    namespace: str
    state: Literal["open", "committed", "rolled_back"]
    jobs: Annotated[int, Field(description="jobs prepared in it")]
    check_url: str
    timeout_s: int
    created_at: float
    deadline_at: Annotated[float, Field(description="when the check-back starts if still open")]
    checks: Annotated[int, Field(description="check-backs asked so far")]
    next_check_at: float | None
    decision: TransactionDecision | None
    released: Annotated[bool, Field(description="a committed one's jobs are all in their queues")]
    log: NotRequired[list[TransactionLogEntry]]


class TransactionList(TypedDict):
    transactions: list[TransactionView]


class Prepared(TypedDict):
    ids: list[str]
    duplicates: int
    transaction_id: str


def _iso_s(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


def view(tx: Transaction, *, with_log: bool = True) -> dict[str, Any]:
    """A transaction as the API shows it."""
    out: dict[str, Any] = {
        "transaction_id": tx.id,
        "tenant": tx.topic.tenant,
        "topic": tx.topic.topic,
        "namespace": tx.topic.namespace.value,
        "state": tx.state.value,
        "jobs": tx.jobs,
        "check_url": tx.check_url,
        "timeout_s": tx.timeout_s,
        "created_at": _iso_s(tx.created_ms),
        "deadline_at": _iso_s(tx.deadline_ms),
        "checks": tx.checks,
        "next_check_at": _iso_s(tx.next_check_ms) if tx.state is TxState.OPEN else None,
        "decision": None,
        "released": tx.released,
    }
    if tx.state is not TxState.OPEN:
        out["decision"] = {
            "state": tx.state.value,
            "source": tx.source.value if tx.source else None,
            "detail": tx.detail,
            "at": _iso_s(tx.decided_ms),
        }
    if with_log:
        out["log"] = [e.to_dict() for e in tx.log]
    return out


def check_url(text: str, allow: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> str:
    """A check_url the runner can ask: a push URL (:func:`push_url`), and no IP literal the
    SSRF rules refuse (a host name is judged by its addresses when it is asked)."""
    try:
        url = push_url(text)
    except InvalidInput as e:
        raise InvalidInput("check_url", e.message) from None
    try:
        ip = ipaddress.ip_address(url.raw_host or "")
    except ValueError:
        return text
    if (not ip.is_global or ip.is_multicast) and not any(ip in net for net in allow):
        raise InvalidInput(
            "check_url", f"host {ip} is not public (allow it with EMQ_PUSH_ALLOW_CIDRS)"
        )
    return text


class Transactions:
    """The transactions of one API process: its routes, and the calls other modules use."""

    def __init__(self, api: Api, store: TransactionStore | None) -> None:
        self.api = api
        self._store = store
        s = api.api
        self.limits = TransactionLimits(s.transaction_max_jobs, s.transaction_max_open)
        self.policy = CheckPolicy(
            attempts=s.transaction_check_attempts,
            backoff_s=s.transaction_check_backoff_s,
            timeout_s=s.transaction_check_timeout_s,
        )
        self.guard = BacklogGuard(api.queues, s.backlog_refresh_s)
        ns = api.settings.namespace
        self.metrics = TransactionMetrics(api.metrics.registry, store, api.config, ns)
        api.metrics.refreshers.append(self.metrics.refresh)

    @property
    def store(self) -> TransactionStore:
        if self._store is None:
            raise BackendUnavailable("transactions are not served by this API (no store)")
        return self._store

    # ------------------------------------------------------------------ calls

    async def open(self, ref: TopicRef, url: str, timeout_s: int) -> Transaction:
        now = int(time.time() * 1000)
        tx = Transaction(
            new_transaction_id(), ref, url, timeout_s, now, next_check_ms=now + timeout_s * 1000
        )
        await self.store.create(tx, self.limits)
        return await self.store.get(ref, tx.id)

    async def prepare(self, topic: Topic, tx_id: str, jobs: Sequence[Job]) -> Accepted:
        """Store validated ``jobs`` in open transaction ``tx_id`` of ``topic``, all or none."""
        if len(jobs) > self.limits.max_jobs:  # before placing them
            limit = self.limits.max_jobs
            raise PayloadTooLarge("jobs", f"more than {limit} jobs in one transaction")
        results = await self.prepare_items(topic, tx_id, self.api.enqueuer.place(topic, jobs))
        return Accepted([r.job_id for r in results], 0)

    async def prepare_items(
        self, topic: Topic, tx_id: str, items: Sequence[PutItem], *, field: str = "jobs"
    ) -> list[PutResult]:
        """Store placed queue entries (jobs', events' deliveries) in open transaction ``tx_id``
        of ``topic``, all or none; their results (never duplicates: an idempotency key is
        checked when the transaction is released, where a taken one drops its job). With no
        items the transaction must still be open (:class:`TransactionClosed` otherwise)."""
        if len(items) > self.limits.max_jobs:
            limit = self.limits.max_jobs
            raise PayloadTooLarge(field, f"more than {limit} jobs in one transaction")
        if not items:
            tx = await self.store.get(topic.ref, tx_id)
            if tx.state is not TxState.OPEN:
                raise TransactionClosed(f"transaction {tx_id} is {tx.state.value}", tx)
            return []
        prepared = await self.store.prepared_jobs(topic.ref)
        await self.guard.check(topic, len(items) + prepared)
        await self.store.prepare(topic.ref, tx_id, items, self.limits)
        return [PutResult(i.job_id) for i in items]

    async def decide(self, ref: TopicRef, tx_id: str, state: TxState) -> Transaction:
        """The producer's commit or rollback: :class:`TransactionClosed` if it was decided the
        other way; a commit's jobs are released at once (a runner finishes what is cut short)."""
        tx, changed = await self.store.decide(ref, tx_id, state, Source.PRODUCER, "")
        if changed:
            self.metrics.decided(ref, tx.state, Source.PRODUCER)
        if tx.state is not state:
            source = tx.source.value if tx.source else "?"
            raise TransactionClosed(f"transaction {tx_id} is {tx.state.value} ({source})", tx)
        if tx.state is TxState.COMMITTED and not tx.released:
            # The decision is stored: if this is cut short, a runner releases the jobs.
            with contextlib.suppress(BackendUnavailable):
                tx = await self.store.release(ref, tx_id)
        return tx

    # ------------------------------------------------------------------ routes

    async def _target(self, request: web.Request) -> tuple[TopicRef, str]:
        await self.api.auth.tenant_or_admin(request, request.match_info["tenant"])
        ref = self.api.topic_ref(request)
        tx_id = request.match_info["transaction_id"]
        if not is_transaction_id(tx_id):
            raise NotFound(f"no transaction {tx_id!r}")
        await self.api.config.get_topic(ref)
        return ref, tx_id

    async def create(self, request: web.Request) -> web.Response:
        await self.api.auth.tenant_or_admin(request, request.match_info["tenant"])
        ref = self.api.topic_ref(request)
        body = schema.validate(TransactionIn, await self.api.json_object(request))
        url = check_url(body.check_url, self.api.settings.push_allow_cidrs)
        await self.api.config.get_topic(ref)
        tx = await self.open(ref, url, body.timeout_s)
        return web.json_response(view(tx), status=201)

    async def latest(self, request: web.Request) -> web.Response:
        await self.api.auth.tenant_or_admin(request, request.match_info["tenant"])
        query = schema.query(TransactionsQuery, request.query)
        ref = self.api.topic_ref(request, query)
        await self.api.config.get_topic(ref)
        found = await self.store.latest(ref, query.limit)
        return web.json_response({"transactions": [view(t, with_log=False) for t in found]})

    async def show(self, request: web.Request) -> web.Response:
        ref, tx_id = await self._target(request)
        return web.json_response(view(await self.store.get(ref, tx_id)))

    async def commit(self, request: web.Request) -> web.Response:
        return await self._decide(request, TxState.COMMITTED)

    async def rollback(self, request: web.Request) -> web.Response:
        return await self._decide(request, TxState.ROLLED_BACK)

    async def _decide(self, request: web.Request, state: TxState) -> web.Response:
        ref, tx_id = await self._target(request)
        try:
            tx = await self.decide(ref, tx_id, state)
        except TransactionClosed as e:
            return closed_response(e)
        return web.json_response(view(tx))

    async def jobs(self, request: web.Request) -> web.Response:
        """``POST T/transactions/{id}/jobs``: an enqueue's body, prepared."""
        ref, tx_id = await self._target(request)
        return await self._prepare(request, ref, tx_id)

    async def enqueue(self, request: web.Request) -> web.Response:
        """``POST T/jobs?transaction_id=...`` (the enqueue route hands these over)."""
        await self.api.auth.tenant_or_admin(request, request.match_info["tenant"])
        query = schema.query(EnqueueQuery, request.query)
        ref = self.api.topic_ref(request, query)
        return await self._prepare(request, ref, query.transaction_id)

    async def _prepare(self, request: web.Request, ref: TopicRef, tx_id: str) -> web.Response:
        body = await self.api.read_object(request)
        raw = body.get("jobs")
        if isinstance(raw, list) and len(raw) > self.api.api.max_batch_jobs:
            limit = self.api.api.max_batch_jobs
            raise PayloadTooLarge("jobs", f"more than {limit} jobs in one request")
        topic = await self.api.config.get_topic(ref)
        jobs = parse_body(body, self.api.enqueuer.limits)
        try:
            accepted = await self.prepare(topic, tx_id, jobs)
        except TransactionClosed as e:
            return closed_response(e)
        answer = {"ids": accepted.ids, "duplicates": 0, "transaction_id": tx_id}
        return web.json_response(answer, status=202, dumps=jsonbody.encode)

    async def job_status(self, topic: Topic, job_id: str) -> dict[str, Any] | None:
        """A prepared job's status (state ``prepared``), or None if it is not one."""
        if self._store is None:
            return None
        tx_id = await self._store.find_job(topic.ref, job_id)
        if tx_id is None:
            return None
        return {
            "id": job_id,
            "topic": topic.ref.topic,
            "state": "prepared",
            "transaction_id": tx_id,
            "reason": {
                "code": "transaction",
                "detail": f"held until transaction {tx_id} commits (then queued), "
                "or discarded if it rolls back",
            },
        }


def closed_response(e: TransactionClosed) -> web.Response:
    body = {
        "error": {"code": e.code, "message": e.message},
        "transaction": view(e.transaction, with_log=False),
    }
    return web.json_response(body, status=409)


TRANSACTIONS_KEY = web.AppKey("emq_transactions", Transactions)


def runner_context(api: Api, store: TransactionStore) -> Any:
    """The app's ``cleanup_ctx`` that runs this process's runner (:mod:`emq.api.checkback`)."""
    tx = api.transactions
    policy = tx.policy if tx is not None else CheckPolicy()
    metrics = tx.metrics if tx is not None else None
    asker = CheckBackAsker(api.settings.push_allow_cidrs, policy.timeout_s,
                           metrics.checked if metrics else None)  # fmt: skip
    interval = api.api.transaction_runner_interval_s
    runner = TransactionRunner(store, api.config, policy, asker, interval_s=interval,
                               on_decided=metrics.decided if metrics else None)  # fmt: skip
    return checkback.runner_context(runner, asker)


def add_routes(app: web.Application, api: Api, store: TransactionStore | None) -> Transactions:
    """Register the transaction routes on the API's app; the handlers are returned (the enqueue
    and job-status routes hand transactional requests to them)."""
    routes = Transactions(api, store)
    app[TRANSACTIONS_KEY] = routes
    app.router.add_routes(
        [
            web.post(PATH, routes.create),
            web.get(PATH, routes.latest),
            web.get(PATH + "/{transaction_id}", routes.show),
            web.post(PATH + "/{transaction_id}/jobs", routes.jobs),
            web.post(PATH + "/{transaction_id}/commit", routes.commit),
            web.post(PATH + "/{transaction_id}/rollback", routes.rollback),
        ]
    )
    return routes
