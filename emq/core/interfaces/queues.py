"""The queue store seam: offsets, entries, checkpoints, what is put and dead-lettered, the
store's health, and :class:`QueueBackend` seen through one role per user.

* :class:`JobProducer` — what the API needs to accept jobs and show a topic: put, count.
* :class:`GroupOwner` — what a worker needs: claim, read, checkpoint, trim, retry, dead-letter.
* :class:`DeadLetterAdmin` — what an operator needs: list and replay dead letters.
* :class:`ApiQueues` — the API's two; :class:`QueueBackend` — all of them, what the adapters
  implement (``adapters``: Redis standalone/Cluster, in-memory).
"""

from __future__ import annotations

import abc
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from emq.core.errors import Fenced
from emq.core.interfaces.resource import AsyncResource
from emq.core.model import DLQ_DEFAULTS, DlqRetention, GroupRef, Priority, QueueRef

_OFFSET_RE = re.compile(r"^(\d+)-(\d+)$")


class Offset(NamedTuple):
    """A position in a physical queue: ``ms-seq`` (milliseconds, then a sequence within them).

    Offsets grow strictly within a queue; :data:`ZERO_OFFSET` is before the first entry. A
    named tuple rather than a dataclass: every fetched job's offset is made, hashed and compared
    on the worker's hot path, and a tuple does all three in C.
    """

    ms: int
    seq: int

    @classmethod
    def parse(cls, text: str) -> Offset:
        m = _OFFSET_RE.match(text)
        if not m:
            raise ValueError(f"not an offset: {text!r}")
        return cls(int(m.group(1)), int(m.group(2)))

    def __str__(self) -> str:
        return f"{self.ms}-{self.seq}"


ZERO_OFFSET = Offset(0, 0)
"""Before the first entry of every queue."""


