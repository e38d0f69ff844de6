"""The assignment seam: which groups this worker owns, with their epochs (``allocator``: the
ZooKeeper fleet; ``worker``: the standalone "own everything" source)."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

from emq.core.interfaces.resource import AsyncResource
from emq.core.model import GroupRef


@dataclass(frozen=True, slots=True)
class OwnedGroups:
    """What a worker owns: each group with its owner epoch, under an assignment generation.

    The generation only grows; a worker ignores a snapshot older than the one it acts on.
    """

    generation: int
    groups: Mapping[GroupRef, int] = field(default_factory=dict)


class AssignmentSource(AsyncResource):
    """Tells one worker which groups it owns. The fleet implementation lives in ``allocator``."""

    @abc.abstractmethod
    def current(self) -> OwnedGroups:
        """The latest snapshot (possibly empty before the first assignment arrives)."""

    @abc.abstractmethod
    def updates(self) -> AsyncIterator[OwnedGroups]:
        """Yield a snapshot whenever ownership changes (including self-fencing to empty)."""

    @abc.abstractmethod
    async def release(self, group: GroupRef, epoch: int) -> None:
        """Tell the fleet this worker has stopped touching ``group`` (handover may proceed)."""

    async def run(self) -> None:
        """Follow the coordinator until cancelled: the worker runs it as a task beside itself.

        A source that has nothing to follow returns at once."""
        return None

    def advertise(self, info: Mapping[str, str]) -> None:
        """Publish ``info`` about this worker (``{"metrics": "host:port"}``) where the fleet's
        members are listed; call before the source runs. Ignored where there is no fleet."""
        return None

    def inbox(self) -> str | None:
        """The worker id the fleet's writers address this worker's hints to (its ready signals
        and due index, :mod:`emq.core.signals`), or None where there is no fleet: the worker
        then reads the shared hints only."""
        return None

    def vouched(self, until: float) -> None:
        """The queue store confirmed, in a check sent at ``until`` minus its validity, that the
        worker still holds every group it kept (it dropped the others): the source may let it
        fetch and dispatch until the monotonic time ``until`` even cut off from its coordinator.
        """
        return None

    def may_fetch(self) -> bool:
        """False while the source has lost touch with its coordinator: fetch nothing new.

        Buffered jobs may still be dispatched (see :meth:`may_dispatch`). Cheap: the worker asks
        every tick.
        """
        return True

    def may_dispatch(self) -> bool:
        """False while this worker's ownership cannot be vouched for: start no push.

        In a fleet, ownership is a lease renewed by talking to ZooKeeper, or vouched for by the
        queue store (:meth:`vouched`); once both run out (or the worker self-fenced and has not
        yet dropped its groups) another worker may own them.
        Cheap: the worker asks every tick and before every push.
        """
        return True
