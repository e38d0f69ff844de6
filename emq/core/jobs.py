"""Where a job is, and what is known about it: the facts behind ``GET .../jobs/{id}``.

A job id says where the job was put (see :func:`placed_job_id`): its enqueue time, its group and
its priority, so a status lookup goes straight to one physical queue and never scans a topic.
What the queue cannot say, the worker writes down off the hot path:

* :class:`JobRecord`: the outcome of an attempt (delivered, retry scheduled, dead-lettered),
  batched with the checkpoint writes and kept for a retention (``EMQ_JOB_RECORD_TTL_S``);
* :class:`GroupSnapshot`: per owned group with work, about once a second, what it waits for
  (the budget spent until when, the endpoint's concurrency full) and how far it has fetched.
"""

from __future__ import annotations

import abc
import functools
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from emq.core.attempts import AttemptStore, AttemptWrite, IndexWrite
from emq.core.model import PRIORITIES, GroupRef, Priority, QueueRef

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
_DIGIT_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]  # 10 bits -> 2 digits
_PAIR_SHIFTS = tuple(range(120, -1, -10))  # 13 pairs: 130 bits
_LOW = _PAIR_SHIFTS[5:]  # the low 80 bits' 8 pairs
_DECODE = {c: i for i, c in enumerate(_CROCKFORD)}
_ID_RE = re.compile(r"^msg_[0-9a-hjkmnp-tv-z]{26}$")
GROUP_BITS = 20  # up to 1 048 576 groups (a topic's groups never exceed its qps, 1 000 000)
_RANK_BITS = 2
_RANDOM_BITS = 80 - GROUP_BITS - _RANK_BITS  # 58 random bits per millisecond, group and priority
# Bit 79 of the random part says "placed". An id made by new_job_id (before placement existed)
# has it random: half of those read as a place that is not theirs, and their lookup is a 404.
_PLACED = 1 << 79
_GROUP_SHIFT = _RANDOM_BITS + _RANK_BITS


def placed_job_id(now_ms: int, group_index: int, priority: Priority) -> str:
    """``msg_`` + 26 characters, like :func:`~emq.core.model.new_job_id` (48 bits of
    milliseconds, then 80 bits), with the group index and priority in the top of the 80 bits
    (the rest random): the job can be found again without an index."""
    if not 0 <= group_index < (1 << (GROUP_BITS - 1)):
        group_index = (1 << (GROUP_BITS - 1)) - 1  # unfindable rather than wrong: never hit
    # Unique, not secret (a lookup needs the tenant's token): the module's generator, ~10x
    # cheaper than a system call per id for a batch of 1000, and reseeded in a forked child.
    rand = random.getrandbits(_RANDOM_BITS)
    low = _PLACED | (group_index << _GROUP_SHIFT) | (priority.rank << _RANDOM_BITS) | rand
    # 130 bits: 50 of time (10 digits, the same for a whole batch), then 80 (16 digits)
    low_digits = "".join([_DIGIT_PAIRS[(low >> shift) & 1023] for shift in _LOW])
    return "msg_" + _time_digits(now_ms) + low_digits


# Tables for bytes.translate: a random byte to a random digit (256 is a multiple of 32, so the
# digits stay uniform), and per priority rank, to the digit that holds the rank's 2 bits and 3
# random ones.
_RANDOM_DIGIT = bytes(_CROCKFORD.encode()[b & 31] for b in range(256))
_RANK_DIGIT = [
    bytes(_CROCKFORD.encode()[(rank << 3) | (b & 7)] for b in range(256)) for rank in range(4)
]
_MAX_GROUP = (1 << (GROUP_BITS - 1)) - 1


def placed_job_ids(now_ms: int, places: Sequence[tuple[int, Priority]]) -> list[str]:
    """:func:`placed_job_id` for each (group index, priority) of a batch enqueued at ``now_ms``,
    with the random digits of the whole batch drawn and spelt at once (~5x cheaper per id).

    The 80 low bits are 16 digits: ``placed | group`` (20 bits, 4 digits, the same for a
    group's jobs), then the rank's 2 bits and 3 random ones (1 digit), then 55 random bits (11
    digits): the same bits as :func:`placed_job_id`'s, drawn from the same generator.
    """
    n = len(places)
    rand = random.randbytes(12 * n)
    digits = rand[: 11 * n].translate(_RANDOM_DIGIT).decode()
    fifth = [rand[11 * n :].translate(table).decode() for table in _RANK_DIGIT[: len(PRIORITIES)]]
    head = "msg_" + _time_digits(now_ms)
    heads: dict[int, str] = {}
    out = []
    for i, (g, priority) in enumerate(places):
        known = heads.get(g)
        if known is None:
            top = (_PLACED >> _GROUP_SHIFT) | (g if 0 <= g <= _MAX_GROUP else _MAX_GROUP)
            known = heads[g] = head + _DIGIT_PAIRS[top >> 10] + _DIGIT_PAIRS[top & 1023]
        out.append(known + fifth[priority.rank][i] + digits[11 * i : 11 * i + 11])
    return out


