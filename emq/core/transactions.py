"""Transactional messages: jobs that go only if the producer's own transaction commits.

A producer opens a transaction on a topic, enqueues jobs into it (*prepared*: stored durably,
invisible to workers), and then commits (every job becomes deliverable) or rolls back (every
job is discarded). A transaction still open at its timeout is resolved by a **check-back**: EMQ
asks the producer's ``check_url`` for the decision, again with backoff while the answer is
``unknown`` or nothing answers, and after :attr:`CheckPolicy.attempts` asks applies the topic's
``transaction_default``.

States and transitions (one atomic step each in the store; a decided state never changes)::

    OPEN --commit (producer | check_back | default)--> COMMITTED --release--> COMMITTED, released
      |
      +--rollback (producer | check_back | default)--> ROLLED_BACK (prepared jobs deleted)

The decision is stored first, in the transaction's record, by one compare-and-set from OPEN;
only then does the *release* copy the prepared jobs into their groups' queues. The release is
idempotent per group (a marker set in the same atomic step as the group's appends) and anyone may
run it: the API process that took the commit, right away, or any runner later, which finds a
committed transaction not yet released in its topic's list. So:

* no job is visible to a worker before the commit is stored (the release reads the stored
  decision and runs only for COMMITTED, which is final);
* once the commit is stored every job becomes visible, even if the committing process dies
  (the runner finishes the release), and none twice (the per-group marker);
* a worker may see one group's jobs a moment before another group's (groups may sit on
  different Redis Cluster shards, which share no atomic step), but only after the decision that
  makes all of them deliverable, and never a job of a transaction that can still roll back:
  as the workers see it, the transaction is all or nothing.

This module holds the model, the rules (limits, check-back backoff) and the store's seam,
:class:`TransactionStore` (``adapters``: Redis, in-memory). It imports nothing but the core.
"""

from __future__ import annotations

import abc
import enum
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from emq.core.errors import BacklogFull, ConfigConflict
from emq.core.interfaces import AsyncResource, PutItem
from emq.core.model import Priority, TopicRef

TRANSACTION_ID_PATTERN = r"^tx_[0-9a-z]{22}$"
_ID_RE = re.compile(TRANSACTION_ID_PATTERN)
_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"

DEFAULT_TIMEOUT_S = 60
MAX_TIMEOUT_S = 86_400
DECIDED_TTL_S = 7 * 86_400  # how long a decided transaction stays readable (and idempotent)
LOG_MAX = 100  # entries of a transaction's decision log kept (the oldest dropped first)


def new_transaction_id() -> str:
    """``tx_`` + 22 random characters (110 bits)."""
    n = int.from_bytes(os.urandom(14), "big")
    return "tx_" + "".join(_ALPHABET[(n >> (5 * i)) & 31] for i in range(22))


def is_transaction_id(text: str) -> bool:
    return bool(_ID_RE.match(text))


class TxState(enum.StrEnum):
    OPEN = "open"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"


class Source(enum.StrEnum):
    """Where a decision came from."""

    PRODUCER = "producer"  # POST .../commit or .../rollback
    CHECK_BACK = "check_back"  # the producer's check_url answered it
    DEFAULT = "default"  # the check-back's bound was reached: the topic's transaction_default


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One line of a transaction's record: what happened, when, and what was said."""

    at_ms: int
    event: str  # created | prepared | check | decided | released
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"at_ms": self.at_ms, "event": self.event, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class Transaction:
    """A transaction as stored. ``next_check_ms`` is when the runner looks at it next while
    it is open (its deadline, then each check-back's backoff); ``released`` says the jobs of a
    committed one are all in their queues."""

    id: str
    topic: TopicRef
    check_url: str
    timeout_s: int
    created_ms: int
    state: TxState = TxState.OPEN
    jobs: int = 0
    next_check_ms: int = 0
    checks: int = 0
    decided_ms: int | None = None
    source: Source | None = None
    detail: str = ""
    released: bool = False
    log: tuple[LogEntry, ...] = field(default_factory=tuple)

    @property
    def deadline_ms(self) -> int:
        return self.created_ms + self.timeout_s * 1000


