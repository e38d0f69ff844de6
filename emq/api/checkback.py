"""The transactions' runner: check-backs of transactions open past their timeout, and the
release of committed transactions whose committing process did not finish it.

Where it runs: in every ``emq api`` process (one runner each, tied to the app's lifetime). The
API already holds what it needs (the transaction store, the topics' secrets and defaults, the
SSRF rules), a check-back is a control-plane call rather than a delivery paced by the topic's
quota, and the workers' hot path stays as it is. With no API running nothing is decided, but no
transaction can be opened or committed either; the first API to start catches up.

Two runners (two API processes, or ``emq api --workers N``) are safe together:

* each looks only at topics the store's index says are due, and takes a topic for a lease
  first (:meth:`~emq.core.transactions.TransactionStore.claim_topic`), so they mostly split
  the work instead of repeating it;
* each check-back is taken by a compare-and-set on the transaction's next check time
  (:meth:`~emq.core.transactions.TransactionStore.claim_check`), so one ask goes out per due
  time, whoever runs; a runner that stalls past that lease lets another ask again, which only
  repeats a question;
* every decision is a compare-and-set from ``open``: the first one stored wins (a producer's
  commit racing the check-back's default included), the other learns the final state;
* a release is idempotent per group (see :mod:`emq.core.transactions`).

A runner's tick, per due topic::

    claimed --release each committed, unreleased transaction-->
            --ask each open transaction past its next check (concurrently)-->
            --settle: look again at the earliest next check (or never, if nothing is left)

An ask: ``POST check_url`` with ``{"type": "transaction.check", "transaction_id", ...}``, signed
with the topic's secret (Standard Webhooks), to an address the SSRF rules allow, redirects not
followed, within ``CheckPolicy.timeout_s``. A 2xx answer ``{"decision": "commit"|"rollback"}``
decides (source ``check_back``); ``unknown``, another answer, or none is noted in the
transaction's log and asked again after the policy's backoff; after the last ask the topic's
``transaction_default`` decides (source ``default``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Protocol

import aiohttp
from aiohttp import web

from emq.core.errors import BackendUnavailable, EmqError, NotFound
from emq.core.interfaces import ConfigStore
from emq.core.model import Topic, TopicRef
from emq.core.tasks import raise_if_cancelling
from emq.core.transactions import (
    CheckPolicy,
    Source,
    Transaction,
    TransactionStore,
    TxState,
    decision_state,
)
from worker.signing import signature_headers
from worker.ssrf import AddressPolicy, GuardedResolver

log = logging.getLogger(__name__)

MAX_ANSWER_BYTES = 64 * 1024
# Check-backs a runner has in flight at once: each may hold a thread of the loop's default
# executor while its host name resolves, and the API needs the rest of them.
CHECKS_AT_ONCE = 4
TOPICS_PER_TICK = 100


class Asker(Protocol):
    async def ask(self, tx: Transaction, topic: Topic) -> tuple[str | None, str]:
        """The decision (``commit``/``rollback``) and what was heard, or None and why not."""


class CheckBackAsker:
    """Asks check URLs over HTTP with the SSRF rules (:mod:`worker.ssrf`)."""

    def __init__(
        self,
        allow: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network],
        timeout_s: float,
        on_result: Callable[[TopicRef, str], None] | None = None,
    ) -> None:
        # on_result(topic, result) after each ask: commit, rollback, unknown, http_error,
        # invalid or unreachable (emq.api.transaction_metrics counts them)
        self._on_result = on_result
        self._policy = AddressPolicy(allow)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            # force_close: one request per connection, nothing left on a reused one
            connector = aiohttp.TCPConnector(
                resolver=GuardedResolver(self._policy), force_close=True
            )
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        return self._session

    async def ask(self, tx: Transaction, topic: Topic) -> tuple[str | None, str]:
        result, decision, heard = await self._ask(tx, topic)
        if self._on_result is not None:
            self._on_result(tx.topic, result)
        return decision, heard

    async def _ask(self, tx: Transaction, topic: Topic) -> tuple[str, str | None, str]:
        """(what came back, the decision or None, what was heard)."""
        body = json.dumps(
            {
                "type": "transaction.check",
                "transaction_id": tx.id,
                "namespace": tx.topic.namespace.value,
                "tenant": tx.topic.tenant,
                "topic": tx.topic.topic,
                "jobs": tx.jobs,
                "created_at": tx.created_ms / 1000,
                "check": tx.checks,
            },
            separators=(",", ":"),
        )
        headers = {"Content-Type": "application/json"}
        headers |= signature_headers(topic.secret, f"{tx.id}.{tx.checks}", time.time(), body)
        try:
            async with self._http().post(
                tx.check_url, data=body.encode(), headers=headers, allow_redirects=False
            ) as response:
                raw = await response.content.read(MAX_ANSWER_BYTES)
                status = response.status
        except (aiohttp.ClientError, OSError, TimeoutError, EmqError) as e:
            return "unreachable", None, f"check_url unreachable: {type(e).__name__}: {e}"[:300]
        if not 200 <= status < 300:
            return "http_error", None, f"check_url answered HTTP {status}"
        try:
            decision = json.loads(raw).get("decision")
        except (ValueError, AttributeError):
            return "invalid", None, "check_url answered something that is not a JSON object"
        if decision in ("commit", "rollback"):
            return str(decision), str(decision), f"check_url answered {decision}"
        if decision == "unknown":
            return "unknown", None, "check_url answered unknown"
        said = f"check_url answered an unknown decision: {str(decision)[:40]!r}"
        return "invalid", None, said

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class TransactionRunner:
    """See the module docstring."""

    def __init__(
        self,
        store: TransactionStore,
        config: ConfigStore,
        policy: CheckPolicy,
        asker: Asker,
        *,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        on_decided: Callable[[TopicRef, TxState, Source], None] | None = None,
    ) -> None:
        self._on_decided = on_decided  # after each decision this runner stored
        self._clock = clock
        self._store = store
        self._config = config
        self._policy = policy
        self._asker = asker
        self._interval_s = interval_s
        self._checking = asyncio.Semaphore(CHECKS_AT_ONCE)
        # A topic is held while its check-backs run (at most one timeout each, concurrently);
        # a runner that dies holding it delays the topic's work by this much.
        self._lease_ms = int((2 * policy.timeout_s + interval_s) * 1000)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    async def run(self) -> None:
        while True:
            raise_if_cancelling()
            try:
                await self.tick()
            except BackendUnavailable as e:
                log.warning("transactions runner: %s", e)
            except Exception:
                raise_if_cancelling()
                log.exception("transactions runner: unexpected error")
            await asyncio.sleep(self._interval_s)

    async def tick(self) -> None:
        now = self._now_ms()
        for topic in await self._store.due_topics(now, TOPICS_PER_TICK):
            claim = await self._store.claim_topic(topic, now, self._lease_ms)
            if claim is None:
                continue
            try:
                await self._work(topic, now)
            finally:
                due, releasing, later = await self._store.pending(topic, self._now_ms())
                if due or releasing:  # due again meanwhile, or a release cut short: next tick
                    later = self._now_ms() + int(self._interval_s * 1000)
                await self._store.settle_topic(claim, later)

    async def _work(self, topic: TopicRef, now: int) -> None:
        due, releasing, _ = await self._store.pending(topic, now)
        for tx_id in releasing:
            tx = await self._store.release(topic, tx_id)
            log.info("transaction %s of %s: %d jobs released", tx_id, topic, tx.jobs)
        if due:
            await asyncio.gather(*(self._check(topic, tx_id) for tx_id in due))

    async def _check(self, ref: TopicRef, tx_id: str) -> None:
        async with self._checking:  # taken before the claim: a claim's lease is for asking
            await self._ask(ref, tx_id)

    async def _ask(self, ref: TopicRef, tx_id: str) -> None:
        lease = int((self._policy.timeout_s + 5) * 1000)
        tx = await self._store.claim_check(ref, tx_id, self._now_ms(), lease)
        if tx is None:
            return  # another runner asks, or it was decided meanwhile
        try:
            topic = await self._config.get_topic(ref)
        except NotFound:
            await self._decide(ref, tx_id, TxState.ROLLED_BACK, Source.DEFAULT, "topic deleted")
            return
        decision, heard = await self._asker.ask(tx, topic)
        state = decision_state(decision) if decision is not None else None
        if state is not None:
            await self._decide(ref, tx_id, state, Source.CHECK_BACK, heard)
            return
        delay = self._policy.retry_in_ms(tx.checks)
        if delay is None:
            default = decision_state(topic.transaction_default) or TxState.ROLLED_BACK
            said = f"{heard}; {tx.checks} checks without a decision"
            await self._decide(ref, tx_id, default, Source.DEFAULT, said)
            return
        said = f"check {tx.checks}: {heard}"
        await self._store.note_check(ref, tx_id, self._now_ms() + delay, said)

    async def _decide(
        self, ref: TopicRef, tx_id: str, state: TxState, source: Source, detail: str
    ) -> None:
        tx, changed = await self._store.decide(ref, tx_id, state, source, detail)
        if changed and self._on_decided is not None:
            self._on_decided(ref, tx.state, source)
        if changed:
            log.info("transaction %s of %s: %s by %s (%s)", tx_id, ref, tx.state.value,
                     source.value, detail)  # fmt: skip
        if tx.state is TxState.COMMITTED and not tx.released:
            await self._store.release(ref, tx_id)


def runner_context(runner: TransactionRunner, asker: CheckBackAsker):  # type: ignore[no-untyped-def]
    """An aiohttp ``cleanup_ctx`` running ``runner`` while the app runs."""

    async def context(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(runner.run(), name="emq-transactions-runner")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asker.aclose()

    return context
