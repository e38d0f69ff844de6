"""Keeping what a worker holds for its groups out of the garbage collector's way.

:func:`worker.main.tune_gc` freezes what exists after start-up (``gc.freeze``), so that later
collections do not walk it again. But a worker claims its groups after start-up, and each owned
group is a few dozen long-lived objects (its state, counters, progress windows, buffers): 6670
groups made the worker's collections walk ~400 000 objects that never die (0.5-3.2 s of
collecting in a run of ``emq bench dispatch --workload W7``'s 10 topics of 667 groups). So
once an assignment is applied, :class:`Refreezer` freezes again, when the groups owned have
grown by a quarter since the last freeze: a handful of times over a worker's life, each after
a collection of the young generations (recent garbage is freed, not frozen).

The price: objects alive at a freeze that later become garbage *in a reference cycle*, and old
cyclic garbage not yet collected, are never collected (reference counting frees the rest, which
is nearly everything a job makes). What is alive at a freeze besides the groups is the jobs in
flight, so a freeze keeps little, and the growth rule bounds the freezes (a worker that loses
groups and gets them back does not freeze again). A process that never froze (tests, an
embedding application) is left alone.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger(__name__)

MIN_GROUPS = 100  # fewer groups than this are not worth a full collection
GROWTH = 1.25  # freeze again when the groups owned grew by this factor since the last freeze


class Refreezer:
    """Freeze again after the groups owned grew (see the module docstring)."""

    def __init__(self) -> None:
        self.frozen_at = 0  # groups owned at the last freeze

    def owned(self, groups: int) -> bool:
        """An assignment was applied and ``groups`` are owned now; True if frozen again."""
        if gc.get_freeze_count() == 0 or groups < max(MIN_GROUPS, self.frozen_at * GROWTH):
            return False
        started = time.perf_counter()
        # The young generations only: the recent garbage is freed, not frozen; a full
        # collection here walked 400 000 objects (0.3-0.9 s) to free little more.
        gc.collect(1)
        gc.freeze()
        self.frozen_at = groups
        log.info(
            "froze %d objects for %d groups in %.0f ms",
            gc.get_freeze_count(),
            groups,
            (time.perf_counter() - started) * 1000,
        )
        return True
