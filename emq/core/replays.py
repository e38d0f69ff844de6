"""DLQ replays on their own budget (issue 16, item 4): the model and the store's seam.

A replay is a resource: it puts a topic's dead letters (all of them, the given ids, or those
that failed in a time window) back into their queues at ``rate`` letters per second, paced by one
mover in the whole fleet (:mod:`worker.replay`), so the topic's live jobs keep the rest of its
quota. Its progress lives in the store, next to the letters it moves, so it survives restarts
and a crashed mover's successor resumes where it stopped.

States and transitions (only RUNNING moves; the others are final)::

    RUNNING --every selected letter moved or gone--> DONE
    RUNNING --cancel (API, CLI, console)----------> CANCELLED
    RUNNING --a step fails, not for an outage-----> FAILED (with the reason)

The selection is fixed when the replay is created: letters dead-lettered afterwards (a replayed
job that fails again, for one) are not part of it, so a replay always ends.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from emq.core.model import GroupRef, TopicRef

# The rate of a replay created without one: this fraction of the topic's quota at creation.
# Live jobs then keep at least ~95% of what the topic delivers (docs/concepts/replays.md).
DEFAULT_RATE_FRACTION = 0.05
MIN_RATE = 0.1  # letters per second: slower would look like a stuck replay
REPLAY_ID_PATTERN = r"^rpl_[0-9a-z]{20}$"
_REPLAY_ID_RE = re.compile(REPLAY_ID_PATTERN)
_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


class ReplayState(enum.Enum):
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"


def new_replay_id() -> str:
    """``rpl_`` + 20 random characters (100 bits)."""
    n = int.from_bytes(os.urandom(13), "big")
    return "rpl_" + "".join(_ALPHABET[(n >> (5 * i)) & 31] for i in range(20))


def is_replay_id(text: str) -> bool:
    return bool(_REPLAY_ID_RE.match(text))


def default_rate(qps: float) -> float:
    """The rate of a replay created without one (see :data:`DEFAULT_RATE_FRACTION`)."""
    return max(MIN_RATE, round(qps * DEFAULT_RATE_FRACTION, 3))


@dataclass(frozen=True)
class Selection:
    """Which letters: ``ids`` (``<group>:<entry>``, as the DLQ lists them), or those
    dead-lettered between ``since_ms`` and ``until_ms`` (either open), or all."""

    ids: tuple[str, ...] | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    @property
    def mode(self) -> str:
        if self.ids is not None:
            return "ids"
        return "window" if self.since_ms is not None or self.until_ms is not None else "all"

    def ids_by_group(self) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        for text in dict.fromkeys(self.ids or ()):  # an id given twice is one letter
            group, _, entry = text.partition(":")
            out.setdefault(int(group), []).append(entry)
        return out


@dataclass(frozen=True)
class Replay:
    id: str
    topic: TopicRef
    groups: int  # the topic's groups at creation: the DLQs the replay reads
    rate: float  # letters moved per second, for the whole topic
    selection: Selection = field(default_factory=Selection)
    state: ReplayState = ReplayState.RUNNING
    total: int = 0  # letters selected (counted at creation)
    created_at: float = 0.0
    finished_at: float | None = None
    error: str = ""
    # Where the jobs come from: ``dlq`` (moved out of the DLQs) or ``delivered`` (a
    # redelivery: copied from the delivered logs a topic keeps with ``keep_delivered_s``).
    source: str = "dlq"

    def group_refs(self) -> tuple[GroupRef, ...]:
        return tuple(GroupRef(self.topic, i) for i in range(self.groups))


@dataclass(frozen=True)
class Progress:
    """A replay with its counts: ``replayed`` letters are back in a queue; ``skipped`` ones
    were not (unreadable, or gone from the DLQ: aged out, replayed by other means)."""

    replay: Replay
    replayed: int = 0
    skipped: int = 0

    @property
    def remaining(self) -> int:
        if self.replay.state is not ReplayState.RUNNING:
            return 0 if self.replay.state is ReplayState.DONE else self._left()
        return self._left()

    def _left(self) -> int:
        return max(0, self.replay.total - self.replayed - self.skipped)


@dataclass(frozen=True)
class Slice:
    """What one paced step did in one group."""

    moved: int
    skipped: int
    exhausted: bool  # nothing of the selection is left in this group
    stopped: bool = False  # the replay was cancelled: nothing was moved


class ReplayStore(Protocol):
    """Where replays and their progress live (Redis: :mod:`adapters.redis_replay`)."""

    async def create(self, replay: Replay) -> Replay:
        """Count the selection, store the replay (RUNNING) and return it with its total."""
        ...

    async def get(self, topic: TopicRef, replay_id: str) -> Progress:
        """The replay with its counts; :class:`~emq.core.errors.NotFound` if unknown."""
        ...

    async def latest(self, topic: TopicRef, limit: int) -> list[Progress]:
        """The topic's latest replays, newest first."""
        ...

    async def cancel(self, topic: TopicRef, replay_id: str) -> Progress:
        """Stop a RUNNING replay (a CANCELLED one stays so); what it moved stays moved.
        :class:`~emq.core.errors.ConfigConflict` if it already ended otherwise."""
        ...

    async def active(self) -> list[Replay]:
        """Every RUNNING replay of every topic (what the movers look for)."""
        ...

    async def lease(self, replay_id: str, owner: str, ttl_s: float) -> bool:
        """Take or renew the right to move this replay for ``ttl_s``; False if another has it."""
        ...

    async def release(self, replay_id: str, owner: str) -> None:
        """Give the lease up (if ``owner`` holds it)."""
        ...

    async def move(self, replay: Replay, counts: Sequence[tuple[int, int]]) -> list[Slice]:
        """Move up to ``n`` letters of the selection, oldest first, in each ``(group, n)``.

        Per group one atomic step: each letter is appended to its queue and deleted from the
        DLQ, and the group's cursor and counts advance, together; so a step sent twice, or cut
        by a crash, moves no letter twice and loses none.
        """
        ...

    async def finish(self, replay: Replay, state: ReplayState, error: str = "") -> bool:
        """Move a RUNNING replay to a final state; False if it was no longer RUNNING."""
        ...
