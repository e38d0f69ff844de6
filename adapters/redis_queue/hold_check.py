"""The hold check's commands, built once per set of held groups (see ``RedisOwner.check_holds``).

A worker asks several times a second whether it still holds each of its groups: an MGET of every
group's holder and epoch key (per Cluster slot, in chunks). With thousands of groups, spelling
and packing those keys cost more than Redis takes to answer (redis-py packs ~1 us per argument:
13 000 keys, 13 ms, four times a second). The set of held groups rarely changes, so a
:class:`HoldCheck` keeps the commands for one set, packed in the Redis protocol once, and the
reply that means "nothing changed": an unchanged answer is then one list comparison.

A check is built for exactly the ``(group, epoch)`` pairs it was given and is reused only for an
equal sequence: a group gained, lost or claimed at another epoch builds a new one at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from emq.core.model import GroupRef

Holds = tuple[tuple[GroupRef, int], ...]


def packed(command: Sequence[bytes]) -> bytes:
    """``command`` in the Redis protocol (RESP), as a client sends it."""
    parts = [b"*%d\r\n" % len(command)]
    parts += [b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in command]
    return b"".join(parts)


class HoldCheck:
    """The MGETs checking ``holds`` for ``holder``, and what their replies say (see module)."""

    __slots__ = ("chunks", "commands", "expected", "holder", "holds", "packed")

    def __init__(
        self,
        holds: Holds,
        holder: bytes,
        keys: Sequence[tuple[bytes, bytes]],
        chunks: list[list[int]],
        cluster: bool = False,
    ) -> None:
        """``keys[i]``: the holder and epoch keys of ``holds[i]``; ``chunks``: the indexes of
        ``holds`` each MGET covers (one Cluster slot each); ``cluster``: for a Cluster client."""
        self.holds = holds
        self.holder = holder
        self.chunks = chunks
        mgets = [(b"MGET", *(k for i in chunk for k in keys[i])) for chunk in chunks]
        # Only one of them is kept (a worker holds this for thousands of groups): on a standalone
        # server all the MGETs in one string, sent as one write; for a Cluster pipeline, which
        # routes each to its slot's node, the commands (their name as text).
        self.packed = b"" if cluster else b"".join(packed(c) for c in mgets)
        self.commands: list[tuple[str | bytes, ...]] = (
            [("MGET", *c[1:]) for c in mgets] if cluster else []
        )
        # Each MGET's reply while every group is still ours at its epoch, as Redis spells it.
        spelled: dict[int, bytes] = {}  # (most groups share a few epochs: one bytes each)
        self.expected = [
            [v for i in chunk for v in (holder, _spelled(spelled, holds[i][1]))] for chunk in chunks
        ]

    def fits(self, holds: Holds, holder: bytes) -> bool:
        """Whether this check is the one for ``holds`` (compared by value, element by element;
        the same pair objects compare at once)."""
        return holder == self.holder and holds == self.holds

    def lost(self, replies: Sequence[Any]) -> set[GroupRef]:
        """The groups the MGETs' ``replies`` show claimed by another holder or at a newer epoch
        (no holder recorded is not a loss: see ``GroupOwner.check_holds``)."""
        lost: set[GroupRef] = set()
        for chunk, reply, expected in zip(self.chunks, replies, self.expected, strict=True):
            if reply == expected:  # the usual answer: one comparison in C
                continue
            for n, i in enumerate(chunk):
                found, epoch = reply[2 * n], reply[2 * n + 1]
                group, mine = self.holds[i]
                if (found is not None and found != self.holder) or int(epoch or 0) > mine:
                    lost.add(group)
        return lost


def _spelled(known: dict[int, bytes], epoch: int) -> bytes:
    found = known.get(epoch)
    if found is None:
        found = known[epoch] = b"%d" % epoch
    return found


def build(
    holds: Holds,
    holder: bytes,
    keys_of: Callable[[GroupRef], tuple[str, str]],
    per_slot: Callable[[Sequence[int], Callable[[int], int]], list[list[int]]],
    slot: Callable[[str], int],
    cluster: bool,
) -> HoldCheck:
    """A :class:`HoldCheck` for ``holds``: the keys spelled by ``keys_of``, the MGETs split by
    ``per_slot`` (indexes of ``holds``, by the slot of their holder key)."""
    spelled = [keys_of(g) for g, _ in holds]
    chunks = per_slot(range(len(holds)), lambda i: slot(spelled[i][0]))
    keys = [(h.encode(), e.encode()) for h, e in spelled]
    return HoldCheck(holds, holder, keys, chunks, cluster)
