"""A property of transactions (issue 30), in memory with the real runner: over random
prepares, commits, rollbacks, check-back answers and crashes of a committing process (its
release cut short after some groups), no job of a transaction that is not committed is ever in
a queue, no job is there twice, and once the runner has run every committed job is there."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.memory_config import MemoryConfigStore
from adapters.memory_queue import MemoryQueueBackend
from adapters.memory_transactions import MemoryTransactionStore
from emq.api.checkback import TransactionRunner
from emq.core.errors import BackendUnavailable
from emq.core.interfaces import ZERO_OFFSET, PutItem
from emq.core.model import Namespace, Priority, Tenant, Topic, TopicRef
from emq.core.transactions import (
    CheckPolicy,
    Source,
    Transaction,
    TransactionClosed,
    TransactionLimits,
    TxState,
    new_transaction_id,
)

TOPIC = TopicRef(Namespace.ONLINE, "acme", "orders")
GROUPS = 3
LIMITS = TransactionLimits(max_jobs=100, max_open=100)

ops = st.lists(
    st.tuples(
        st.sampled_from(["open", "prepare", "commit", "rollback", "crash_commit", "expire", "run"]),
        st.integers(0, 2),  # which transaction (modulo those opened)
        st.integers(1, 4),  # jobs to prepare / groups a crash leaves released
    ),
    min_size=3,
    max_size=25,
)


class Answers:
    """The check-back: what each transaction's check_url says (unknown unless set)."""

    def __init__(self) -> None:
        self.decisions: dict[str, str] = {}
        self.given: dict[str, str | None] = {}  # the last answer each one got

    async def ask(self, tx: Transaction, topic: Topic) -> tuple[str | None, str]:
        decision = self.decisions.get(tx.id)
        decision = None if decision == "unknown" else decision
        self.given[tx.id] = decision
        return decision, f"answered {decision}"


async def visible(queues: MemoryQueueBackend) -> list[str]:
    found = []
    for g in range(GROUPS):
        read = await queues.read({q: ZERO_OFFSET for q in TOPIC.group(g).queues()}, 10_000)
        found += [json.loads(e.payload)["id"] for entries in read.values() for e in entries]
    return found


async def scenario(steps: list[tuple[str, int, int]]) -> None:
    now = [time.time()]
    queues = MemoryQueueBackend()
    store = MemoryTransactionStore(queues, clock=lambda: now[0])
    config = MemoryConfigStore()
    await config.create_tenant(Tenant("acme", "", "", 0.0))
    await config.create_topic(Topic(TOPIC, 30, GROUPS))
    answers = Answers()
    policy = CheckPolicy(attempts=2, backoff_s=0.001)

    def clock() -> float:  # time passes while the runner works (a check may fall due again)
        now[0] += 0.004
        return now[0]

    runner = TransactionRunner(store, config, policy, answers, clock=clock)
    txs: list[str] = []
    jobs: dict[str, list[str]] = {}
    serial = 0
    for op, which, n in steps:
        if op == "open" or not txs:
            tx_id = new_transaction_id()
            start = int(now[0] * 1000)
            tx = Transaction(tx_id, TOPIC, "https://p.example/", 1, start, next_check_ms=start)
            await store.create(tx, LIMITS)
            txs.append(tx_id)
            jobs[tx_id] = []
            continue
        tx_id = txs[which % len(txs)]
        if op == "prepare":
            items = []
            for _ in range(n):
                serial += 1
                job_id = f"msg_{serial}"
                payload = json.dumps({"id": job_id, "t": 0, "job": {}}).encode()
                queue = TOPIC.group(serial % GROUPS).queue(Priority.MEDIUM)
                items.append(PutItem(queue, job_id, payload))
            with contextlib.suppress(TransactionClosed):
                await store.prepare(TOPIC, tx_id, items, LIMITS)
                jobs[tx_id] += [i.job_id for i in items]
        elif op in ("commit", "rollback"):
            state = TxState.COMMITTED if op == "commit" else TxState.ROLLED_BACK
            tx, _ = await store.decide(TOPIC, tx_id, state, Source.PRODUCER, "")
            if tx.state is TxState.COMMITTED:
                await store.release(TOPIC, tx_id)
        elif op == "crash_commit":  # the process dies during its release
            tx, _ = await store.decide(TOPIC, tx_id, TxState.COMMITTED, Source.PRODUCER, "")
            store.fail_release_after = n % GROUPS
            with contextlib.suppress(BackendUnavailable):
                await store.release(TOPIC, tx_id)
            store.fail_release_after = None
        elif op == "expire":  # its check-back will answer this
            answers.decisions[tx_id] = ["commit", "rollback", "unknown"][n % 3]
        else:
            now[0] += 2.0
            await runner.tick()
        seen = await visible(queues)
        assert len(seen) == len(set(seen)), "a job is in a queue twice"
        committed = set()
        for t in txs:
            if (await store.get(TOPIC, t)).state is TxState.COMMITTED:
                committed |= set(jobs[t])
        assert set(seen) <= committed, "a job of an uncommitted transaction is visible"
    # Every transaction still open is decided by its check-back or the default (after two
    # asks) and every committed one is released: run until nothing is left.
    for _ in range(5):
        now[0] += 5.0
        await runner.tick()
    final = {t: (await store.get(TOPIC, t)) for t in txs}
    assert all(tx.state is not TxState.OPEN for tx in final.values())
    committed = {j for t, tx in final.items() if tx.state is TxState.COMMITTED for j in jobs[t]}
    seen = await visible(queues)
    assert sorted(seen) == sorted(committed), "a committed job is lost (or an extra one is there)"
    for t, tx in final.items():
        if tx.source is Source.DEFAULT:
            assert tx.state is TxState.ROLLED_BACK  # the topic's default
        if tx.source is Source.CHECK_BACK:
            said = "commit" if tx.state is TxState.COMMITTED else "rollback"
            assert answers.given[t] == said


@settings(max_examples=150)
@given(ops)
def test_no_uncommitted_job_delivered_and_no_committed_job_lost(steps: Any) -> None:
    asyncio.run(scenario(steps))
