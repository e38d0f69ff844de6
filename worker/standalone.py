"""``emq worker --standalone``: own every group of every topic, without a fleet.

The epoch is the start time in milliseconds: a standalone worker started later fences one
started earlier (claims only grow), so an accidental second standalone worker takes over rather
than both dispatching the same groups. Topic configuration still comes from the config store, so
groups appear and disappear as topics are created or re-split.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping

from emq.core.interfaces import AssignmentSource, ConfigStore, OwnedGroups
from emq.core.model import GroupRef, Namespace


class StandaloneAssignment(AssignmentSource):
    def __init__(self, config: ConfigStore, namespace: Namespace) -> None:
        self._config = config
        self._namespace = namespace
        self._epoch = int(time.time() * 1000)
        self._current = OwnedGroups(0)
        self._changed = asyncio.Condition()

    def current(self) -> OwnedGroups:
        return self._current

    async def run(self) -> None:
        """Follow the topic configuration; every change of the group set is a new generation."""
        async for topics in self._config.watch_topics(self._namespace):
            groups = {g: self._epoch for t in topics.values() for g in t.group_refs()}
            if groups != dict(self._current.groups):
                await self.assign(groups)

    async def assign(self, groups: Mapping[GroupRef, int]) -> None:
        """Own exactly ``groups`` (at their epochs) from now on: the next generation."""
        async with self._changed:
            self._current = OwnedGroups(self._current.generation + 1, dict(groups))
            self._changed.notify_all()

    async def updates(self) -> AsyncIterator[OwnedGroups]:
        seen = -1
        while True:
            async with self._changed:
                while self._current.generation == seen:
                    await self._changed.wait()
                snapshot = self._current
            seen = snapshot.generation
            yield snapshot

    async def release(self, group: GroupRef, epoch: int) -> None:
        return None  # nobody waits for a standalone worker's handover

    async def aclose(self) -> None:
        return None
