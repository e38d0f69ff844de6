"""One checkpoint write and one trim, as the contract tests like to ask for them.

The :class:`~emq.core.interfaces.GroupOwner` role only offers batches (a worker commits and
trims every queue it owns at once); these helpers make a batch of one and turn its answer into
the single call's: ``Fenced`` for a fenced item, and for a trim the number of entries dropped.
"""

from __future__ import annotations

from emq.core.errors import Fenced
from emq.core.interfaces import ZERO_OFFSET, GroupOwner, Offset
from emq.core.model import QueueRef

_ALL = 1_000_000  # more entries than any test puts in one queue


async def write_checkpoint(
    backend: GroupOwner, queue: QueueRef, offset: Offset, epoch: int
) -> None:
    """Commit ``offset``; ``Fenced`` if a newer epoch owns the group."""
    if await backend.write_checkpoints([(queue, offset, epoch)]):
        raise Fenced(f"checkpoint of {queue} at epoch {epoch}: a newer owner claimed it")


async def trim(backend: GroupOwner, queue: QueueRef, epoch: int, retain: int) -> int:
    """Trim ``queue`` keeping ``retain`` committed entries; how many entries were dropped."""
    before = await _count(backend, queue)
    if await backend.trim_many([(queue, epoch, retain)]):
        raise Fenced(f"trim of {queue} at epoch {epoch}: a newer owner claimed it")
    return before - await _count(backend, queue)


async def _count(backend: GroupOwner, queue: QueueRef) -> int:
    return len((await backend.read({queue: ZERO_OFFSET}, _ALL)).get(queue, []))
