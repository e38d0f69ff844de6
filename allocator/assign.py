"""Which worker owns which group: consistent hashing with bounded loads, sticky to the past.

A pure function. The ring is uhashring's (md5 points, ``vnodes * weight`` points per member);
a group's *preference list* is the members met walking the ring clockwise from the group's hash.

Plain consistent hashing leaves the busiest worker 1.2-1.5 times the mean at 20 groups per worker,
so loads are bounded ("consistent hashing with bounded loads", Mirrokni, Thorup and
Zadimoghaddam 2017): a member takes at most its *place cap* ``⌊balance · share⌋`` groups (never
below ``⌈share⌉``, so everything fits; ``share = groups · weight / total weight``) and a group goes
to the first member of its preference list that is below its cap.

Bounded loads alone is order-dependent: a join or a leave shifts which members are full and the
shift cascades, moving many times the ``1/M`` of groups a change needs. So the leader passes the
previous assignment and the computation is sticky, in three passes over the groups (taken in hash
order, so the result does not depend on the order of the input):

1. **keep** a group on its previous owner if that member is still present and below its *keep
   cap* ``⌊keep_balance · share⌋``. The keep cap sits above the place cap, so a join, which
   lowers every share a little, does not force existing members to shed groups.
2. **pull**: a member *starved* after pass 1 (below ``⌊share⌋``: a new member, or one whose
   groups were deleted) takes the groups for which it comes before their owner in the
   preference list, up to its place cap. Only starved members pull, so nothing cascades.
3. **place** every group left (new groups, those of departed members, those over a keep cap):
   first member of its preference list below its place cap. Full members are skipped in near
   constant time (a union-find over ring positions), so even a ring filled to the brim is cheap.

Consequences: every group has exactly one owner; no member holds more than its keep cap
(``max/mean ≤ keep_balance`` once shares are a few groups or more); a leave moves exactly the
departed member's groups (plus those over the caps, none in a steady fleet); a join moves at most
the new member's place cap, about ``balance/M`` of the groups. With no previous assignment it is
plain bounded-load consistent hashing.
"""

from __future__ import annotations

import functools
import math
from bisect import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from uhashring import HashRing  # type: ignore[import-untyped]

DEFAULT_VNODES = 160
DEFAULT_BALANCE = 1.05  # place cap, relative to a member's share
DEFAULT_KEEP_BALANCE = 1.10  # keep cap: the most a member holds, relative to its share
_EPS = 1e-9  # 1.1 * 20 is 22.000000000000004; floor must still say 22


@dataclass(frozen=True, slots=True)
class _Ring:
    """The continuum as flat lists: point hashes (sorted) and the member index of each point."""

    keys: list[int]
    owner_at: list[int]
    hash_of: HashRing

    @classmethod
    def build(cls, names: Sequence[str], weights: Sequence[int], vnodes: int) -> _Ring:
        nodes = {n: {"weight": w, "vnodes": vnodes} for n, w in zip(names, weights, strict=True)}
        ring = HashRing(nodes=nodes)
        index = {n: i for i, n in enumerate(names)}
        continuum = ring.ring  # point -> member: uhashring's public view of its continuum
        # Sorted here rather than read from the ring's private sorted list: get_points() would
        # build 160 k tuples, and a sort of the points adds ~10% to the ring's build (cached).
        keys = sorted(continuum)
        return cls(keys, [index[continuum[k]] for k in keys], ring)

    def position(self, group: str) -> int:
        """The first ring position at or after the group's hash (uhashring's own rule)."""
        p = bisect(self.keys, self.hash_of.hashi(group))
        return 0 if p == len(self.keys) else p


class _Free:
    """Next ring position whose member is below its cap: union-find with path halving."""

    def __init__(self, size: int) -> None:
        self._next = list(range(size))

    def find(self, pos: int) -> int:
        nxt = self._next
        while nxt[pos] != pos:
            nxt[pos] = nxt[nxt[pos]]
            pos = nxt[pos]
        return pos

    def close(self, positions: Sequence[int]) -> None:
        size = len(self._next)
        for pos in positions:
            self._next[pos] = (pos + 1) % size


