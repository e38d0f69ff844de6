"""Settings of the schedule firer (env ``EMQ_SCHEDULER_*``, TOML table ``[scheduler]``).

Apart from :mod:`emq.scheduler.firer` so that reading them (``emq config show``) imports
nothing heavy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from emq.core.settings import at_least, between, greater_than, setting, validate


@dataclass(frozen=True)
class SchedulerSettings:
    """Where and how schedules fire (docs/concepts/schedules.md)."""

    ENV_PREFIX: ClassVar[str] = "EMQ_SCHEDULER_"

    # Run a firer inside every `emq api` process (as well as any `emq scheduler`): any number
    # of firers at once is safe, each tick still makes one job.
    in_api: bool = setting(True)
    # How often the due index is read when nothing was due (the lag of an idle firer's tick).
    poll_s: float = setting(0.2, between(0.01, 10))
    # A claimed schedule is left to its firer this long; a firer that died is replaced after it.
    lease_s: float = setting(30.0, greater_than(0))
    # Schedules claimed per round trip.
    batch: int = setting(1000, between(1, 10_000))
    # A tick found more than this after its instant is late: the catch-up policy decides.
    grace_s: float = setting(60.0, at_least(0))
    # Ticks this close are fired ahead: their jobs are stored as delayed jobs due at the tick
    # (workers promote them within ~0.1 s of it), so a minute on which thousands of schedules
    # tick is stored before it comes. A change to a schedule applies to the ticks after this.
    lookahead_s: float = setting(5.0, between(0, 60))

    def __post_init__(self) -> None:
        validate(self)
