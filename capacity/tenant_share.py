"""A tenant's cap divided among its topics: weighted max-min fairness, in integers.

Every worker that owns groups of a capped tenant computes this same division from the same
inputs (the demands every owner published, see :mod:`worker.tenant_quota`), so the fleet agrees
on it without a leader. Pure and deterministic: ties and rounding go by topic name.

A topic's **demand** is what it could use now: its whole quota when it is backlogged (jobs wait
for quota on some owner), else what it delivered lately plus headroom (``HEADROOM`` times the
rate, plus one per group), never above its quota. The cap is then water-filled by weight: each
topic gets ``cap * weight / total weight`` of what is left, those wanting less get their demand
and the rest is shared again among the others. What no demand takes is then spread the same way
over every topic up to its quota (a topic that is not busy gets room to start at once while the
tenant is not saturated). Every topic has at least one QPS per group (a group's counter cannot
pace below 1/s): those floors are set aside first and the rest of the cap is water-filled over
the demands above them, so the shares sum to at most the cap, and only a cap below the tenant's
number of groups is exceeded (every topic then gets its floor).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

HEADROOM = 1.25  # a topic that is not backlogged may grow this much a period without waiting


@dataclass(frozen=True, slots=True)
class TopicDemand:
    """One topic of a capped tenant, as its owners together see it."""

    quota: int  # its own quota (qps)
    weight: int
    groups: int
    backlogged: bool  # jobs wait for quota on some owner
    rate: float = 0.0  # deliveries a second lately, over all its owners

    def wants(self) -> int:
        if self.backlogged:
            return self.quota
        return min(self.quota, math.ceil(self.rate * HEADROOM) + self.groups)


def divide(cap: int, topics: Mapping[str, TopicDemand]) -> dict[str, int]:
    """Each topic's share (QPS) of ``cap``: see the module docstring."""
    share = {name: t.groups for name, t in topics.items()}  # the floors, taken first
    above = cap - sum(share.values())
    if above <= 0:
        return share
    wants = {name: (t.weight, max(0, t.wants() - t.groups)) for name, t in topics.items()}
    for name, more in _fill(above, wants).items():
        share[name] += more
    left = cap - sum(share.values())
    if left > 0:
        spare = {name: (t.weight, t.quota - share[name]) for name, t in topics.items()}
        for name, more in _fill(left, spare).items():
            share[name] += more
    return share


def _fill(cap: int, wants: Mapping[str, tuple[int, int]]) -> dict[str, int]:
    """Water-fill ``cap`` over ``{name: (weight, demand)}``: integers, summing to at most
    ``cap``, none above its demand; leftover units from rounding go one each by name."""
    share = dict.fromkeys(wants, 0)
    open_ = {n for n, (_w, d) in wants.items() if d > 0}
    left = cap
    while open_ and left > 0:
        total = sum(wants[n][0] for n in open_)
        met = {n for n in open_ if wants[n][1] <= left * wants[n][0] / total}
        if not met:
            break
        for n in met:
            share[n] = wants[n][1]
            left -= wants[n][1]
        open_ -= met
    if open_ and left > 0:
        total = sum(wants[n][0] for n in open_)
        for n in open_:
            share[n] = left * wants[n][0] // total
        rest = left - sum(share[n] for n in open_)
        for n in sorted(open_)[:rest]:
            share[n] += 1
    return share


def split(share: int, groups: int) -> tuple[int, ...]:
    """A topic's share over its groups, as the split rule splits a quota (at least 1 each)."""
    base, more = divmod(max(share, groups), groups)
    return tuple(base + 1 if i < more else base for i in range(groups))