class TooManyTransactions(BacklogFull):
    """The topic has as many open transactions as it may (429, with Retry-After)."""

    code = "too_many_transactions"


class TransactionClosed(ConfigConflict):
    """The transaction is decided already (409): ``transaction`` is its final state."""

    code = "transaction_closed"

    def __init__(self, message: str, transaction: Transaction) -> None:
        super().__init__(message)
        self.transaction = transaction


@dataclass(frozen=True, slots=True)
class TransactionLimits:
    """What one topic may hold: jobs per transaction, open transactions at once."""

    max_jobs: int = 10_000
    max_open: int = 1_000


@dataclass(frozen=True, slots=True)
class CheckPolicy:
    """How the check-back asks: ``attempts`` asks in all, the n-th answer that decides nothing
    (``unknown``, an error, no answer) waits ``backoff_s * 2**(n-1)`` (at most ``max_backoff_s``)
    before the next; after the last one the topic's ``transaction_default`` applies."""

    attempts: int = 6
    backoff_s: float = 5.0
    max_backoff_s: float = 300.0
    timeout_s: float = 5.0

    def retry_in_ms(self, checks: int) -> int | None:
        """Delay after the ``checks``-th ask decided nothing; None when the bound is reached."""
        if checks >= self.attempts:
            return None
        delay = min(self.backoff_s * 2 ** max(0, checks - 1), self.max_backoff_s)
        return max(1, int(delay * 1000))


def decision_state(decision: str) -> TxState | None:
    """The state a check-back answer (or a topic's default) decides; None for ``unknown``."""
    if decision == "commit":
        return TxState.COMMITTED
    if decision == "rollback":
        return TxState.ROLLED_BACK
    return None


# ---------------------------------------------------------------------- prepared jobs

# A prepared job is stored as one string: "<job_id> <group> <priority> <due_ms|-> <n>" then the
# idempotency key's n bytes, then the payload. Job ids, groups, priorities and due times hold no
# space; the key is length-prefixed since it may hold any character.
_HEAD_RE = re.compile(rb"^(\S+) (\d+) ([a-z]+) (-|\d+) (\d+) ")


def encode_prepared(item: PutItem) -> bytes:
    """One :class:`PutItem` (its queue names its group and priority) as stored while prepared."""
    key = b"" if item.idempotency_key is None else item.idempotency_key.encode()
    due = b"-" if item.due_ms is None else str(int(item.due_ms)).encode()
    q = item.queue
    head = b"%s %d %s %s %d " % (
        item.job_id.encode(),
        q.group.index,
        q.priority.value.encode(),
        due,
        len(key),
    )
    return head + key + item.payload


def prepared_head(raw: bytes) -> tuple[int, int | None, str | None]:
    """(group, due_ms, idempotency key) of a prepared job, read from its head only (its
    payload is not copied). ValueError if it is not one."""
    m = _HEAD_RE.match(raw)
    if m is None:
        raise ValueError(f"not a prepared job: {raw[:60]!r}")
    due, n = m.group(4), int(m.group(5))
    key = raw[m.end() : m.end() + n].decode() if n else None
    return int(m.group(2)), None if due == b"-" else int(due), key


def decode_prepared(topic: TopicRef, raw: bytes) -> PutItem:
    """The :class:`PutItem` :func:`encode_prepared` stored (ValueError if it is not one)."""
    m = _HEAD_RE.match(raw)
    if m is None:
        raise ValueError(f"not a prepared job: {raw[:60]!r}")
    job_id, group, priority, due, n = m.groups()
    start = m.end()
    key_len = int(n)
    key = raw[start : start + key_len].decode() if key_len else None
    return PutItem(
        queue=topic.group(int(group)).queue(Priority(priority.decode())),
        job_id=job_id.decode(),
        payload=raw[start + key_len :],
        idempotency_key=key,
        due_ms=None if due == b"-" else int(due),
    )


# ---------------------------------------------------------------------- the store's seam


# (open transactions due a check, committed ones not released, the next check of the others)
Pending = tuple[list[str], list[str], int | None]


@dataclass(frozen=True, slots=True)
class TopicClaim:
    """A runner's claim on one topic's due work (see :meth:`TransactionStore.claim_topic`)."""

    topic: TopicRef
    generation: str