def base32_digits(n: int) -> str:
    """``n`` (< 2**130) as 26 Crockford base32 digits, most significant first: two digits per
    10 bits from a table (3x faster than a divmod per digit)."""
    return "".join([_DIGIT_PAIRS[(n >> shift) & 1023] for shift in _PAIR_SHIFTS])


@functools.lru_cache(maxsize=8)
def _time_digits(now_ms: int) -> str:
    return base32_digits(now_ms << 80)[:10]


@dataclass(frozen=True, slots=True)
class JobPlace:
    """What a placed job id says: when it was enqueued, in which group and priority."""

    enqueued_ms: int
    group_index: int
    priority: Priority

    def queue(self, group: GroupRef) -> QueueRef:
        return group.queue(self.priority)


def job_place(job_id: str) -> JobPlace | None:
    """The place written in ``job_id``; None for an id that is not one (or made before)."""
    if not _ID_RE.match(job_id):
        return None
    n = 0
    for c in job_id[4:]:
        n = n * 32 + _DECODE[c]
    low = n & ((1 << 80) - 1)
    if not low & _PLACED:
        return None
    group = (low >> _GROUP_SHIFT) & ((1 << (GROUP_BITS - 1)) - 1)
    rank = (low >> _RANDOM_BITS) & ((1 << _RANK_BITS) - 1)
    if rank >= len(PRIORITIES):
        return None
    return JobPlace(n >> 80, group, PRIORITIES[rank])


