"""Order per key across a quota change that adds groups.

A quota raised across a multiple of ``max_group_qps`` adds groups, and the key hash (jump
hash, :mod:`capacity.keyhash`) then sends about ``1 - before/after`` of the keys to one of the
new groups, while their jobs enqueued before the change still wait in their old group. Left
alone, a moved key's newer jobs would go at once from its new group, before its older ones.

So a worker that sees a topic's groups grow from ``before`` to ``after`` puts up a
:class:`Fence`. :data:`SETTLE_S` after it saw the change (by when every API process places by
the new count) it reads each old queue from its checkpoint to its tail (its last entry) and
notes, per key, the offset of the key's last job there. Order per key is per priority
(docs/concepts/keys.md), so queue by queue: in a new group that this worker owns, a keyed job of
priority ``p`` is parked apart (:meth:`worker.keys.KeyLines.fence`) until its key's last job in
the ``p`` queue of its old group (``jump_hash(key, before)``) has finished (delivered,
dead-lettered or handed to retry): until that queue's *frontier*, the offset at and below which
everything has finished, reaches it. An old group owned here tells its frontier from its
progress in memory; the others' are their committed checkpoints (written every second by their
owners). Parked, a job holds up neither other keys nor unkeyed jobs nor other groups; when its
key's turn comes, its key's parked jobs go back to their buffer in offset order
(``Dispatcher.unfence``) and then go one of a key at a time, as keyed jobs always do. Keys that
stayed in their group, unkeyed jobs and keys with no earlier job in their old queue are never
held. A queue longer than :data:`SCAN_MAX` is not read: its moved keys wait for all of it.

States of a fence::

    READING --the old queues read--> WATCHING --every old queue's frontier at its tail--> (gone)

While READING, every keyed job of a new group is parked; then those whose key has nothing
earlier in its old queue go at once. A second change before the first fence is gone adds a
fence of its own: it covers its own new groups (``before..after-1``), and the old groups it
waits for were themselves fenced by the first.

What it does not cover (both only reorder; nothing is lost): a worker that did not see the
change (started after it) puts up no fence, so a new group it takes over from a worker that was
fencing lets its keys go; and a job placed by the old count after the old queues were read (by
an API process that saw the change more than :data:`SETTLE_S` late) may go after a newer one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import orjson

from capacity.keyhash import jump_hash
from emq.core.errors import BackendUnavailable
from emq.core.interfaces import ZERO_OFFSET, GroupOwner, Offset
from emq.core.model import GroupRef, QueueRef, TopicRef
from worker.groups import Lifecycle

if TYPE_CHECKING:
    from worker.groups import GroupState, TopicState

log = logging.getLogger(__name__)

SETTLE_S = 0.2  # after seeing a change, before reading the old queues
# How often an old queue that this worker owns is looked at (its progress, in memory), and how
# often the checkpoints of the others are read (their owners write them every second).
POLL_S = 0.05
REMOTE_POLL_S = 0.25
RETRY_S = 1.0  # after a failed read
SCAN_MAX = 200_000  # entries read per old queue at most; past it its moved keys wait for all
READ_BATCH = 1000

# What a parked job waits for: (fence, old group, priority rank, offset of its key's last job
# there; None while the fence is READING).
Until = tuple["Fence", int, int, Offset | None]


class Fence:
    """One change of a topic's group count, from ``before`` to ``after`` groups. Old queues
    are numbered ``group * 3 + rank``."""

    __slots__ = ("after", "before", "frontier", "last", "open", "seen", "tails")

    def __init__(self, before: int, after: int, seen: float = 0.0) -> None:
        self.before, self.after = before, after
        self.seen = seen  # monotonic: when the worker saw the change
        self.open = [[False, False, False] for _ in range(before)]  # per old group and rank
        self.tails: list[Offset | None] | None = None  # per old queue: its last entry
        # Per old queue: its keys' last offsets (None: not read, every key waits for the tail).
        self.last: list[dict[str, Offset] | None] | None = None
        self.frontier = [ZERO_OFFSET] * (3 * before)  # per old queue: finished up to here

    def waits_for(self, index: int, key: str, rank: int) -> Until | None:
        """What a job of ``key`` and priority ``rank`` in group ``index`` waits for, if any."""
        if not self.before <= index < self.after:
            return None
        old = jump_hash(key, self.before)
        if self.open[old][rank]:
            return None
        if self.last is None or self.tails is None:
            return (self, old, rank, None)
        q = old * 3 + rank
        keys = self.last[q]
        offset = self.tails[q] if keys is None else keys.get(key)
        if offset is None or offset <= self.frontier[q]:
            return None
        return (self, old, rank, offset)

    @property
    def passed(self) -> bool:
        return all(all(ranks) for ranks in self.open)

    def waiting(self) -> list[tuple[int, int]]:
        """The old queues not passed yet, as ``(group, rank)``."""
        return [
            (g, r) for g, ranks in enumerate(self.open) for r, done in enumerate(ranks) if not done
        ]


def waits_for(fences: Sequence[Fence], index: int, key: str, rank: int) -> Until | None:
    """What holds a job of ``key`` and priority ``rank`` in group ``index``, if anything."""
    for fence in fences:
        until = fence.waits_for(index, key, rank)
        if until is not None:
            return until
    return None


def old_queue(topic: TopicRef, group: int, rank: int) -> QueueRef:
    return GroupRef(topic, group).queues()[rank]


def key_of(payload: bytes) -> str | None:
    """The ``key`` of a stored job (None: none, or unreadable)."""
    try:
        key = orjson.loads(payload)["job"].get("key")
    except Exception:
        return None
    return key if isinstance(key, str) else None


class Regroups:
    """The fences of a worker's topics and the loop that lifts them (see the module docstring).
    ``unfence(group, until, rank)`` lets a group's jobs parked until ``until`` go (the
    dispatcher's); ``commit(groups)`` writes owned groups' checkpoints (the committer's): an old
    group owned here has its checkpoints written every :data:`REMOTE_POLL_S` while a new group
    of its topic is owned elsewhere, for that owner to follow it sooner than every second."""

    def __init__(
        self,
        queues: GroupOwner,
        unfence: Callable[[GroupState, object, int], None],
        poll_s: float = POLL_S,
        settle_s: float = SETTLE_S,
        remote_poll_s: float = REMOTE_POLL_S,
        commit: Callable[[list[GroupState]], Awaitable[None]] | None = None,
    ) -> None:
        self._queues = queues
        self._unfence = unfence
        self._commit = commit
        self._poll_s, self._settle_s, self._remote_poll_s = poll_s, settle_s, remote_poll_s
        self._remote_at = 0.0  # monotonic: when the others' checkpoints are read next
        self._watching: list[tuple[TopicState, Fence]] = []
        self._wake = asyncio.Event()

    def changed(self, topic: TopicState, before: int, after: int) -> Fence:
        """``topic`` went from ``before`` to ``after`` groups: a fence for its new groups."""
        fence = Fence(before, after, time.monotonic())
        topic.fences.append(fence)
        self._watching.append((topic, fence))
        self._wake.set()
        log.info(
            "topic %s: %d -> %d groups: moved keys wait for their old groups' earlier jobs",
            topic.topic.ref, before, after,
        )  # fmt: skip
        return fence

    async def run(self) -> None:
        while True:
            if not self._watching:
                self._wake.clear()
                await self._wake.wait()
            try:
                await self.step()
            except BackendUnavailable as e:
                log.warning("regroup fences: %s; trying again in %.1f s", e, RETRY_S)
                await asyncio.sleep(RETRY_S)
                continue
            await asyncio.sleep(self._poll_s)

    async def step(self) -> None:
        """One look at every fence: its old queues read (once, :data:`SETTLE_S` after the
        change), their frontiers moved on (an owned one's from its progress, the others' from
        their checkpoints at most every :data:`REMOTE_POLL_S`), the jobs whose turn came let go."""
        now = time.monotonic()
        remote = now >= self._remote_at
        if remote:
            self._remote_at = now + self._remote_poll_s
        for topic, fence in list(self._watching):
            if fence.last is None:
                if now < fence.seen + self._settle_s:
                    continue
                await self._read(topic, fence)
                self._release(topic, fence)  # (READING's jobs: their turn now, or a new wait)
            others, mine = [], set()
            for g, r in fence.waiting():
                owned = topic.groups.get(g)
                if owned is None or owned.state is not Lifecycle.OWNED:
                    others.append((g, r))
                else:
                    mine.add(owned)
                    queue = old_queue(topic.topic.ref, g, r)
                    self._advance(fence, g, r, owned.progress[queue].finished_to())
            elsewhere = any(i not in topic.groups for i in range(fence.before, fence.after))
            if remote and mine and elsewhere and self._commit is not None:
                await self._commit(list(mine))
            if remote and others:
                queues = [old_queue(topic.topic.ref, g, r) for g, r in others]
                done = await self._queues.read_checkpoints(queues)
                for (g, r), checkpoint in zip(others, done, strict=True):
                    if checkpoint is not None:
                        self._advance(fence, g, r, checkpoint.offset)
            self._release(topic, fence)
            if fence.passed:
                self._watching.remove((topic, fence))
                topic.fences.remove(fence)
                log.info("topic %s: the old groups' earlier jobs are done", topic.topic.ref)

    async def _read(self, topic: TopicState, fence: Fence) -> None:
        """The old queues' tails, checkpoints and their keys' last offsets up to the tails."""
        ref = topic.topic.ref
        queues = [old_queue(ref, g, r) for g in range(fence.before) for r in range(3)]
        tails = await self._queues.tails(queues)
        starts = await self._queues.read_checkpoints(queues)
        last: list[dict[str, Offset] | None] = []
        for queue, tail, start in zip(queues, tails, starts, strict=True):
            at = start.offset if start is not None else ZERO_OFFSET
            last.append({} if tail is None or at >= tail else await self._keys(queue, at, tail))
        fence.tails, fence.last = tails, last
        for q, (tail, start) in enumerate(zip(tails, starts, strict=True)):
            g, r = divmod(q, 3)
            self._advance(fence, g, r, start.offset if start is not None else ZERO_OFFSET)
            if tail is None:
                fence.open[g][r] = True

    async def _keys(self, queue: QueueRef, at: Offset, tail: Offset) -> dict[str, Offset] | None:
        """The last offset of each key in ``queue`` after ``at`` up to ``tail`` (None: more
        than :data:`SCAN_MAX` entries)."""
        last: dict[str, Offset] = {}
        read = 0
        while at < tail:
            entries = (await self._queues.read({queue: at}, READ_BATCH)).get(queue)
            if not entries:
                break
            for entry in entries:
                if entry.offset > tail:
                    return last
                if (key := key_of(entry.payload)) is not None:
                    last[key] = entry.offset
            at = entries[-1].offset
            read += len(entries)
            if read > SCAN_MAX:
                return None
        return last

    @staticmethod
    def _advance(fence: Fence, group: int, rank: int, frontier: Offset) -> None:
        q = group * 3 + rank
        if frontier > fence.frontier[q]:
            fence.frontier[q] = frontier
        tail = fence.tails[q] if fence.tails is not None else None
        if fence.tails is not None and (tail is None or fence.frontier[q] >= tail):
            fence.open[group][rank] = True

    def _release(self, topic: TopicState, fence: Fence) -> None:
        """Let go the jobs of the topic's owned groups whose wait on ``fence`` is over."""
        for group in list(topic.groups.values()):
            lines = group.keys
            if lines is None or not lines.fenced:
                continue
            for until in list(lines.fenced):
                assert isinstance(until, tuple)
                if until[0] is fence and self._over(fence, until):
                    self._unfence(group, until, until[2])

    @staticmethod
    def _over(fence: Fence, until: Until) -> bool:
        _, g, r, offset = until
        if offset is None:  # parked while READING: its turn, or its own wait, now
            return fence.last is not None
        return fence.open[g][r] or offset <= fence.frontier[g * 3 + r]
