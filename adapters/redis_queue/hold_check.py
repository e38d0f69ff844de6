"""The hold check's commands, built once per set of held groups (see ``RedisOwner.check_holds``).

A worker asks several times a second whether it still holds each of its groups: an MGET of every
group's holder and epoch key (per Cluster slot, in chunks). With thousands of groups, spelling
and packing those keys cost more than Redis takes to answer (redis-py packs ~1 us per argument:
13 000 keys, 13 ms, four times a second). The set of held groups rarely changes, so a
:class:`HoldCheck` keeps the commands for one set, packed in the Redis protocol once, and the
reply that means "nothing changed": an unchanged answer is then one list comparison.

A check is built for exactly the ``(group, epoch)`` pairs it was given and is reused only for an
equal sequence: a group gained, lost or claimed at another epoch builds a new one at once.

On a standalone server the check also reads the holder's *taken stamp* (``RedisKeys.taken``),
which every claim taking a group from the holder moves, in the claim's own script (see
``owner.CLAIM``): first in the same write as the MGETs, so the stamp is read before them. A
check may then be a *probe*, the stamp alone (one short GET instead of ~300 KB each way):

* the full check's stamp was read before its MGETs, in the server's order: a claim that took a
  group before that read is in the MGETs' answer; one made after it moved the stamp;
* a stamp never takes a value again (it only grows, see ``owner.CLAIM``);
* so a probe that reads the stamp the last clean full check read (one that found nothing lost)
  proves that no claim took any group from the holder since that check, which found none
  taken: the full check's answer, "nothing lost", holds at the probe. Any other stamp (or no
  clean full check yet, for this set of groups) sends the full check at once.

What the probe cannot see is a change no claim made (a write lost in a failover, a hand edit):
the caller asks for a full check now and then (``full=True``, see ``worker.holds``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from emq.core.model import GroupRef

Holds = tuple[tuple[GroupRef, int], ...]


class HoldCheck:
    """The MGETs checking ``holds`` for ``holder``, and what their replies say (see module)."""

    __slots__ = (
        "chunks",
        "commands",
        "expected",
        "holder",
        "holds",
        "packed",
        "probe",
        "stamp",
        "trusted",
    )

    def __init__(
        self,
        holds: Holds,
        holder: bytes,
        keys: Callable[[int], tuple[bytes, bytes]],
        chunks: list[list[int]],
        cluster: bool = False,
        taken: bytes | None = None,
    ) -> None:
        """``keys(i)``: the holder and epoch keys of ``holds[i]``; ``chunks``: the indexes of
        ``holds`` each MGET covers (one Cluster slot each); ``cluster``: for a Cluster client;
        ``taken``: the holder's taken stamp key (standalone only), read first (see module)."""
        self.holds = holds
        self.holder = holder
        self.chunks = chunks
        # Only one of them is kept (a worker holds this for thousands of groups): on a standalone
        # server all the MGETs in one string, sent as one write; for a Cluster pipeline, which
        # routes each to its slot's node, the commands (their name as text).
        self.commands: list[tuple[str | bytes, ...]] = []
        self.packed = self.probe = b""
        if cluster:
            self.commands = [("MGET", *(k for i in c for k in keys(i))) for c in chunks]
        else:
            if taken is not None:
                self.probe = b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(taken), taken)
            self.packed = self.probe + _packed_mgets(chunks, keys)
        # The stamp the last full check read, if it found nothing lost (see the module).
        self.stamp: bytes | None = None
        self.trusted = False
        # Each MGET's reply while every group is still ours at its epoch, as Redis spells it.
        spelled: dict[int, bytes] = {}  # (most groups share a few epochs: one bytes each)
        self.expected = [
            [v for i in chunk for v in (holder, _spelled(spelled, holds[i][1]))] for chunk in chunks
        ]

    def fits(self, holds: Holds, holder: bytes) -> bool:
        """Whether this check is the one for ``holds`` (compared by value, element by element;
        the same pair objects compare at once)."""
        return holder == self.holder and holds == self.holds

    def unchanged(self, stamp: bytes | None) -> bool:
        """Whether a probe's ``stamp`` proves nothing was taken since a clean full check."""
        return self.trusted and stamp == self.stamp

    def settle(self, stamp: bytes | None, lost: set[GroupRef]) -> None:
        """A full check read ``stamp`` and then found ``lost``: a probe may rely on it only if
        nothing was lost (a group lost stays lost: the next checks are full until it is gone)."""
        self.stamp, self.trusted = stamp, not lost

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
    taken: bytes | None = None,
) -> HoldCheck:
    """A :class:`HoldCheck` for ``holds``: the keys spelled by ``keys_of``, the MGETs split by
    ``per_slot`` (indexes of ``holds``, by the slot of their holder key); ``taken``: the
    holder's taken stamp key, on a standalone server."""
    slots = [slot(keys_of(g)[0]) for g, _ in holds]  # (only the slots kept: ints)
    chunks = per_slot(range(len(holds)), slots.__getitem__)

    def keys(i: int) -> tuple[bytes, bytes]:  # spelled again, one group at a time
        h, e = keys_of(holds[i][0])
        return h.encode(), e.encode()

    return HoldCheck(holds, holder, keys, chunks, cluster, taken)
