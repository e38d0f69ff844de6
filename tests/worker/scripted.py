"""An assignment a test sets itself, for tests that run a real :class:`~worker.runtime.Worker`
on the in-memory stores and move its groups by hand."""

from __future__ import annotations

from adapters.memory_config import MemoryConfigStore
from emq.core.model import GroupRef, Namespace
from worker.standalone import StandaloneAssignment


class Scripted(StandaloneAssignment):
    """An assignment the test sets (``assign``), not the config store; what the worker
    released, in order."""

    def __init__(self, config: MemoryConfigStore) -> None:
        super().__init__(config, Namespace.ONLINE)
        self.released: list[tuple[GroupRef, int]] = []

    async def run(self) -> None:
        return None  # (the standalone source would follow the topics)

    async def release(self, group: GroupRef, epoch: int) -> None:
        self.released.append((group, epoch))
