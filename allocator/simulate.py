"""``emq fleet simulate``: the assignment's figures at fleet scale, without ZooKeeper.

For ``groups`` groups (synthetic topics of 1 to 20 groups, seeded) over ``workers`` equal
members it measures:

* ``compute_s``: one assignment from scratch, ring included (median of three; the leader's
  recomputations when only groups change reuse the ring: ``compute_warm_s``);
* ``max_over_mean``: the busiest member's groups over the mean (and plain consistent hashing's
  figure on the same ring, for reference);
* the fraction of groups that change owner when one member joins, and when one leaves, each
  averaged over ``trials`` different members, also as a multiple of the ideal ``1/workers``
  (``*_x_ideal``: 1.0 is the least any assignment can move).
"""

from __future__ import annotations

import random
import statistics
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from allocator import assign as assign_module
from allocator.assign import DEFAULT_BALANCE, DEFAULT_KEEP_BALANCE, DEFAULT_VNODES, assign

UNBOUNDED = 1e9  # a balance no load reaches: plain consistent hashing


def group_names(n: int, seed: int = 1) -> list[str]:
    """``n`` group names of synthetic topics (most have one group, a few have many)."""
    rnd = random.Random(seed)
    sizes = [1, 1, 1, 1, 1, 1, 2, 3, 5, 7, 10, 20]
    names: list[str] = []
    topic = 0
    while len(names) < n:
        count = min(n - len(names), rnd.choice(sizes))
        tenant = f"tenant-{rnd.randrange(max(1, n // 40)):05d}"
        names += [f"online/{tenant}/topic-{topic:06d}/g{i}" for i in range(count)]
        topic += 1
    return names


def loads(assignment: Mapping[str, str], members: Sequence[str]) -> list[int]:
    counts = Counter(assignment.values())
    return [counts.get(m, 0) for m in members]


def moved(before: Mapping[str, str], after: Mapping[str, str]) -> float:
    """The fraction of ``before``'s groups whose owner differs in ``after``."""
    return sum(1 for g, w in before.items() if after.get(g) != w) / max(1, len(before))


def _timed(groups: Sequence[str], members: Mapping[str, int], **kw: Any) -> float:
    assign_module._ring.cache_clear()  # from scratch: the ring is built too
    started = time.perf_counter()
    assign(groups, members, **kw)
    return time.perf_counter() - started


def simulate(
    groups: int,
    workers: int,
    *,
    trials: int = 5,
    vnodes: int = DEFAULT_VNODES,
    balance: float = DEFAULT_BALANCE,
    keep_balance: float = DEFAULT_KEEP_BALANCE,
    seed: int = 1,
) -> dict[str, Any]:
    if groups < 1 or workers < 2 or trials < 1:
        raise ValueError("need at least 1 group, 2 workers and 1 trial")
    names = group_names(groups, seed)
    members = {f"worker-{i:05d}": 1 for i in range(workers)}
    kw: dict[str, Any] = {"vnodes": vnodes, "balance": balance, "keep_balance": keep_balance}
    compute = statistics.median(_timed(names, members, **kw) for _ in range(3))
    started = time.perf_counter()
    base = assign(names, members, **kw)
    warm = time.perf_counter() - started
    mean = groups / workers
    base_loads = loads(base, list(members))
    plain = assign(names, members, vnodes=vnodes, balance=UNBOUNDED, keep_balance=UNBOUNDED)
    rnd = random.Random(seed)
    join_moves, join_ratio, leave_moves, leave_ratio = [], [], [], []
    for t in range(trials):
        joined = members | {f"joiner-{t:03d}": 1}
        after = assign(names, joined, previous=base, **kw)
        join_moves.append(moved(base, after))
        join_ratio.append(max(loads(after, list(joined))) / (groups / (workers + 1)))
        leaver = rnd.choice(sorted(members))
        left = {m: w for m, w in members.items() if m != leaver}
        after = assign(names, left, previous=base, **kw)
        leave_moves.append(moved(base, after))
        leave_ratio.append(max(loads(after, list(left))) / (groups / (workers - 1)))
    ideal = 1.0 / workers
    return {
        "groups": groups,
        "workers": workers,
        "vnodes": vnodes,
        "balance": balance,
        "keep_balance": keep_balance,
        "trials": trials,
        "compute_s": round(compute, 4),
        "compute_warm_s": round(warm, 4),
        "mean_load": round(mean, 3),
        "max_load": max(base_loads),
        "min_load": min(base_loads),
        "max_over_mean": round(max(base_loads) / mean, 4),
        "plain_max_over_mean": round(max(loads(plain, list(members))) / mean, 4),
        "join_moved_fraction": round(statistics.fmean(join_moves), 6),
        "leave_moved_fraction": round(statistics.fmean(leave_moves), 6),
        "ideal_moved_fraction": round(ideal, 6),
        "join_moved_x_ideal": round(statistics.fmean(join_moves) / ideal, 4),
        "leave_moved_x_ideal": round(statistics.fmean(leave_moves) / ideal, 4),
        "after_join_max_over_mean": round(max(join_ratio), 4),
        "after_leave_max_over_mean": round(max(leave_ratio), 4),
    }
