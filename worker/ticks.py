"""One timer for every paced group due in the same tick.

A group held back by its quota is looked at again when its counter can grant
(:meth:`capacity.rate.QpsCounter.wait_s`). Taken as it is, that time is a group's own: a worker
pacing a hundred groups at 100 QPS each would have ten thousand of them a second, scattered,
and its loop would wake for each (a wake-up, a timer and a write to the endpoint each, and the
receiver woken as often). Rounded up to the next point of a grid shared by every group (the
dispatcher's tick), the groups due in the same tick are served in one loop iteration and their
sends leave together: at most one wake-up per tick while pacing, whatever the number of groups.

What it costs: a grant waits up to one tick past the moment it was free. The quota holds as it
did (every grant is still the counter's), and the pace is kept: a grant made late is stamped up
to ``worker.groups.LATE_S`` back (capacity.rate, "Back-dating"), so only what a tick adds past
that is lost from a backlogged group's rate, a fraction of a percent at a 5 ms tick.

Timers fire up to about half a millisecond early (the event loop counts whole milliseconds): a
grid point is chosen at least :data:`EARLY_S` after the time asked for, and the dispatcher takes
the groups due up to :data:`EARLY_S` ahead of its clock, so a timer that fires early still finds
its groups' grants free, and no second wake-up follows it.
"""

from __future__ import annotations

import math

EARLY_S = 0.001  # a timer fires at most this early (whole milliseconds)


def on_grid(at: float, grid_s: float) -> float:
    """The first point of the grid of ``grid_s`` (a multiple of it, on the monotonic clock) at
    or after ``at + EARLY_S``: when a group free at ``at`` is looked at again."""
    if grid_s <= 0:
        return at + EARLY_S
    return math.ceil((at + EARLY_S) / grid_s) * grid_s