class TransactionStore(AsyncResource):
    """Transactions, their prepared jobs and the release into the queues.

    Every method that changes a transaction is one atomic step on the topic's transactions (one
    Redis Cluster slot per topic), so concurrent callers (several API processes, the runners)
    see each transition happen once; see the module docstring for the states.
    """

    @abc.abstractmethod
    async def create(self, tx: Transaction, limits: TransactionLimits) -> None:
        """Store a new open transaction; :class:`TooManyTransactions` if the topic has
        ``limits.max_open`` open already."""

    @abc.abstractmethod
    async def get(self, topic: TopicRef, tx_id: str) -> Transaction:
        """The transaction with its log; :class:`~emq.core.errors.NotFound` if unknown or
        expired."""

    @abc.abstractmethod
    async def latest(self, topic: TopicRef, limit: int) -> list[Transaction]:
        """The topic's transactions, newest first (decided ones until they expire)."""

    @abc.abstractmethod
    async def prepare(
        self, topic: TopicRef, tx_id: str, items: Sequence[PutItem], limits: TransactionLimits
    ) -> int:
        """Store ``items`` (all of them or none) in the open transaction; the count of its jobs
        now.
        :class:`TransactionClosed` if it is decided, :class:`~emq.core.errors.PayloadTooLarge`
        past ``limits.max_jobs``."""

    @abc.abstractmethod
    async def decide(
        self, topic: TopicRef, tx_id: str, state: TxState, source: Source, detail: str
    ) -> tuple[Transaction, bool]:
        """Move the open transaction to ``state`` (COMMITTED or ROLLED_BACK); a rollback deletes
        its prepared jobs in the same step. Returns the transaction after the call and whether
        this call decided it (False: it was decided already, the returned state is that one)."""

    @abc.abstractmethod
    async def release(self, topic: TopicRef, tx_id: str) -> Transaction:
        """Copy a committed transaction's jobs into their queues, once per group whoever calls
        and however often; then mark it released. Does nothing unless it is COMMITTED and not
        released yet."""

    @abc.abstractmethod
    async def prepared_jobs(self, topic: TopicRef) -> int:
        """Jobs of the topic waiting in transactions (open, or committed and not released)."""

    @abc.abstractmethod
    async def counts(self, topics: Sequence[TopicRef]) -> list[tuple[int, int]]:
        """(open transactions, :meth:`prepared_jobs`) of each topic, in order: what the
        metrics show, read in one round trip where the store can."""

    @abc.abstractmethod
    async def find_job(self, topic: TopicRef, job_id: str) -> str | None:
        """The transaction holding prepared job ``job_id``, or None."""

    # -- what the runner uses

    @abc.abstractmethod
    async def due_topics(self, now_ms: int, limit: int) -> list[TopicRef]:
        """Topics that may have work at ``now_ms`` (an open transaction past its next check,
        a committed one not released): an index that errs towards too many."""

    @abc.abstractmethod
    async def claim_topic(self, topic: TopicRef, now_ms: int, lease_ms: int) -> TopicClaim | None:
        """Take the topic's work until ``now_ms + lease_ms`` if it is due and nobody holds it."""

    @abc.abstractmethod
    async def pending(self, topic: TopicRef, now_ms: int) -> Pending:
        """(open transactions due a check, committed ones not released, the earliest next
        check of the open ones not due yet)."""

    @abc.abstractmethod
    async def settle_topic(self, claim: TopicClaim, next_ms: int | None) -> None:
        """End a claim: look at the topic again at ``next_ms`` (None: nothing left). A topic
        written to since the claim keeps the earlier of the two times."""

    @abc.abstractmethod
    async def claim_check(
        self, topic: TopicRef, tx_id: str, now_ms: int, lease_ms: int
    ) -> Transaction | None:
        """Take the next check-back of an open transaction due at ``now_ms`` (its next check
        moves ``lease_ms`` on and its count of checks grows by one); None if it is not due,
        not open, or another runner took it."""

    @abc.abstractmethod
    async def note_check(self, topic: TopicRef, tx_id: str, next_ms: int, detail: str) -> None:
        """Record a check-back that decided nothing; ask again at ``next_ms``."""
