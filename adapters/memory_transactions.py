"""Transactions in process memory (:class:`~emq.core.transactions.TransactionStore`): the Redis
store's rules, for tests and one process.

Each method runs without an ``await`` between its reads and writes, so it is as atomic as the
Redis store's scripts. The release appends each group's jobs with one ``put`` to the queue
backend it was given, after marking the group released, like the Redis store's per-group marker;
``fail_release_after`` (tests) stops a release after that many groups, as a process that dies
half-way would.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Sequence

from emq.core.errors import BackendUnavailable, NotFound, PayloadTooLarge
from emq.core.interfaces import JobProducer, PutItem
from emq.core.model import TopicRef
from emq.core.transactions import (
    LOG_MAX,
    LogEntry,
    Pending,
    Source,
    TooManyTransactions,
    TopicClaim,
    Transaction,
    TransactionClosed,
    TransactionLimits,
    TransactionStore,
    TxState,
)


class MemoryTransactionStore(TransactionStore):
    def __init__(self, queues: JobProducer, *, clock: Callable[[], float] = time.time) -> None:
        self._queues = queues
        self._clock = clock
        self._txs: dict[tuple[TopicRef, str], Transaction] = {}
        self._items: dict[tuple[TopicRef, str], list[PutItem]] = {}
        self._released_groups: set[tuple[TopicRef, str, int]] = set()
        self._index: dict[TopicRef, int] = {}  # topic -> when to look at it
        self._generation: dict[TopicRef, int] = {}
        self.fail_release_after: int | None = None
        self.closed = False

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _open(self) -> None:
        if self.closed:
            raise BackendUnavailable("the in-memory transaction store is closed")

    def _tx(self, topic: TopicRef, tx_id: str) -> Transaction:
        tx = self._txs.get((topic, tx_id))
        if tx is None:
            raise NotFound(f"no transaction {tx_id} in topic {topic}")
        return tx

    def _log(self, tx: Transaction, event: str, said: str, **changes: object) -> Transaction:
        entry = LogEntry(self._now_ms(), event, said)
        new = dataclasses.replace(tx, log=(*tx.log, entry)[-LOG_MAX:], **changes)  # type: ignore[arg-type]
        self._txs[(tx.topic, tx.id)] = new
        return new

    def _note_topic(self, topic: TopicRef, at_ms: int) -> None:
        self._index[topic] = min(self._index.get(topic, at_ms), at_ms)
        self._generation[topic] = self._generation.get(topic, 0) + 1

    async def create(self, tx: Transaction, limits: TransactionLimits) -> None:
        self._open()
        open_now = sum(
            1 for (t, _), x in self._txs.items() if t == tx.topic and x.state is TxState.OPEN
        )
        if open_now >= limits.max_open:
            raise TooManyTransactions(
                f"topic {tx.topic} has {open_now} open transactions (at most {limits.max_open})",
                retry_after_s=1.0,
            )
        self._txs[(tx.topic, tx.id)] = tx
        self._items[(tx.topic, tx.id)] = []
        self._log(tx, "created", f"timeout {tx.timeout_s} s, check_url {tx.check_url}")
        self._note_topic(tx.topic, tx.next_check_ms)

    async def get(self, topic: TopicRef, tx_id: str) -> Transaction:
        self._open()
        return self._tx(topic, tx_id)

    async def latest(self, topic: TopicRef, limit: int) -> list[Transaction]:
        self._open()
        mine = [x for (t, _), x in self._txs.items() if t == topic]
        return sorted(mine, key=lambda x: (x.created_ms, x.id), reverse=True)[:limit]

    async def prepare(
        self, topic: TopicRef, tx_id: str, items: Sequence[PutItem], limits: TransactionLimits
    ) -> int:
        self._open()
        tx = self._tx(topic, tx_id)
        if tx.state is not TxState.OPEN:
            raise TransactionClosed(f"transaction {tx_id} is {tx.state.value}", tx)
        if tx.jobs + len(items) > limits.max_jobs:
            raise PayloadTooLarge(
                "jobs",
                f"transaction {tx_id} has {tx.jobs} jobs; at most {limits.max_jobs} in one",
            )
        self._items[(topic, tx_id)].extend(items)
        return self._log(tx, "prepared", f"{len(items)} jobs", jobs=tx.jobs + len(items)).jobs

    async def decide(
        self, topic: TopicRef, tx_id: str, state: TxState, source: Source, detail: str
    ) -> tuple[Transaction, bool]:
        self._open()
        tx = self._tx(topic, tx_id)
        if tx.state is not TxState.OPEN:
            return tx, False
        now = self._now_ms()
        text = f"{state.value} by {source.value}" + (f": {detail}" if detail else "")
        tx = self._log(
            tx, "decided", text, state=state, source=source, detail=detail, decided_ms=now
        )
        if state is TxState.ROLLED_BACK:
            self._items[(topic, tx_id)] = []
        else:
            self._note_topic(topic, now)
        return tx, True

    async def release(self, topic: TopicRef, tx_id: str) -> Transaction:
        self._open()
        tx = self._tx(topic, tx_id)
        if tx.state is not TxState.COMMITTED or tx.released:
            return tx
        by_group: dict[int, list[PutItem]] = {}
        for item in self._items[(topic, tx_id)]:
            by_group.setdefault(item.queue.group.index, []).append(item)
        for n, (group, items) in enumerate(sorted(by_group.items())):
            if self.fail_release_after is not None and n >= self.fail_release_after:
                raise BackendUnavailable(f"release of {tx_id} stopped after {n} groups (test)")
            marker = (topic, tx_id, group)
            if marker in self._released_groups:
                continue
            await self._queues.put(items)
            self._released_groups.add(marker)
        tx = self._tx(topic, tx_id)
        if tx.released:
            return tx
        self._items[(topic, tx_id)] = []
        return self._log(tx, "released", f"{tx.jobs} jobs in their queues", released=True)

    async def prepared_jobs(self, topic: TopicRef) -> int:
        self._open()
        return sum(len(v) for (t, _), v in self._items.items() if t == topic)

    async def counts(self, topics: Sequence[TopicRef]) -> list[tuple[int, int]]:
        self._open()
        opened = Counter(t for (t, _), tx in self._txs.items() if tx.state is TxState.OPEN)
        return [(opened[t], await self.prepared_jobs(t)) for t in topics]

    async def find_job(self, topic: TopicRef, job_id: str) -> str | None:
        self._open()
        for (t, tx_id), items in self._items.items():
            if t == topic and any(i.job_id == job_id for i in items):
                return tx_id
        return None

    async def due_topics(self, now_ms: int, limit: int) -> list[TopicRef]:
        self._open()
        due = sorted((at, str(t), t) for t, at in self._index.items() if at <= now_ms)
        return [t for _, _, t in due[:limit]]

    async def claim_topic(self, topic: TopicRef, now_ms: int, lease_ms: int) -> TopicClaim | None:
        self._open()
        at = self._index.get(topic)
        if at is None or at > now_ms:
            return None
        self._index[topic] = now_ms + lease_ms
        return TopicClaim(topic, str(self._generation.get(topic, 0)))

    async def pending(self, topic: TopicRef, now_ms: int) -> Pending:
        self._open()
        due: list[str] = []
        releasing: list[str] = []
        later: list[int] = []
        for (t, tx_id), tx in sorted(self._txs.items(), key=lambda kv: kv[1].next_check_ms):
            if t != topic:
                continue
            if tx.state is TxState.OPEN:
                if tx.next_check_ms <= now_ms:
                    due.append(tx_id)
                else:
                    later.append(tx.next_check_ms)
            elif tx.state is TxState.COMMITTED and not tx.released:
                releasing.append(tx_id)
        return due, releasing, min(later) if later else None

    async def settle_topic(self, claim: TopicClaim, next_ms: int | None) -> None:
        self._open()
        topic = claim.topic
        if str(self._generation.get(topic, 0)) == claim.generation:
            if next_ms is None:
                self._index.pop(topic, None)
            else:
                self._index[topic] = next_ms
        elif next_ms is not None:
            self._index[topic] = min(self._index.get(topic, next_ms), next_ms)

    async def claim_check(
        self, topic: TopicRef, tx_id: str, now_ms: int, lease_ms: int
    ) -> Transaction | None:
        self._open()
        tx = self._txs.get((topic, tx_id))
        if tx is None or tx.state is not TxState.OPEN or tx.next_check_ms > now_ms:
            return None
        tx = dataclasses.replace(tx, next_check_ms=now_ms + lease_ms, checks=tx.checks + 1)
        self._txs[(topic, tx_id)] = tx
        return tx

    async def note_check(self, topic: TopicRef, tx_id: str, next_ms: int, detail: str) -> None:
        self._open()
        tx = self._txs.get((topic, tx_id))
        if tx is None or tx.state is not TxState.OPEN:
            return
        self._log(tx, "check", detail, next_check_ms=next_ms)

    async def aclose(self) -> None:
        self.closed = True