class Entry(NamedTuple):
    """One stored job: its offset in the queue and its encoded payload (made per fetched job)."""

    offset: Offset
    payload: bytes


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A committed offset (everything at or below it is finished) and the epoch that wrote it."""

    offset: Offset
    epoch: int


# A group claimed: whether its claim was contested, and its high, medium, low checkpoints.
Claimed = tuple[bool, list[Checkpoint | None]]


@dataclass(frozen=True, slots=True)
class PutItem:
    """One job to store: its encoded envelope, where it goes, and how.

    ``idempotency_key`` de-duplicates within the backend's window (the marker lives with the
    group, so the check and the append are one atomic step). ``due_ms`` (epoch milliseconds)
    parks the job in the group's durable delayed set until then.
    """

    queue: QueueRef
    job_id: str
    payload: bytes
    idempotency_key: str | None = None
    due_ms: int | None = None


@dataclass(frozen=True, slots=True)
class PutResult:
    """What happened to one :class:`PutItem`.

    For a duplicate, ``job_id`` is the id of the job accepted first under that idempotency key
    and nothing was stored. ``offset`` is ``None`` for delayed jobs and duplicates.
    """

    job_id: str
    duplicate: bool = False
    offset: Offset | None = None


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A job to put back later: a retry, or a delayed job."""

    priority: Priority
    payload: bytes
    due_ms: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A job that exhausted its attempts (or was refused outright), with why."""

    id: str  # the DLQ entry's own id (an offset in the group's DLQ log)
    priority: Priority
    payload: bytes
    error: str
    status: int | None
    attempts: int
    failed_at_ms: int


class BackendHealth:
    """What a backend's recent calls found, kept at the seam for health endpoints.

    States: *up* (the last call answered; ``down_since`` is None) and *down* (the last call
    found the store unreachable; ``down_since`` is when the outage was first seen, ``error``
    why). A call that answers moves it back to up. Recording costs two attribute writes, so
    the adapter does it on every call rather than pinging on a timer.
    """

    __slots__ = ("down_since", "error", "last_ok")

    def __init__(self) -> None:
        self.last_ok: float | None = None  # monotonic time of the last answered call
        self.down_since: float | None = None  # monotonic time the outage was first seen
        self.error = ""

    @property
    def up(self) -> bool:
        return self.down_since is None

    def ok(self) -> None:
        self.last_ok = time.monotonic()
        self.down_since = None

    def failed(self, error: str) -> None:
        if self.down_since is None:
            self.down_since = time.monotonic()
        self.error = error

    def describe(self) -> str:
        """``ok``, or ``unavailable for N s: <error>``."""
        if self.down_since is None:
            return "ok"
        return f"unavailable for {time.monotonic() - self.down_since:.1f} s: {self.error}"


class QueueProbe(Protocol):
    """What every role may ask of the queue store: is it there?"""

    health: BackendHealth  # what the store's recent calls found (for health endpoints)

    @abc.abstractmethod
    async def ping(self) -> None:
        """Check the store answers; ``BackendUnavailable`` if it does not."""


class JobProducer(QueueProbe, Protocol):
    """What the API needs to accept jobs and show a topic: put, and count what waits."""

    @abc.abstractmethod
    async def put(self, items: Sequence[PutItem]) -> list[PutResult]:
        """Store each item (many queues per call); results are in the order of ``items``.

        When it returns, every stored item is durable (as durable as the store's persistence).
        """

    @abc.abstractmethod
    async def backlog(self, queues: Sequence[QueueRef]) -> list[int]:
        """For each queue, how many entries lie after its checkpoint (its unfinished work)."""

    @abc.abstractmethod
    async def delayed(self, groups: Sequence[GroupRef]) -> list[int]:
        """For each group, how many jobs wait in its delayed set."""


class DeadLetterAdmin(QueueProbe, Protocol):
    """What an operator needs of a group's dead letters: list them, send them back."""

    @abc.abstractmethod
    async def list_dead(self, group: GroupRef, after: str | None, limit: int) -> list[DeadLetter]:
        """Up to ``limit`` dead letters of the group, oldest first, after the id ``after``."""

    @abc.abstractmethod
    async def replay_dead(self, group: GroupRef, ids: Sequence[str] | None, limit: int) -> int:
        """Move dead letters (the given ids, or the oldest ``limit``) back into their queues.

        Atomic per letter; returns how many were moved.
        """


class ApiQueues(JobProducer, DeadLetterAdmin, Protocol):
    """What the HTTP API holds: it accepts jobs, shows topics and administers dead letters."""


class GroupOwner(QueueProbe, Protocol):
    """What the owner of groups (a worker) needs: claim and fence, read, checkpoint and trim,
    promote delayed jobs, schedule retries, write and age dead letters, learn which groups got
    work.

    Every write made on behalf of the owner carries its epoch and is refused (``Fenced``, or
    reported in the returned set of fenced groups) once a newer owner has claimed the group.
    """

    @abc.abstractmethod
    async def claim(self, group: GroupRef, epoch: int, holder: str = "") -> bool:
        """Make ``epoch`` the group's owner epoch and ``holder`` (one worker process) its holder;
        ``Fenced`` if a newer epoch was claimed.

        Returns True if the claim was *contested*: another holder had claimed the group and never
        released it (:meth:`release_holds`), so it may still be pushing its jobs until its next
        :meth:`check_holds` (see :mod:`allocator.fleet`).
        """

    async def claim_groups(
        self, groups: Sequence[tuple[GroupRef, int]], holder: str
    ) -> list[Claimed | Fenced]:
        """:meth:`claim` each ``(group, epoch)`` and then read its three checkpoints (high,
        medium, low; final, since the claim fenced any former owner's writes): per group,
        ``(contested, checkpoints)``, or the ``Fenced`` it met. A backend may do all of it in
        one round trip: a worker taking over thousands of groups claims them in batches."""
        out: list[Claimed | Fenced] = []
        for group, epoch in groups:
            try:
                contested = await self.claim(group, epoch, holder)
            except Fenced as e:
                out.append(e)
                continue
            out.append((contested, await self.read_checkpoints(group.queues())))
        return out

    @abc.abstractmethod
    async def release_holds(self, groups: Sequence[GroupRef], holder: str) -> None:
        """``holder`` stopped touching ``groups`` for good: the next claim is not contested.

        Only a group ``holder`` still holds is changed.
        """

    @abc.abstractmethod
    async def check_holds(
        self, groups: Sequence[tuple[GroupRef, int]], holder: str, full: bool = True
    ) -> set[GroupRef]:
        """Of ``(group, epoch)`` claimed by ``holder``, the groups claimed since by another
        holder or at a newer epoch (a group with no holder recorded is not counted as lost).

        Cheap however many groups: a worker asks several times a second. With ``full=False``
        a backend that records which claims took groups from each holder may answer from that
        record instead of reading every group: it must still report every group a claim took,
        but a change no claim made (a write lost in a failover, a hand edit) may show only at
        the next call with ``full=True``.
        """

    @abc.abstractmethod
    async def read(
        self, requests: Mapping[QueueRef, Offset], count: int | Mapping[QueueRef, int]
    ) -> dict[QueueRef, list[Entry]]:
        """Read up to ``count`` entries after each given offset, many queues per call.

        ``count`` is one for every queue, or each queue's own (a queue missing from it, or
        asking 0, is not read). Queues with nothing new are left out of the result.
        """

    async def unread(self, after: Mapping[QueueRef, Offset]) -> set[QueueRef]:
        """Of the given queues, those with an entry after the given offset; nothing is read
        (the worker's sweep asks it of every queue it owns, every ``sweep_interval_s``, to find
        a job whose ready signal was lost). Here: a read of one entry per queue; a backend
        may answer more cheaply."""
        return set(await self.read(after, 1))

    @abc.abstractmethod
    async def read_checkpoint(self, queue: QueueRef) -> Checkpoint | None:
        """The queue's committed checkpoint, or ``None`` if nothing was ever committed."""

    async def read_checkpoints(self, queues: Sequence[QueueRef]) -> list[Checkpoint | None]:
        """:meth:`read_checkpoint` of each of ``queues``, in order (a backend may read them in
        one round trip: a worker claiming thousands of groups reads three each)."""
        return [await self.read_checkpoint(q) for q in queues]

    async def tails(self, queues: Sequence[QueueRef]) -> list[Offset | None]:
        """Per queue of ``queues``, in order: the offset of its last entry stored, or None when
        it holds nothing past its checkpoint. Every job of the queue not finished yet lies at or
        below it (a worker holding the keys that a quota change moved waits for their old
        groups' checkpoints to reach these, see worker.regroup). Here: the queue read from its
        checkpoint to its end; a backend may answer in one round trip."""
        out: list[Offset | None] = []
        for queue in queues:
            committed = await self.read_checkpoint(queue)
            at = committed.offset if committed is not None else ZERO_OFFSET
            last: Offset | None = None
            while entries := (await self.read({queue: at}, 1000)).get(queue):
                last = at = entries[-1].offset
            out.append(last)
        return out

    @abc.abstractmethod
    async def write_checkpoints(
        self, items: Sequence[tuple[QueueRef, Offset, int]]
    ) -> set[GroupRef]:
        """Commit each ``(queue, offset, epoch)``; returns the groups whose writes were fenced
        (and did nothing); never raises ``Fenced``.

        An offset below the committed one is ignored: checkpoints never move backwards.
        """

    @abc.abstractmethod
    async def forget_finished(
        self, items: Sequence[tuple[QueueRef, int, Sequence[Offset]]]
    ) -> set[GroupRef]:
        """For each ``(queue, epoch, offsets)``, remove the entries at ``offsets`` that lie above
        the checkpoint (finished by the owner holding ``epoch``: delivered, retried or
        dead-lettered while an older entry was not) and count them as committed, so the
        backlog stays exact; returns the fenced groups (removed nothing).

        A group let go with jobs finished above its checkpoint (a keyed job held behind its
        key, a job parked for its endpoint's pace, a push that outlived the release grace: the
        checkpoint stops below the oldest unfinished entry) would otherwise have them delivered
        again by its next owner, with no crash to explain the duplicate.
        """

    @abc.abstractmethod
    async def trim_many(self, items: Sequence[tuple[QueueRef, int, int]]) -> set[GroupRef]:
        """For each ``(queue, epoch, retain)``, drop the entries at or below the checkpoint,
        keeping the newest ``retain`` of those; returns the fenced groups (trimmed nothing)."""

    @abc.abstractmethod
    async def promote_due(self, group: GroupRef, now_ms: int, limit: int) -> int:
        """Move up to ``limit`` delayed jobs due at ``now_ms`` into their queues; returns how many.

        Atomic per job: a job is either still delayed or appended once, never both.
        """

    async def release_deferred(
        self, group: GroupRef, endpoint: str, until_ms: int, now_ms: int
    ) -> int:
        """Make the jobs of ``group``'s delayed set that go to ``endpoint`` (``host:port``, as
        :func:`emq.core.endpoints.endpoint_of` names it; ``*``: any) and are due by
        ``until_ms`` due at ``now_ms``, and announce them; returns how many. Jobs put with a
        due time of their own (``delay_s``) keep it. For a re-enabled endpoint: the jobs it
        deferred while disabled are released at once, not when their deferral ends. A backend
        without it releases none (they come back when due)."""
        return 0

    @abc.abstractmethod
    async def schedule(self, group: GroupRef, epoch: int, items: Sequence[Scheduled]) -> None:
        """Park jobs in the group's delayed set until due (retries); guarded by ``epoch``."""

    @abc.abstractmethod
    async def dead_letter(
        self,
        group: GroupRef,
        epoch: int,
        letters: Sequence[DeadLetter],
        retention: DlqRetention = DLQ_DEFAULTS,
    ) -> None:
        """Append to the group's DLQ (``letters[i].id`` is ignored); guarded by ``epoch``.

        In the same atomic step the DLQ is trimmed to ``retention`` (exactly: the newest
        ``max_entries`` letters, none older than ``max_age_s``; the new ones count too).
        """

    @abc.abstractmethod
    async def trim_dead(self, items: Sequence[tuple[GroupRef, int, DlqRetention]]) -> int:
        """Trim each group's DLQ to its retention, (group, epoch, retention) each; how many
        letters were removed. Lets a quiet DLQ (no new letter trims it) age out.

        A fenced item (a newer owner claimed the group) removes nothing; never raises Fenced.
        """

    @abc.abstractmethod
    async def wait_ready(
        self, cursor: str | None, timeout_s: float, count: int = 10_000
    ) -> tuple[str, list[str]]:
        """Block up to ``timeout_s`` for ready signals after ``cursor`` (``None``: from now).

        Returns the next cursor and the names (``str(GroupRef)``) of groups that got work.
        Signals are hints: a lost one only delays work until the worker's sweep.
        """

    @abc.abstractmethod
    async def due_groups(self, now_ms: int, limit: int) -> list[str]:
        """Names of groups whose delayed set may hold a job due at ``now_ms``."""

    async def due_scan(self, now_ms: int, limit: int) -> tuple[list[str], int | None]:
        """:meth:`due_groups`, and the earliest due time after ``now_ms`` in the index (None:
        none), read together: when the worker must look next if no hint comes first. A store
        that cannot tell says None (it gives no due hints either: :meth:`watch_due`)."""
        return await self.due_groups(now_ms, limit), None

    def watch_due(self, hint: Callable[[int], None]) -> bool:
        """Call ``hint(due_ms)`` when a job is parked until ``due_ms`` sooner than
        :data:`emq.core.signals.DUE_HINT_HORIZON_S` ahead: at once after this process parks it
        (a retry), when :meth:`wait_ready` reads its signal if another process did (the API's
        ``delay_s``). Hints are best-effort, like ready signals: a lost one delays the job until
        the worker looks anyway, at most the horizon later. Returns whether the store gives
        hints; without them (False) the worker polls :meth:`due_groups` often instead."""
        return False

    @abc.abstractmethod
    async def reindex_delayed(self, groups: Sequence[GroupRef]) -> None:
        """Refresh the due index of these groups from their delayed sets."""

    def address_to(self, worker: str, owns: Callable[[str], bool]) -> None:
        """Read, besides the shared hints, those addressed to ``worker`` (its inbox, see
        :mod:`emq.core.signals`); ``owns(name)`` says whether it owns a group now: hints for a
        group it does not own are handed on to the shared keys, where the owner finds them.
        A store with nothing to address (one process) ignores this."""
        return None


class QueueBackend(JobProducer, DeadLetterAdmin, GroupOwner, AsyncResource):
    """Physical queues: append-only logs addressed by :class:`Offset`, in every role.

    Besides the three logs, each group has a delayed set (jobs not yet due), a dead-letter log,
    per-queue checkpoints and an owner epoch. Adapters implement this whole class; callers are
    typed against the one role they use (:class:`JobProducer` / :class:`ApiQueues` for the API,
    :class:`GroupOwner` for a worker, :class:`DeadLetterAdmin` for operators), and only the
    composition root, which opens and closes the store, holds a ``QueueBackend``.

    Errors: :class:`~emq.core.errors.BackendUnavailable` when the store cannot be reached.
    """

    health: BackendHealth = BackendHealth()  # replaced per instance by backends that track it
