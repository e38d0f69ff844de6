"""Sliding-window progress of one physical queue (EQueue's consumer offsets).

Every entry fetched from a queue enters the window in offset order and stays until it is
*finished*: delivered, durably re-scheduled for a retry, or durably dead-lettered. The committable
offset is the highest one below which everything is finished; the checkpoint never passes an
unfinished entry, so after a crash the entries at and above it (at most the buffer plus what was
in flight) are delivered again: at least once, never lost.
"""

from __future__ import annotations

from collections import deque

from emq.core.interfaces import Offset


class Progress:
    """The window of one queue. An idle queue holds no window at all (``None``): a worker owning
    10 000 queues would otherwise keep 20 000 empty containers, most of its memory."""

    __slots__ = ("_done", "_window", "committed", "last_fetched")

    def __init__(self, committed: Offset) -> None:
        self.committed = committed  # what the store holds (or will, after the next checkpoint)
        self.last_fetched = committed  # where the next fetch continues
        self._window: deque[Offset] | None = None  # made by the first fetch
        self._done: set[Offset] | None = None  # made by the first finish

    def __len__(self) -> int:
        """Entries fetched and not yet finished."""
        window, done = self._window, self._done
        return (len(window) if window else 0) - (len(done) if done else 0)

    def fetched(self, offset: Offset) -> None:
        """``offset`` was read from the queue (offsets arrive in increasing order)."""
        window = self._window
        if window is None:
            window = self._window = deque()
        window.append(offset)
        self.last_fetched = offset

    def finished(self, offset: Offset) -> None:
        done = self._done
        if done is None:
            done = self._done = set()
        done.add(offset)

    def committable(self) -> Offset | None:
        """Advance past every finished entry at the head; the new offset if it moved."""
        window, done = self._window, self._done
        if not window or not done:
            return None
        moved = None
        while window and window[0] in done:
            moved = window.popleft()
            done.discard(moved)
        if moved is not None:
            self.committed = moved
        if not window and not done:
            self._window = self._done = None  # idle again: hold nothing until the next fetch
        return moved

    def finished_to(self) -> Offset:
        """The highest offset at and below which every entry read is finished (committed or
        not yet; nothing is changed)."""
        done = self._done or ()
        last = self.committed
        for entry in self._window or ():
            if entry not in done:
                break
            last = entry
        return last

    def finished_above(self) -> list[Offset]:
        """The entries finished above the committed offset (after :meth:`committable`), oldest
        first: a newer entry ends before an older one that is held back (worker.keys) or slow."""
        return sorted(self._done) if self._done else []

    def rewind(self) -> None:
        """Forget everything unfinished (its buffer was dropped): fetch again from the commit."""
        self._window = self._done = None
        self.last_fetched = self.committed
