"""The fleet view seam: the fleet's members and assignment, for operators (``allocator``)."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from emq.core.interfaces.resource import AsyncResource
from emq.core.model import Namespace


@dataclass(frozen=True, slots=True)
class FleetMember:
    """One registered worker and what the current assignment gives it."""

    id: str
    host: str = ""
    pid: int = 0
    weight: int = 1
    started_at: float = 0.0
    groups: Mapping[str, int] = field(default_factory=dict)  # str(GroupRef) -> owner epoch
    metrics: str = ""  # host:port of its /metrics ("" if it serves none)
    leader: bool = False


@dataclass(frozen=True, slots=True)
class FleetState:
    """The fleet of a namespace as ZooKeeper has it: members, leader, the assignment.

    ``orphans`` are groups the assignment gives to a worker that is not registered (a member
    that just left, before the leader re-assigned its groups): str(GroupRef) -> that worker.
    """

    namespace: Namespace
    generation: int = 0
    leader: str | None = None
    assigned_at: float = 0.0
    members: Sequence[FleetMember] = ()
    orphans: Mapping[str, str] = field(default_factory=dict)


class FleetView(AsyncResource):
    """Reads the fleet's state for operators (``GET /v1/workers``, ``emq fleet workers``)."""

    @abc.abstractmethod
    async def state(self, namespace: Namespace) -> FleetState:
        """Members, leader and assignment now; ``BackendUnavailable`` if ZooKeeper is down."""
