"""The assignment document at ``/<root>/<ns>/assignments``, and how a leader derives the next one.

Stored as zlib-compressed JSON (20 000 groups take about 250 KB; ZooKeeper's default node limit
is 1 MB)::

    {"v": 1, "generation": G, "leader": "<worker>", "written_at": <epoch s>,
     "groups": {"<ns>/<tenant>/<topic>/g<i>": ["<owner>", <epoch>, [["<worker>", <epoch>], ...]]}}

**Generation** only grows: ``max(previous + 1, wall-clock ms)``. Being at least the wall clock,
it also stays above any epoch claimed before (by an earlier fleet whose document was lost, or by
``emq worker --standalone``, whose epoch is its start time in ms).

**Epochs.** When a group gets a new owner its epoch becomes the new generation, so a group's epoch
only grows (across leaders too: each leader starts from the last written document) and is never
reused. The new owner claims it in Redis before reading checkpoints, which fences every write of
the former owners.

**Handover.** A moved group records the former owners that may still touch it (``waits_for``):
the previous owner, plus whoever the previous owner was itself still waiting for (a handover can
be overtaken by the next one). The new owner starts only once each of them has *settled*: left a
release marker for that epoch, or had its running node gone for the grace period. A leader drops
settled ones when it writes, so the lists stay short.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

FORMAT = 1
Settled = Callable[[str, str, int], bool]  # (group, worker, epoch) -> that owner is done


@dataclass(frozen=True, slots=True)
class Entry:
    """One group's owner, its epoch, and the former owners it must wait for."""

    owner: str
    epoch: int
    waits_for: tuple[tuple[str, int], ...] = ()

    def to_json(self) -> list[Any]:
        out: list[Any] = [self.owner, self.epoch]
        if self.waits_for:
            out.append([[w, e] for w, e in self.waits_for])
        return out

    @classmethod
    def from_json(cls, raw: Any) -> Entry:
        waits = tuple((str(w), int(e)) for w, e in raw[2]) if len(raw) > 2 else ()
        return cls(str(raw[0]), int(raw[1]), waits)


@dataclass(frozen=True, slots=True)
class Document:
    """A whole assignment: every group's :class:`Entry` under one generation."""

    generation: int = 0
    leader: str = ""
    written_at: float = 0.0
    groups: Mapping[str, Entry] = field(default_factory=dict)

    def encode(self) -> bytes:
        body = {
            "v": FORMAT,
            "generation": self.generation,
            "leader": self.leader,
            "written_at": round(self.written_at, 3),
            "groups": {g: e.to_json() for g, e in sorted(self.groups.items())},
        }
        return zlib.compress(json.dumps(body, separators=(",", ":")).encode(), 6)

    @classmethod
    def decode(cls, raw: bytes | None) -> Document:
        """The document in ``raw``; an empty node is the empty document. Raises ValueError."""
        if not raw:
            return cls()
        try:
            body = json.loads(zlib.decompress(raw))
            groups = {str(g): Entry.from_json(e) for g, e in body["groups"].items()}
            return cls(
                int(body["generation"]), str(body["leader"]), float(body["written_at"]), groups
            )
        except (zlib.error, KeyError, TypeError, IndexError) as e:
            raise ValueError(f"unreadable assignment document: {e}") from e

    def owners(self) -> dict[str, str]:
        return {g: e.owner for g, e in self.groups.items()}

    def of(self, worker: str) -> dict[str, Entry]:
        """The entries naming ``worker`` as owner."""
        return {g: e for g, e in self.groups.items() if e.owner == worker}

    def referenced(self) -> set[tuple[str, int]]:
        """Every (group, epoch) a release marker may still matter for."""
        out = set()
        for g, e in self.groups.items():
            out.add((g, e.epoch))
            out.update((g, epoch) for _, epoch in e.waits_for)
        return out


def next_generation(previous: int, now_ms: int) -> int:
    return max(previous + 1, now_ms)


def advance(
    previous: Document,
    target: Mapping[str, str],
    *,
    generation: int,
    leader: str,
    now: float,
    settled: Settled,
) -> Document:
    """The document that gives each group its ``target`` owner (see the module docstring)."""
    groups: dict[str, Entry] = {}
    for g, owner in target.items():
        old = previous.groups.get(g)
        if old is None:
            groups[g] = Entry(owner, generation)  # a new group: nobody touched it before
            continue
        waits = [(w, e) for w, e in old.waits_for if not settled(g, w, e)]
        if old.owner == owner:
            groups[g] = Entry(owner, old.epoch, tuple(waits))
        else:
            if not settled(g, old.owner, old.epoch):
                waits.append((old.owner, old.epoch))
            groups[g] = Entry(owner, generation, tuple(waits))
    return Document(generation, leader, now, groups)


def same_groups(a: Document, b: Document) -> bool:
    """True if writing ``b`` over ``a`` would change nobody's ownership or waits."""
    return a.groups == b.groups