def caps(
    n_groups: int, weights: Sequence[int], balance: float, keep_balance: float
) -> tuple[list[int], list[int]]:
    """Per member: (place cap, keep cap). Place caps always add up to at least ``n_groups``."""
    total = sum(weights)
    place, keep = [], []
    for w in weights:
        share = n_groups * w / total
        p = max(math.ceil(share - _EPS), math.floor(balance * share + _EPS))
        place.append(p)
        keep.append(max(p, math.floor(keep_balance * share + _EPS)))
    return place, keep


def assign(
    groups: Sequence[str],
    members: Mapping[str, int],
    *,
    vnodes: int = DEFAULT_VNODES,
    previous: Mapping[str, str] | None = None,
    balance: float = DEFAULT_BALANCE,
    keep_balance: float = DEFAULT_KEEP_BALANCE,
) -> dict[str, str]:
    """Map every group to one member (``members``: name → capacity weight, a positive int).

    ``previous`` (group → member) makes the result sticky: see the module docstring. Pure and
    deterministic: the same arguments give the same answer on every machine.
    """
    if not members or not groups:
        return {}
    if vnodes < 1 or balance < 1.0 or keep_balance < balance:
        raise ValueError("need vnodes >= 1 and 1 <= balance <= keep_balance")
    names = sorted(members)
    weights = [members[n] for n in names]
    if any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in weights):
        raise ValueError("member weights must be positive integers")
    ring = _ring(tuple(names), tuple(weights), vnodes)
    unique = set(groups)
    pos = {g: ring.position(g) for g in unique}
    order = sorted(unique, key=lambda g: (pos[g], g))
    place_cap, keep_cap = caps(len(order), weights, balance, keep_balance)
    state = _State(ring, place_cap, [0] * len(names))
    owner = state.keep(order, previous or {}, {n: i for i, n in enumerate(names)}, keep_cap)
    total = sum(weights)
    floor_share = [math.floor(len(order) * w / total + _EPS) for w in weights]
    starved = [load < share for load, share in zip(state.load, floor_share, strict=True)]
    if any(starved):
        state.pull(order, pos, owner, starved)
    state.place(order, pos, owner)
    return {g: names[owner[g]] for g in order}


@functools.lru_cache(maxsize=4)
def _ring(names: tuple[str, ...], weights: tuple[int, ...], vnodes: int) -> _Ring:
    """Rings are immutable once built and cost most of the time: the leader's recomputations
    for a change of groups (not of members) reuse the last one."""
    return _Ring.build(names, weights, vnodes)


class _State:
    """Loads while the three passes run."""

    def __init__(self, ring: _Ring, place_cap: list[int], load: list[int]) -> None:
        self.ring = ring
        self.place_cap = place_cap
        self.load = load

    def keep(
        self,
        order: Sequence[str],
        previous: Mapping[str, str],
        index: Mapping[str, int],
        keep_cap: Sequence[int],
    ) -> dict[str, int]:
        owner: dict[str, int] = {}
        for g in order:
            i = index.get(previous.get(g, ""), -1)
            if i >= 0 and self.load[i] < keep_cap[i]:
                owner[g] = i
                self.load[i] += 1
        return owner

    def pull(
        self,
        order: Sequence[str],
        pos: Mapping[str, int],
        owner: dict[str, int],
        starved: Sequence[bool],
    ) -> None:
        keys, owner_at, size = self.ring.keys, self.ring.owner_at, len(self.ring.keys)
        for g in order:
            current = owner.get(g)
            if current is None:
                continue
            p = pos[g]
            for _ in range(size):
                m = owner_at[p]
                if m == current:
                    break
                if starved[m] and self.load[m] < self.place_cap[m]:
                    owner[g] = m
                    self.load[m] += 1
                    self.load[current] -= 1
                    break
                p = p + 1 if p + 1 < len(keys) else 0

    def place(self, order: Sequence[str], pos: Mapping[str, int], owner: dict[str, int]) -> None:
        owner_at = self.ring.owner_at
        points: dict[int, list[int]] = {}
        for p, m in enumerate(owner_at):
            points.setdefault(m, []).append(p)
        free = _Free(len(owner_at))
        for m, pts in points.items():
            if self.load[m] >= self.place_cap[m]:
                free.close(pts)
        for g in order:
            if g in owner:
                continue
            m = owner_at[free.find(pos[g])]
            owner[g] = m
            self.load[m] += 1
            if self.load[m] >= self.place_cap[m]:
                free.close(points[m])
