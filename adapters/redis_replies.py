"""What the Redis scripts are sent and what they answer: packed arguments, decoded replies.

Pure helpers of :mod:`adapters.redis_queue` (no I/O): the keys a batch script needs of a queue,
one APPEND call's arguments, the hints a write announces, and the decoding of stream ids,
entries, put results, ready signals and dead letters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Any, NamedTuple, TypeAlias

from emq.core.errors import InvalidInput
from emq.core.interfaces import DeadLetter, Entry, Offset, PutItem, PutResult
from emq.core.model import DlqRetention, GroupRef, Priority, QueueRef

Command: TypeAlias = Sequence[Any]


class QueueKeys(NamedTuple):
    """What the batch scripts need of one queue: its keys in their order, and its slot."""

    stream: str
    checkpoint: str
    epoch: str
    slot: int


BatchItem: TypeAlias = tuple[GroupRef, QueueKeys, str]  # (group, keys, packed arguments)


PUT_APPENDED, PUT_DUPLICATE, PUT_DELAYED = 0, 1, 2


# A named tuple's constructor is Python code (a frame per call); tuple.__new__ makes the same
# tuple in C. Offsets and entries are made once per fetched job.
_new = tuple.__new__


def offset_of(raw: bytes | str) -> Offset:
    """A stream id as an :class:`Offset` (faster than ``Offset.parse``: ids are well formed)."""
    ms, _, seq = raw.partition(b"-") if isinstance(raw, bytes) else raw.partition("-")
    return _new(Offset, (int(ms), int(seq)))


def text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw


class Append:
    """The plain items of one APPEND call: its streams (KEYS), and per payload its stream's
    index and its length (one text argument) then the payloads (one bytes argument).

    Two arguments rather than two per job: redis-py packs each argument of a command in Python
    (~1 us each), which was a tenth of the API's CPU per job under batched enqueue.
    """

    __slots__ = ("index", "keys", "payloads", "places", "positions")

    def __init__(self, index: int) -> None:
        self.index = index  # of the command in the pipeline
        self.keys: list[str] = []
        self.positions: dict[str, int] = {}  # stream -> its 1-based index in KEYS
        self.places: list[str] = []  # "<index in KEYS>:<payload bytes>" per payload
        self.payloads: list[bytes] = []

    def add(self, stream: str, payload: bytes) -> int:
        """Add one payload; returns where its offset will be in the reply."""
        position = self.positions.get(stream)
        if position is None:
            self.keys.append(stream)
            position = self.positions[stream] = len(self.keys)
        self.places.append(f"{position}:{len(payload)}")
        self.payloads.append(payload)
        return len(self.payloads) - 1

    def command(self, sha: str) -> Command:
        places, payloads = ",".join(self.places), b"".join(self.payloads)
        return ("EVALSHA", sha, len(self.keys), *self.keys, places, payloads)


class Hints:
    """What a write announces: groups with new jobs to read, and the due times of parked ones."""

    __slots__ = ("due", "ready")

    def __init__(self) -> None:
        self.ready: dict[str, None] = {}  # group names, in order, once each
        self.due: dict[str, int] = {}  # group name -> earliest due time parked by this write

    @classmethod
    def ready_of(cls, group: GroupRef) -> Hints:
        hints = cls()
        hints.ready[str(group)] = None
        return hints

    def add(self, group: str, due_ms: int | None) -> None:
        """Note a job appended to ``group`` (``due_ms`` None) or parked until ``due_ms``."""
        if due_ms is None:
            self.ready[group] = None
        elif group not in self.due or due_ms < self.due[group]:
            self.due[group] = int(due_ms)

    def __repr__(self) -> str:
        names = [*self.ready, *(n for n in self.due if n not in self.ready)]
        more = f" and {len(names) - 5} more" if len(names) > 5 else ""
        return ", ".join(names[:5]) + more


def score_pairs(scores: Mapping[str, int]) -> list[Any]:
    """``{member: score}`` as ZADD's ``score member ...`` arguments."""
    return list(chain.from_iterable((score, member) for member, score in scores.items()))


def cursor_of(text: str) -> str:
    """A ready-signal cursor given by a caller, checked to be a stream id."""
    try:
        return str(Offset.parse(text))
    except ValueError:
        raise InvalidInput("cursor", f"not a ready-signal cursor: {text!r}") from None


