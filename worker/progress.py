"""Sliding-window progress of one physical queue (EQueue's consumer offsets).

Every entry fetched from a queue enters the window in offset order and stays until it is
*finished*: delivered, durably re-scheduled for a retry, or durably dead-lettered. The committable
offset is the highest one below which everything is finished; the checkpoint never passes an
unfinished entry, so after a crash the entries at and above it (at most the buffer plus what was
in flight) are delivered again: at least once, never lost.
"""

from __future__ import annotations

from collections import deque

from emq.interfaces import Offset


class Progress:
    __slots__ = ("_done", "_window", "committed", "last_fetched")

    def __init__(self, committed: Offset) -> None:
        self.committed = committed  # what the store holds (or will, after the next checkpoint)
        self.last_fetched = committed  # where the next fetch continues
        self._window: deque[Offset] = deque()
        self._done: set[Offset] = set()

    def __len__(self) -> int:
        """Entries fetched and not yet finished."""
        return len(self._window) - len(self._done)

    def fetched(self, offset: Offset) -> None:
        """``offset`` was read from the queue (offsets arrive in increasing order)."""
        self._window.append(offset)
        self.last_fetched = offset

    def finished(self, offset: Offset) -> None:
        self._done.add(offset)

    def committable(self) -> Offset | None:
        """Advance past every finished entry at the head; the new offset if it moved."""
        moved = None
        window, done = self._window, self._done
        while window and window[0] in done:
            moved = window.popleft()
            done.discard(moved)
        if moved is not None:
            self.committed = moved
        return moved

    def rewind(self) -> None:
        """Forget everything unfinished (its buffer was dropped): fetch again from the commit."""
        self._window.clear()
        self._done.clear()
        self.last_fetched = self.committed
