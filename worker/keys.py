"""Order per key: at most one job of a ``key`` in flight in a group, the next only after it.

Jobs of one key hash to one group (emq.api.enqueue), so one worker sees them all, in offset order
per queue. The dispatcher asks :meth:`KeyLines.admit` for every keyed job it takes from a
buffer; a job whose key has one in flight is *parked* behind it (taken out of the buffer, so
it blocks neither other keys nor other groups, and no tick scans it again). When the push of
the job in flight ends (:meth:`KeyLines.done`, from the sender), the first parked job of its
key *of the highest priority parked* becomes the key's *next* (order is per priority: a high
job of a key parked behind the key's lows goes before them, as it would have from the
buffers): it goes back to the front of its buffer, and only it may be
admitted for that key. A job whose key a quota change moved to this group while its earlier
jobs wait in the old group is parked apart until they are done (:meth:`KeyLines.fence`,
worker.regroup), then goes back to its buffer and through :meth:`KeyLines.admit` like any other.
Unkeyed jobs never reach this module, and a group that has never seen a
keyed job has no :class:`KeyLines` at all. The dispatcher bounds the parked jobs per priority
(``ranks``; beyond it a job is *held* at its buffer's head). When a key is done, its next job
goes at once with the sender whose push just ended if its group's quota grants it and nothing
of a higher priority waits in the group (``Dispatcher.keyed_done``); otherwise the dispatcher
wakes the group, and it goes one loop iteration after its previous push ended.

States of one key in a group::

    (absent) --admit--> IN FLIGHT --done, none parked--> (absent)
    IN FLIGHT --admit of another job--> IN FLIGHT (that job parked)
    IN FLIGHT --done, some parked--> NEXT (the first parked job back in its buffer)
    NEXT --admit of that job--> IN FLIGHT
    NEXT --admit of a job of a higher priority--> IN FLIGHT (that job; the next one parked
                                                  again, first of its priority)
    IN FLIGHT --handed back (its quota went with the second it was reserved in)--> NEXT (itself)

"Done" means the push ended: delivered, dead-lettered, or handed to retry. A retried job does
*not* hold back later jobs of its key: it waits in the group's delayed set (backoff of seconds
to hours) and joins the queue again at its end, so a failing endpoint would otherwise stop its
key for the whole retry schedule, and a worker that owns the key only while it owns the group
could not even keep the hold across a handover. So order per key holds when no failure
intervenes (ARCHITECTURE.md invariant 5): a retried job arrives after jobs of its key enqueued
after it.
"""

from __future__ import annotations

from collections import deque
from typing import TypeVar

T = TypeVar("T")


class _Line:
    __slots__ = ("next", "next_rank", "parked")

    def __init__(self) -> None:
        # Parked jobs per priority rank (0 high, 1 medium, 2 low), each in parking order; a
        # rank's deque is made by its first parked job.
        self.parked: list[deque[object] | None] = [None, None, None]
        self.next: object | None = None  # the job allowed to go next (back in its buffer)
        self.next_rank = 0

    def pop(self) -> tuple[object, int] | None:
        """The first parked job of the highest priority parked, and its rank."""
        for rank, jobs in enumerate(self.parked):
            if jobs:
                return jobs.popleft(), rank
        return None


class KeyLines:
    """The keys of one group that have a job in flight, and the jobs parked behind them."""

    __slots__ = ("_lines", "displaced", "fenced", "parked", "ranks")

    def __init__(self) -> None:
        self._lines: dict[str, _Line] = {}
        self.parked = 0  # jobs parked in all lines
        self.ranks = [0, 0, 0]  # of which per priority rank (the dispatcher bounds each)
        # A key's next job that a higher one of its key just took the turn from (admit): the
        # caller takes it out of its buffer (it is parked again, first of its rank).
        self.displaced: object | None = None
        # Jobs parked by a change of the group count (worker.regroup), per what they wait for.
        self.fenced: dict[object, list[object]] = {}

    def __len__(self) -> int:
        return len(self._lines)

    def fence(self, until: object, job: object, rank: int) -> None:
        """Park ``job`` (of priority ``rank``) until ``until`` passes: earlier jobs of its key
        are elsewhere (worker.regroup). It is counted with the parked jobs, outside any line."""
        self.fenced.setdefault(until, []).append(job)
        self.parked += 1
        self.ranks[rank] += 1

    def unfence(self, until: object, rank: int) -> list[object]:
        """The jobs parked until ``until`` (all of priority ``rank``), in parking order."""
        jobs = self.fenced.pop(until, [])
        self.parked -= len(jobs)
        self.ranks[rank] -= len(jobs)
        return jobs

    def admit(self, key: str, job: object, rank: int = 1, *, park: bool = True) -> bool | None:
        """May ``job`` (of priority ``rank``: 0 high, 1 medium, 2 low) go now? If not, it is
        parked behind its key's job in flight (False), or, with ``park`` false, left where it
        is (None)."""
        line = self._lines.get(key)
        if line is None:
            self._lines[key] = _Line()
            return True
        if line.next is job:
            line.next = None
            return True
        if line.next is not None and rank < line.next_rank:
            # The key is free, its next job waits in a lower buffer (behind the group's higher
            # jobs, maybe for long): this one goes first, as it would have had both been parked.
            displaced, line.next = line.next, None
            jobs = line.parked[line.next_rank]
            if jobs is None:
                jobs = line.parked[line.next_rank] = deque()
            jobs.appendleft(displaced)  # (the oldest of its key and rank)
            self.parked += 1
            self.ranks[line.next_rank] += 1
            self.displaced = displaced
            return True
        if not park:
            return None
        jobs = line.parked[rank]
        if jobs is None:
            jobs = line.parked[rank] = deque()
        jobs.append(job)
        self.parked += 1
        self.ranks[rank] += 1
        return False

    def done(self, key: str) -> object | None:
        """The job of ``key`` in flight ended: the job to put back at the front of its buffer
        (the key's next), or ``None`` (the key is free)."""
        line = self._lines.get(key)
        if line is None:
            return None
        popped = line.pop()
        if popped is None:
            line.next = None
            del self._lines[key]
            return None
        job, rank = popped
        line.next, line.next_rank = job, rank
        self.parked -= 1
        self.ranks[rank] -= 1
        return job

    def handed_back(self, key: str, job: object, rank: int = 0) -> None:
        """``job`` (in flight, of priority ``rank``) went back to its buffer unsent: it stays its
        key's next."""
        line = self._lines.get(key)
        if line is not None:
            line.next, line.next_rank = job, rank