def counts_of(
    requests: Mapping[QueueRef, Offset], count: int | Mapping[QueueRef, int]
) -> dict[QueueRef, int]:
    """Each queue's read count (one for all, or per queue); queues asking none are left out."""
    if isinstance(count, int):
        return dict.fromkeys(requests, count) if count > 0 else {}
    return {q: n for q in requests if (n := count.get(q, 0)) > 0}


def ready_names(reply: Any, cursor: str) -> tuple[str, list[str], int | None]:
    """(the last signal's id or ``cursor``, the group names they carried, the earliest due
    hint among them or None) from an XREAD reply."""
    streams = reply.values() if isinstance(reply, dict) else [e for _, e in reply or ()]
    names: dict[str, None] = {}
    due: int | None = None
    for entries in streams:
        for id_, fields in entries:
            cursor = text(id_)
            due = signal_fields(fields, names, due)
    return cursor, list(names), due


def scores_of(reply: Any) -> dict[str, int]:
    """``{member: score}`` from a ZRANGEBYSCORE ... WITHSCORES reply (pairs or flat)."""
    items = list(reply or ())
    flat = not items or not isinstance(items[0], list | tuple)
    pairs = zip(items[::2], items[1::2], strict=True) if flat else items
    return {text(member): int(float(score)) for member, score in pairs}


def next_score(reply: Any) -> int | None:
    """The least score of a ZRANGEBYSCORE ... WITHSCORES reply, None if it is empty."""
    return min(scores_of(reply).values(), default=None)


def signal_fields(fields: Any, names: dict[str, None], due: int | None) -> int | None:
    """Add a ready signal's group names (field ``g``) to ``names``; returns the earlier of
    ``due`` and its due hint (field ``d``, :func:`adapters.redis_queue.base.ready_signal`).
    A malformed signal (a hint) counts for nothing: it must not stop its reader."""
    listed = fields.get(b"g") or b""
    names.update(dict.fromkeys(n for n in text(listed).split("\n") if n))
    hinted = fields.get(b"d")
    if hinted is not None:
        try:
            at = int(hinted)
        except ValueError:
            return due
        return at if due is None or at < due else due
    return due


def entries_of(queue: QueueRef, flat: list[Any]) -> list[Entry]:
    """A READ reply's ``offset, payload, offset, ...`` as entries."""
    if None in flat:  # as XRANGE's reply would have, looking the payload up
        raise KeyError(f"an entry of {queue} has no field 'd': not a queue entry")
    pairs = iter(flat)
    out: list[Entry] = []
    dash = b"-" if flat and isinstance(flat[0], bytes) else "-"
    for id_, payload in zip(pairs, pairs, strict=True):
        ms, _, seq = id_.partition(dash)  # (offset_of, inline)
        out.append(_new(Entry, (_new(Offset, (int(ms), int(seq))), payload)))
    return out


def put_result(item: PutItem, reply: Any) -> PutResult:
    if not isinstance(reply, list):  # a plain XADD answers with the new id
        return PutResult(item.job_id, offset=offset_of(reply))
    kind, value = reply
    if kind == PUT_DUPLICATE:
        return PutResult(text(value), duplicate=True)
    if kind == PUT_DELAYED:
        return PutResult(item.job_id)
    return PutResult(item.job_id, offset=offset_of(value))


def retention_args(retention: DlqRetention) -> tuple[int, int]:
    return max(0, retention.max_entries), max(0, round(retention.max_age_s * 1000))


def dlq_id(text: str) -> str:
    """A DLQ id given by a user, checked so it cannot change the meaning of a range."""
    try:
        return str(Offset.parse(text))
    except ValueError:
        raise InvalidInput("id", f"not a dead letter id: {text!r}") from None


def dead_letter_of(id_: bytes, fields: Mapping[bytes, bytes]) -> DeadLetter:
    status = fields.get(b"status", b"")
    return DeadLetter(
        id=text(id_),
        priority=Priority(text(fields[b"priority"])),
        payload=fields[b"payload"],
        error=text(fields.get(b"error", b"")),
        status=int(status) if status else None,
        attempts=int(fields.get(b"attempts", b"0")),
        failed_at_ms=int(fields.get(b"failed_at", b"0")),
    )