class JobRecord(NamedTuple):
    """One outcome of a job, written by the worker that had it (a named tuple: one is made per
    delivery, and a tuple is made in C).

    ``state``: ``delivered`` (``status`` and ``latency_ms``: enqueue to delivery), ``retry_wait``
    (``attempt`` failed, ``next_ms`` the next attempt, ``status``/``error`` the last answer,
    ``retry_after``: the wait is the endpoint's Retry-After) or ``dead`` (``error`` the reason).
    A delivery's record also holds its attempt (emq.core.attempts): ``duration_ms`` and the
    kept ``headers`` of the answer.
    """

    job_id: str
    state: str
    at_ms: int
    attempt: int = 0
    status: int | None = None
    error: str | None = None
    latency_ms: int | None = None
    next_ms: int | None = None
    retry_after: bool = False
    duration_ms: int | None = None
    headers: dict[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {
            "s": self.state,
            "at": self.at_ms,
            "n": self.attempt,
            "st": self.status,
            "err": self.error,
            "lat": self.latency_ms,
            "next": self.next_ms,
            "ra": 1 if self.retry_after else 0,
        }
        if self.duration_ms is not None:
            d["d"] = self.duration_ms
        if self.headers is not None:
            d["h"] = self.headers
        return d

    @classmethod
    def from_dict(cls, job_id: str, d: dict[str, Any]) -> JobRecord:
        return cls(
            job_id,
            str(d["s"]),
            int(d["at"]),
            int(d.get("n", 0)),
            d.get("st"),
            d.get("err"),
            d.get("lat"),
            d.get("next"),
            bool(d.get("ra", 0)),
            d.get("d"),
            d.get("h"),
        )


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """How far the owner has gone in one physical queue (offsets as ``ms-seq`` text)."""

    committed: str  # finished below or at this (the checkpoint it holds)
    fetched: str  # read up to this
    buffer_head: str | None  # the oldest job still in its buffer (None: the buffer is empty)


@dataclass(frozen=True, slots=True)
class EndpointWait:
    """An endpoint of the group's topic that is not open, as the owner saw it: ``limited``
    (paced at ``rate_qps``), ``held`` (a ``Retry-After`` until ``until_ms``) or ``disabled``
    (until an operator re-enables it). ``parked``: by priority name, the oldest offset of the
    group's jobs waiting for it in the owner's memory (each later one of that endpoint and
    priority, fetched and not in the buffer, waits there too: an endpoint's jobs queue in order)."""

    state: str
    rate_qps: float
    until_ms: int | None = None
    parked: dict[str, str] = field(default_factory=dict)

    def to_list(self) -> list[Any]:
        return [self.state, self.rate_qps, self.until_ms, self.parked]

    @classmethod
    def from_list(cls, v: Sequence[Any]) -> EndpointWait:
        state, rate, until, parked = v
        return cls(str(state), float(rate), None if until is None else int(until), dict(parked))


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """What the owner of a group said about it at ``at_ms``."""

    worker: str
    at_ms: int
    quota_until_ms: int | None  # the group's budget is spent until then (None: it has budget)
    endpoint_full: bool  # the topic's endpoint has all its concurrency in flight
    queues: dict[str, QueueSnapshot] = field(default_factory=dict)  # by priority name
    endpoints: dict[str, EndpointWait] = field(default_factory=dict)  # the ones not open

    def to_dict(self) -> dict[str, Any]:
        out = {
            "w": self.worker,
            "at": self.at_ms,
            "qu": self.quota_until_ms,
            "ef": self.endpoint_full,
            "q": {p: [s.committed, s.fetched, s.buffer_head] for p, s in self.queues.items()},
        }
        if self.endpoints:
            out["ep"] = {name: wait.to_list() for name, wait in self.endpoints.items()}
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GroupSnapshot:
        queues = {p: QueueSnapshot(c, f, h) for p, (c, f, h) in d.get("q", {}).items()}
        waits = {name: EndpointWait.from_list(v) for name, v in d.get("ep", {}).items()}
        return cls(str(d["w"]), int(d["at"]), d.get("qu"), bool(d.get("ef")), queues, waits)


@dataclass(frozen=True, slots=True)
class JobFacts:
    """Everything the store knows of one job, read in one round trip (see :class:`JobStore`).

    ``offset`` is where the job sits in its queue (None: not found there), ``url`` what its
    entry there says it is sent to; ``ahead`` the jobs
    before it in its group that are not finished (an estimate past ``ahead_exact``), ``due_ms``
    its due time if it waits in the delayed set; ``committed`` the queue's checkpoint.
    """

    record: JobRecord | None = None
    offset: str | None = None
    committed: str | None = None
    ahead: int = 0
    ahead_exact: bool = True
    due_ms: int | None = None
    snapshot: GroupSnapshot | None = None
    url: str | None = None  # the job's URL, when its entry was found in its queue


class JobStore(abc.ABC):
    """Job records and group snapshots (written by workers), and the per-job lookup (the API)."""

    ttl_s: int = 600  # how long records stay readable (0: none are kept)
    attempt_store: AttemptStore | None = None  # the attempt log's reads (emq.core.attempts)

    @abc.abstractmethod
    async def record(
        self,
        records: Sequence[tuple[str, bytes]],
        attempts: Sequence[AttemptWrite] = (),
        index: Sequence[IndexWrite] = (),
        delivered: Sequence[tuple[QueueRef, int, bytes]] = (),
    ) -> None:
        """Keep ``records`` (job id, :meth:`JobRecord.to_dict` as JSON) for the retention, with
        the ``attempts`` (job id, attempt number, :meth:`Attempt.encode`), their search
        ``index`` entries and the ``delivered`` jobs a topic keeps for redeliveries (the
        delivered-log key of their group, keep ms, the envelope); one round trip. Best
        effort: may raise :class:`~emq.core.errors.BackendUnavailable` (the caller drops
        them)."""

    async def trim_attempts(self) -> None:
        """Keep the attempt log within its byte budget and the indexes within the retention
        (a store without an attempt log has nothing to trim)."""
        return None

    @abc.abstractmethod
    async def publish(self, snapshots: Sequence[tuple[GroupRef, bytes]]) -> None:
        """Publish group snapshots (:meth:`GroupSnapshot.to_dict` as JSON); one round trip."""

    @abc.abstractmethod
    async def facts(self, group: GroupRef, place: JobPlace, job_id: str) -> JobFacts:
        """What is known of ``job_id`` in ``group`` (bounded cost: no scan of the queue)."""

    @abc.abstractmethod
    async def oldest_ms(self, queues: Sequence[QueueRef]) -> list[int | None]:
        """Per queue, the append time of its oldest unfinished entry (None: none)."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release connections (if owned)."""
