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


class HoldCheck:
    """The MGETs checking ``holds`` for ``holder``, and what their replies say (see module)."""

    __slots__ = ("chunks", "commands", "expected", "holder", "holds", "packed")

    def __init__(
        self,
        holds: Holds,
        holder: bytes,
        keys: Callable[[int], tuple[bytes, bytes]],
        chunks: list[list[int]],
        cluster: bool = False,
    ) -> None:
        """``keys(i)``: the holder and epoch keys of ``holds[i]``; ``chunks``: the indexes of
        ``holds`` each MGET covers (one Cluster slot each); ``cluster``: for a Cluster client."""
        self.holds = holds
        self.holder = holder
        self.chunks = chunks
        # Only one of them is kept (a worker holds this for thousands of groups): on a standalone
        # server all the MGETs in one string, sent as one write; for a Cluster pipeline, which
        # routes each to its slot's node, the commands (their name as text).
        self.commands: list[tuple[str | bytes, ...]] = []
        self.packed = b""
        if cluster:
            self.commands = [("MGET", *(k for i in c for k in keys(i))) for c in chunks]
        else:
            self.packed = _packed_mgets(chunks, keys)
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


def _packed_mgets(chunks: list[list[int]], keys: Callable[[int], tuple[bytes, bytes]]) -> bytes:
    """The MGET of each chunk's keys, packed, written straight into one buffer: built while a
    worker takes on thousands of groups, it leaves no garbage of one object per key behind."""
    out = bytearray()
    for chunk in chunks:
        out += b"*%d\r\n$4\r\nMGET\r\n" % (1 + 2 * len(chunk))
        for i in chunk:
            for key in keys(i):
                out += b"$%d\r\n" % len(key)
                out += key
                out += b"\r\n"
    return bytes(out)


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
    slots = [slot(keys_of(g)[0]) for g, _ in holds]  # (only the slots kept: ints)
    chunks = per_slot(range(len(holds)), slots.__getitem__)

    def keys(i: int) -> tuple[bytes, bytes]:  # spelled again, one group at a time
        h, e = keys_of(holds[i][0])
        return h.encode(), e.encode()

    return HoldCheck(holds, holder, keys, chunks, cluster)
