"""Order per key across a quota change that adds groups.

A quota raised across a multiple of ``max_group_qps`` adds groups, and the key hash (jump
hash, :mod:`capacity.keyhash`) then sends about ``1 - before/after`` of the keys to one of the
new groups, while their jobs enqueued before the change still wait in their old group. Left
alone, a moved key's newer jobs would go at once from its new group, before its older ones.

So a worker that sees a topic's groups grow from ``before`` to ``after`` puts up a
:class:`Fence`. It reads the tails of the old groups' queues (the last offset stored in each,
:data:`SETTLE_S` after it saw the change, by when every API process places by the new count).
An old group's queue *passes* once its committed checkpoint reaches that tail: every job placed
in it before the change has finished (delivered, dead-lettered or handed to retry). Order per
key is per priority (docs/concepts/keys.md), so the queues pass one by one: in a new group that
this worker owns, a keyed job of priority ``p`` is parked apart
(:meth:`worker.keys.KeyLines.fence`) while the ``p`` queue of its key's old group
(``jump_hash(key, before)``) has not passed. Parked, it holds up neither other keys nor unkeyed
jobs nor other groups; when that queue passes, its parked jobs go back to their buffer in offset
order (``Dispatcher.unfence``) and then go one of a key at a time, as keyed jobs always do. Keys
that stayed in their group, unkeyed jobs, and jobs whose old queue has passed are never held.

States of a fence::

    READING --tails read--> WATCHING --every old queue passed--> (gone)

While READING, every keyed job of a new group is parked. A second change before the first
fence is gone adds a fence of its own: it covers its own new groups (``before..after-1``), and
the old groups it waits for were themselves fenced by the first.

What it does not cover (both only reorder; nothing is lost): a worker that did not see the
change (started after it) puts up no fence, so a new group it takes over from a worker that was
fencing lets its keys go; and a job placed by the old count after the tails were read (by an API
process that saw the change more than :data:`SETTLE_S` late) may go after a newer one of its key.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from capacity.keyhash import jump_hash
from emq.core.errors import BackendUnavailable
from emq.core.interfaces import Checkpoint, GroupOwner, Offset
from emq.core.model import GroupRef, QueueRef, TopicRef

if TYPE_CHECKING:
    from worker.groups import GroupState, TopicState

log = logging.getLogger(__name__)

SETTLE_S = 0.5  # after seeing a change, before reading the old groups' tails
POLL_S = 0.2  # how often the old queues' checkpoints are read (workers write them every 1 s)
RETRY_S = 1.0  # after a failed read

Until = tuple["Fence", int, int]  # (fence, old group, priority rank): what a parked job waits for


class Fence:
    """One change of a topic's group count, from ``before`` to ``after`` groups."""

    __slots__ = ("after", "before", "open", "seen", "tails")

    def __init__(self, before: int, after: int, seen: float = 0.0) -> None:
        self.before, self.after = before, after
        self.seen = seen  # monotonic: when the worker saw the change
        self.open = [[False, False, False] for _ in range(before)]  # per old group and rank
        self.tails: list[Offset | None] | None = None  # per old queue (group * 3 + rank)

    def waits_for(self, index: int, key: str, rank: int) -> Until | None:
        """What a job of ``key`` and priority ``rank`` in group ``index`` waits for, if any."""
        if not self.before <= index < self.after:
            return None
        old = jump_hash(key, self.before)
        return None if self.open[old][rank] else (self, old, rank)

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


def reached(checkpoint: Checkpoint | None, tail: Offset | None) -> bool:
    """Whether a queue's committed ``checkpoint`` reaches its ``tail`` (None: nothing to wait
    for)."""
    return tail is None or (checkpoint is not None and checkpoint.offset >= tail)


def old_queue(topic: TopicRef, group: int, rank: int) -> QueueRef:
    return GroupRef(topic, group).queues()[rank]


class Regroups:
    """The fences of a worker's topics and the loop that lifts them (see the module docstring).
    ``unfence(group, until, rank)`` lets a group's jobs parked until ``until`` go (the
    dispatcher's)."""

    def __init__(
        self,
        queues: GroupOwner,
        unfence: Callable[[GroupState, object, int], None],
        poll_s: float = POLL_S,
        settle_s: float = SETTLE_S,
    ) -> None:
        self._queues = queues
        self._unfence = unfence
        self._poll_s, self._settle_s = poll_s, settle_s
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
        """One look at every fence: its tails read (once, :data:`SETTLE_S` after the change),
        the old queues' checkpoints compared with them, the queues that passed opened."""
        for topic, fence in list(self._watching):
            ref = topic.topic.ref
            if fence.tails is None:
                if time.monotonic() < fence.seen + self._settle_s:
                    continue
                every = [(g, r) for g in range(fence.before) for r in range(3)]
                fence.tails = await self._queues.tails([old_queue(ref, g, r) for g, r in every])
            waiting = fence.waiting()
            done = await self._queues.read_checkpoints([old_queue(ref, g, r) for g, r in waiting])
            for (g, r), checkpoint in zip(waiting, done, strict=True):
                if reached(checkpoint, fence.tails[g * 3 + r]):
                    self.open(topic, fence, g, r)

    def open(self, topic: TopicState, fence: Fence, old: int, rank: int) -> None:
        """Old group ``old``'s queue of ``rank`` passed: jobs parked until it may go."""
        fence.open[old][rank] = True
        until = (fence, old, rank)
        for group in list(topic.groups.values()):
            lines = group.keys
            if lines is not None and until in lines.fenced:
                self._unfence(group, until, rank)
        if fence.passed:
            self._watching.remove((topic, fence))
            topic.fences.remove(fence)
            log.info("topic %s: the old groups' earlier jobs are done", topic.topic.ref)
