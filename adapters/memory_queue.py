"""Physical queues in process memory: the Redis backend's semantics, for tests and one process.

Everything :mod:`adapters.redis_queue` stores has a twin here, with the same observable rules:
offsets are shaped like Redis stream ids (``ms-seq`` from the injected clock, strictly growing per
queue even if the clock stalls or steps back), delayed jobs are ordered by due time then by their
``<priority>|<payload>`` member, backlog is "appended ever minus committed ever", trims keep the
newest ``retain`` committed entries, and idempotency markers expire after the window measured on
the injected ``clock``. Nothing is durable: the data lives as long as the object.

The workers' hints have twins too: the ready signal is a capped in-process list of (sequence
number, group names) with an :class:`asyncio.Event` that :meth:`~MemoryQueueBackend.wait_ready`
really blocks on (cursors are sequence numbers as text), and the due index is a dict of group name
to earliest due time. Here they are exact (a write and its hint happen in one step).

After :meth:`aclose` every call raises :class:`~emq.core.errors.BackendUnavailable`, as a closed
connection would; a :meth:`~MemoryQueueBackend.wait_ready` blocked at that moment wakes and
raises it too.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import itertools
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from emq.core.endpoints import ALL_ENDPOINTS, endpoint_of
from emq.core.errors import BackendUnavailable, Fenced, InvalidInput
from emq.core.interfaces import (
    ZERO_OFFSET,
    Checkpoint,
    DeadLetter,
    Entry,
    Offset,
    PutItem,
    PutResult,
    QueueBackend,
    Scheduled,
)
from emq.core.model import DLQ_DEFAULTS, DlqRetention, GroupRef, Priority, QueueRef

log = logging.getLogger(__name__)

_T = TypeVar("_T")

READY_MAXLEN = 100_000  # signals kept, like the Redis stream's cap


@dataclass(slots=True)
class _Log(Generic[_T]):
    """An append-only log addressed by stream-shaped offsets (a queue or a DLQ)."""

    offsets: list[Offset] = field(default_factory=list)
    items: list[_T] = field(default_factory=list)
    added: int = 0  # every append ever, like XINFO's entries-added
    last: Offset = ZERO_OFFSET

    def append(self, now_ms: int, item: _T) -> Offset:
        last = self.last
        offset = Offset(now_ms, 0) if now_ms > last.ms else Offset(last.ms, last.seq + 1)
        self.offsets.append(offset)
        self.items.append(item)
        self.added += 1
        self.last = offset
        return offset

    def after(self, offset: Offset, count: int) -> list[tuple[Offset, _T]]:
        start = bisect.bisect_right(self.offsets, offset)
        end = start + count
        return list(zip(self.offsets[start:end], self.items[start:end], strict=True))

    def count_between(self, low: Offset, high: Offset) -> int:
        """How many entries lie in (low, high]."""
        lo = bisect.bisect_right(self.offsets, low)
        return max(0, bisect.bisect_right(self.offsets, high) - lo)

    def drop_oldest(self, n: int) -> None:
        del self.offsets[:n]
        del self.items[:n]

    def pop(self, offset: Offset) -> _T | None:
        i = bisect.bisect_left(self.offsets, offset)
        if i == len(self.offsets) or self.offsets[i] != offset:
            return None
        del self.offsets[i]
        return self.items.pop(i)


@dataclass(frozen=True, slots=True)
class _Committed:
    offset: Offset
    epoch: int
    count: int  # entries committed ever (the Redis checkpoint's ``n``)


class MemoryQueueBackend(QueueBackend):
    """:class:`~emq.core.interfaces.QueueBackend` in a dict, with an injectable clock (seconds)."""

    def __init__(
        self,
        *,
        idempotency_window_s: float = 86_400,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if idempotency_window_s <= 0:
            raise ValueError("idempotency_window_s must be greater than 0")
        self._window_s = idempotency_window_s
        self._clock = clock
        self._closed = False
        self._streams: dict[QueueRef, _Log[bytes]] = {}
        self._committed: dict[QueueRef, _Committed] = {}
        self._forgotten: dict[QueueRef, int] = {}  # entries removed above the checkpoint
        self._epochs: dict[GroupRef, int] = {}
        self._holders: dict[GroupRef, str] = {}  # group -> the worker process that claimed it
        self._delayed: dict[GroupRef, list[tuple[int, bytes]]] = {}  # sorted (due, member)
        self._own_due: set[bytes] = set()  # payloads put with a due time of their own
        self._parked: dict[GroupRef, dict[bytes, int]] = {}  # member -> due, to find duplicates
        self._dlq: dict[GroupRef, _Log[DeadLetter]] = {}
        # (group, key) -> (first job id, expiry); insertion order is expiry order for one window.
        self._idempotency: dict[tuple[GroupRef, str], tuple[str, float]] = {}
        self._due_index: dict[str, int] = {}  # str(group) -> earliest due time
        self._signals: collections.deque[tuple[str, ...]] = collections.deque(maxlen=READY_MAXLEN)
        self._signalled = 0  # signals ever made: the newest one's sequence number
        self._signal = asyncio.Event()  # set (and replaced) on every signal and on close
        self._due_hints: list[Callable[[int], None]] = []  # (watch_due)

    # ------------------------------------------------------------------ helpers

    def _open(self) -> None:
        if self._closed:
            raise BackendUnavailable("the in-memory queue backend is closed")

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _append(self, queue: QueueRef, payload: bytes) -> Offset:
        stream = self._streams.get(queue)
        if stream is None:  # created on first append, like XADD
            stream = self._streams[queue] = _Log()
        return stream.append(self._now_ms(), payload)

    def _fence(self, group: GroupRef, epoch: int, what: str) -> None:
        current = self._epochs.get(group, 0)
        if current > epoch:
            raise Fenced(f"{what} on {group} with epoch {epoch}: group is at epoch {current}")

    def _park(self, group: GroupRef, due_ms: int, priority: Priority, payload: bytes) -> None:
        """Add a job to the group's delayed set (a member already there just moves, like ZADD)."""
        member = priority.value.encode() + b"|" + payload
        waiting = self._delayed.setdefault(group, [])
        parked = self._parked.setdefault(group, {})
        before = parked.get(member)
        if before is not None:
            del waiting[bisect.bisect_left(waiting, (before, member))]
        parked[member] = due_ms
        bisect.insort(waiting, (due_ms, member))
        name = str(group)
        if due_ms < self._due_index.get(name, due_ms + 1):  # like ZADD LT
            self._due_index[name] = due_ms
        for hint in self._due_hints:
            hint(due_ms)

    def _notify(self, groups: Iterable[GroupRef]) -> None:
        """Signal that ``groups`` got jobs to read, and wake every wait_ready."""
        names = tuple(dict.fromkeys(str(g) for g in groups))
        if not names:
            return
        self._signalled += 1
        self._signals.append(names)
        self._wake()

    def _wake(self) -> None:
        self._signal.set()
        self._signal = asyncio.Event()

    def _first_job(self, group: GroupRef, key: str, job_id: str) -> str | None:
        """The job first accepted under ``key`` within the window, or None (and remember this)."""
        now = self._clock()
        self._expire_markers(now)
        marker = self._idempotency.get((group, key))
        if marker is not None and now < marker[1]:
            return marker[0]
        self._idempotency.pop((group, key), None)  # re-inserted last: keeps expiry order
        self._idempotency[(group, key)] = (job_id, now + self._window_s)
        return None

    def _expire_markers(self, now: float) -> None:
        markers = self._idempotency
        while markers:
            first = next(iter(markers))
            if markers[first][1] > now:
                return
            del markers[first]

    async def ping(self) -> None:
        self._open()

    # ------------------------------------------------------------------ puts and reads

    async def put(self, items: Sequence[PutItem]) -> list[PutResult]:
        self._open()
        results = [self._put_one(item) for item in items]
        appended = (
            i.queue.group for i, r in zip(items, results, strict=True) if r.offset is not None
        )
        self._notify(appended)
        return results

    def _put_one(self, item: PutItem) -> PutResult:
        group = item.queue.group
        if item.idempotency_key is not None:
            first = self._first_job(group, item.idempotency_key, item.job_id)
            if first is not None:
                return PutResult(first, duplicate=True)
        if item.due_ms is not None:
            self._park(group, int(item.due_ms), item.queue.priority, item.payload)
            self._own_due.add(item.payload)
            return PutResult(item.job_id)
        return PutResult(item.job_id, offset=self._append(item.queue, item.payload))

    async def read(
        self, requests: Mapping[QueueRef, Offset], count: int | Mapping[QueueRef, int]
    ) -> dict[QueueRef, list[Entry]]:
        self._open()
        out: dict[QueueRef, list[Entry]] = {}
        for queue, after in requests.items():
            n = count if isinstance(count, int) else count.get(queue, 0)
            if n <= 0:
                continue
            stream = self._streams.get(queue)
            entries = stream.after(after, n) if stream else []
            if entries:
                out[queue] = [Entry(offset, payload) for offset, payload in entries]
        return out

    async def backlog(self, queues: Sequence[QueueRef]) -> list[int]:
        self._open()
        return [self._backlog(q) for q in queues]

    def _backlog(self, queue: QueueRef) -> int:
        stream = self._streams.get(queue)
        if stream is None:
            return 0
        committed = self._committed.get(queue)
        gone = self._forgotten.get(queue, 0)  # (forget_finished: committed above the checkpoint)
        return max(0, stream.added - (committed.count if committed else 0) - gone)

    # ------------------------------------------------------------------ delayed jobs

    async def delayed(self, groups: Sequence[GroupRef]) -> list[int]:
        self._open()
        return [len(self._delayed.get(g, ())) for g in groups]

    async def promote_due(self, group: GroupRef, now_ms: int, limit: int) -> int:
        self._open()
        waiting = self._delayed.get(group, [])
        due = 0
        while due < len(waiting) and due < limit and waiting[due][0] <= now_ms:
            due += 1
        parked = self._parked.get(group, {})
        for _, member in waiting[:due]:
            del parked[member]
            priority, _, payload = member.partition(b"|")
            self._append(group.queue(Priority(priority.decode())), payload)
        del waiting[:due]
        if due:
            self._notify([group])
        return due

    async def release_deferred(
        self, group: GroupRef, endpoint: str, until_ms: int, now_ms: int
    ) -> int:
        self._open()
        released = []
        for due, member in self._delayed.get(group, []):
            payload = member.partition(b"|")[2]
            if due > until_ms or payload in self._own_due:
                continue
            url = json.loads(payload).get("job", {}).get("url", "")
            if endpoint in (ALL_ENDPOINTS, endpoint_of(url)):
                released.append((Priority(member.partition(b"|")[0].decode()), payload))
        for priority, payload in released:
            self._park(group, now_ms, priority, payload)
        if released:
            self._notify([group])
        return len(released)

    async def schedule(self, group: GroupRef, epoch: int, items: Sequence[Scheduled]) -> None:
        """Park ``items`` in the group's delayed set (and the due index); fenced like a trim."""
        self._open()
        self._fence(group, epoch, "schedule")
        for job in items:
            self._park(group, int(job.due_ms), job.priority, job.payload)

    async def due_groups(self, now_ms: int, limit: int) -> list[str]:
        """Groups whose due-index entry is at or before ``now_ms``, earliest first."""
        self._open()
        due = sorted((at, name) for name, at in self._due_index.items() if at <= now_ms)
        return [name for _, name in due[: max(0, limit)]]

    async def due_scan(self, now_ms: int, limit: int) -> tuple[list[str], int | None]:
        """:meth:`due_groups`, and the earliest due-index entry after ``now_ms``."""
        later = [at for at in self._due_index.values() if at > now_ms]
        return await self.due_groups(now_ms, limit), min(later, default=None)

    def watch_due(self, hint: Callable[[int], None]) -> bool:
        """Every job parked (put with a due time, scheduled, released) is told at once."""
        if hint not in self._due_hints:  # (a promoter restarted after an outage asks again)
            self._due_hints.append(hint)
        return True

    async def reindex_delayed(self, groups: Sequence[GroupRef]) -> None:
        """Set the due-index entries of ``groups`` to their earliest delayed job, or drop them."""
        self._open()
        for group in groups:
            waiting = self._delayed.get(group)
            if waiting:
                self._due_index[str(group)] = waiting[0][0]
            else:
                self._due_index.pop(str(group), None)

    # ------------------------------------------------------------------ ownership and progress

    async def claim(self, group: GroupRef, epoch: int, holder: str = "") -> bool:
        self._open()
        self._fence(group, epoch, "claim")
        self._epochs[group] = epoch
        previous = self._holders.pop(group, "")
        if holder:
            self._holders[group] = holder
        return previous not in ("", holder)

    async def release_holds(self, groups: Sequence[GroupRef], holder: str) -> None:
        self._open()
        for group in groups:
            if self._holders.get(group) == holder:
                del self._holders[group]

    async def check_holds(
        self, groups: Sequence[tuple[GroupRef, int]], holder: str, full: bool = True
    ) -> set[GroupRef]:
        self._open()  # (every check is full: it reads a dict)
        return {
            g
            for g, epoch in groups
            if self._holders.get(g, holder) != holder or self._epochs.get(g, 0) > epoch
        }

    async def read_checkpoint(self, queue: QueueRef) -> Checkpoint | None:
        self._open()
        committed = self._committed.get(queue)
        return Checkpoint(committed.offset, committed.epoch) if committed else None

    async def tails(self, queues: Sequence[QueueRef]) -> list[Offset | None]:
        self._open()
        streams = [self._streams.get(q) for q in queues]
        return [s.offsets[-1] if s is not None and s.offsets else None for s in streams]

    def _write_checkpoint(self, queue: QueueRef, offset: Offset, epoch: int) -> None:
        self._fence(queue.group, epoch, f"checkpoint of {queue.priority}")
        old = self._committed.get(queue)
        if old is not None and offset <= old.offset:
            return  # checkpoints never move backwards
        stream = self._streams.get(queue)
        low = old.offset if old else ZERO_OFFSET
        counted = stream.count_between(low, offset) if stream else 0
        total = (old.count if old else 0) + counted
        self._committed[queue] = _Committed(offset, epoch, total)

    async def write_checkpoints(
        self, items: Sequence[tuple[QueueRef, Offset, int]]
    ) -> set[GroupRef]:
        """Each (queue, offset, epoch) in turn; the groups that were fenced."""
        self._open()
        fenced: set[GroupRef] = set()
        for queue, offset, epoch in items:
            try:
                self._write_checkpoint(queue, offset, epoch)
            except Fenced:
                fenced.add(queue.group)
        return fenced

    async def forget_finished(
        self, items: Sequence[tuple[QueueRef, int, Sequence[Offset]]]
    ) -> set[GroupRef]:
        """Each (queue, epoch, offsets) in turn; the groups that were fenced."""
        self._open()
        fenced: set[GroupRef] = set()
        for queue, epoch, offsets in items:
            try:
                self._fence(queue.group, epoch, f"forget of {queue.priority}")
            except Fenced:
                fenced.add(queue.group)
                continue
            stream, committed = self._streams.get(queue), self._committed.get(queue)
            if stream is None:
                continue
            above = [o for o in offsets if committed is None or o > committed.offset]
            gone = sum(1 for o in above if stream.pop(o) is not None)
            self._forgotten[queue] = self._forgotten.get(queue, 0) + gone
        return fenced

    async def trim_many(self, items: Sequence[tuple[QueueRef, int, int]]) -> set[GroupRef]:
        """Each (queue, epoch, retain) in turn; the groups that were fenced."""
        self._open()
        fenced: set[GroupRef] = set()
        for queue, epoch, retain in items:
            try:
                self._trim(queue, epoch, retain)
            except Fenced:
                fenced.add(queue.group)
        return fenced

    def _trim(self, queue: QueueRef, epoch: int, retain: int) -> int:
        self._fence(queue.group, epoch, f"trim of {queue.priority}")
        committed = self._committed.get(queue)
        stream = self._streams.get(queue)
        if committed is None or stream is None:
            return 0
        at_or_below = bisect.bisect_right(stream.offsets, committed.offset)
        dropped = max(0, at_or_below - max(0, retain))
        stream.drop_oldest(dropped)
        return dropped

    # ------------------------------------------------------------------ dead letters

    async def dead_letter(
        self,
        group: GroupRef,
        epoch: int,
        letters: Sequence[DeadLetter],
        retention: DlqRetention = DLQ_DEFAULTS,
    ) -> None:
        self._open()
        self._fence(group, epoch, "dead letter")
        dlq = self._dlq.setdefault(group, _Log())
        for letter in letters:
            offset = dlq.append(self._now_ms(), letter)
            dlq.items[-1] = replace(letter, id=str(offset))
        self._trim_dead(dlq, retention)

    async def trim_dead(self, items: Sequence[tuple[GroupRef, int, DlqRetention]]) -> int:
        self._open()
        return sum(
            self._trim_dead(dlq, r)
            for g, e, r in items
            if (dlq := self._dlq.get(g)) is not None and self._epochs.get(g, 0) <= e
        )

    def _trim_dead(self, dlq: _Log[DeadLetter], retention: DlqRetention) -> int:
        """Like the Redis script: the newest max_entries, then none older than max_age_s."""
        over = max(0, len(dlq.offsets) - max(0, retention.max_entries))
        min_ms = self._now_ms() - max(0, round(retention.max_age_s * 1000))
        old = bisect.bisect_left(dlq.offsets, Offset(min_ms, 0))
        n = max(over, old)
        dlq.drop_oldest(n)
        return n

    async def list_dead(self, group: GroupRef, after: str | None, limit: int) -> list[DeadLetter]:
        self._open()
        dlq = self._dlq.get(group)
        if dlq is None or limit <= 0:
            return []
        start = ZERO_OFFSET if after is None else _dlq_offset(after)
        return [letter for _, letter in dlq.after(start, limit)]

    async def replay_dead(self, group: GroupRef, ids: Sequence[str] | None, limit: int) -> int:
        self._open()
        dlq = self._dlq.get(group)
        if dlq is None or limit <= 0:
            return 0
        wanted = dlq.offsets[:limit] if ids is None else [_dlq_offset(i) for i in ids]
        moved = 0
        for offset in wanted:
            if moved >= limit:
                break
            letter = dlq.pop(offset)
            if letter is not None:
                self._append(group.queue(letter.priority), letter.payload)
                moved += 1
        log.info("replayed %d dead letters of %s", moved, group)
        if moved:
            self._notify([group])
        return moved

    # ------------------------------------------------------------------ ready signals

    async def wait_ready(
        self, cursor: str | None, timeout_s: float, count: int = 10_000
    ) -> tuple[str, list[str]]:
        """Wait up to ``timeout_s`` for signals after ``cursor``; (new cursor, group names).

        Same contract as the Redis backend's; cursors are sequence numbers as text.
        """
        self._open()
        after = self._signalled if cursor is None else _signal_number(cursor)
        deadline = asyncio.get_running_loop().time() + max(0.0, timeout_s)
        while True:
            last, names = self._signals_after(after, max(1, count))
            remaining = deadline - asyncio.get_running_loop().time()
            if names or remaining <= 0:
                return str(last), names
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._signal.wait(), remaining)
            self._open()

    def _signals_after(self, after: int, count: int) -> tuple[int, list[str]]:
        """(the last signal's number or ``after``, names) of up to ``count`` signals after it."""
        newer = min(len(self._signals), self._signalled - after)
        if newer <= 0:
            return after, []
        # Readers keep up, so the signals they want are at the end: walk back from there.
        wanted = list(itertools.islice(reversed(self._signals), newer))[::-1][:count]
        names = dict.fromkeys(name for signal in wanted for name in signal)
        return self._signalled - newer + len(wanted), list(names)

    async def aclose(self) -> None:
        self._closed = True
        self._wake()  # a blocked wait_ready wakes and finds the backend closed


def _signal_number(text: str) -> int:
    if not text.isdigit():
        raise InvalidInput("cursor", f"not a ready-signal cursor: {text!r}")
    return int(text)


def _dlq_offset(text: str) -> Offset:
    try:
        return Offset.parse(text)
    except ValueError:
        raise InvalidInput("id", f"not a dead letter id: {text!r}") from None
