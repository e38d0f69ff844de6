"""How a group's budget for one dispatch is shared among its high, medium and low queues.

``strict``: high first, then medium, then low. ``weighted``: smooth weighted round-robin
(nginx's algorithm) over the queues that have jobs, 6:3:1 by default, so over time each busy
queue gets its weight's share even when a tick's budget is only one or two requests; plus an
aging bound: a queue whose oldest job has waited longer than ``aging_s`` is served first, so low
priority jobs are delayed but never starved.
"""

from __future__ import annotations

from collections.abc import Sequence

STRICT_ORDER = (0, 1, 2)


def plan_strict(budget: int, available: Sequence[int]) -> list[int]:
    """Per queue (high, medium, low) how many to take: greedily in priority order."""
    takes = []
    for n in available:
        take = min(budget, n)
        takes.append(take)
        budget -= take
    return takes


class WeightedPlanner:
    """Stateful across dispatches (it remembers each queue's credit)."""

    __slots__ = ("_credit", "aging_s", "weights")

    def __init__(self, weights: Sequence[int] = (6, 3, 1), aging_s: float = 10.0) -> None:
        if len(weights) != 3 or any(w < 1 for w in weights):
            raise ValueError("weights must be three positive integers")
        self.weights = tuple(weights)
        self.aging_s = aging_s
        self._credit = [0, 0, 0]

    def plan(
        self, budget: int, available: Sequence[int], oldest_wait_s: Sequence[float] = (0, 0, 0)
    ) -> list[int]:
        takes = [0, 0, 0]
        left = list(available)
        # Aged queues first, oldest first: one job each per dispatch bounds their wait.
        aged = sorted((-w, i) for i, w in enumerate(oldest_wait_s) if w > self.aging_s and left[i])
        for _, i in aged:
            if budget == 0:
                break
            takes[i] += 1
            left[i] -= 1
            budget -= 1
        for _ in range(budget):
            i = self._pick(left)
            if i < 0:
                break
            takes[i] += 1
            left[i] -= 1
        return takes

    def _pick(self, left: Sequence[int]) -> int:
        busy = [i for i in STRICT_ORDER if left[i] > 0]
        if not busy:
            return -1
        total = 0
        for i in busy:
            self._credit[i] += self.weights[i]
            total += self.weights[i]
        best = max(busy, key=lambda i: self._credit[i])
        self._credit[best] -= total
        return best
