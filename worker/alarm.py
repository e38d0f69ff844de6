"""An alarm a task sleeps on that others may bring forward, never push back.

The due-job promoter (:meth:`worker.fetch.Fetcher.promote`) sleeps until the earliest job it
knows of falls due, and a hint of a job due sooner (:meth:`GroupOwner.watch_due`) must cut that
sleep short, including a hint that comes while the promoter is awake and looking: the alarm is
then set before the look starts (:meth:`Alarm.set`), and the look only brings it forward
(:meth:`Alarm.sooner`), so the hint is kept.
"""

from __future__ import annotations

import asyncio
import math


class Alarm:
    """A time on the event loop's clock (``loop.time()``) to sleep until; one sleeper."""

    __slots__ = ("_at", "_sleeper", "_timer")

    def __init__(self) -> None:
        self._at = math.inf
        self._sleeper: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def set(self, at: float) -> None:
        """Ring at ``at``, whatever it was set to before."""
        self._at = at
        self._arm()

    def sooner(self, at: float) -> None:
        """Ring at ``at`` if that is sooner than it is set to."""
        if at < self._at:
            self._at = at
            self._arm()

    async def wait(self) -> None:
        """Sleep until the alarm's time (at once if it is past); it is then unset (never rings)
        until :meth:`set` or :meth:`sooner`."""
        loop = asyncio.get_running_loop()
        if self._at > loop.time():
            self._sleeper = loop.create_future()
            self._arm()
            try:
                await self._sleeper
            finally:
                self._sleeper = None
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
        self._at = math.inf

    def _arm(self) -> None:
        sleeper = self._sleeper
        if sleeper is None or sleeper.done():
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        if self._at != math.inf:
            self._timer = asyncio.get_running_loop().call_at(self._at, set_done, sleeper)


def set_done(future: asyncio.Future[None]) -> None:
    """End a sleep on ``future`` unless something ended it first (a timer's callback)."""
    if not future.done():
        future.set_result(None)
