"""The seam the tenant quota runs on: owners of a capped tenant's groups share their demand.

Every worker that owns groups of a tenant with a cap (``Tenant.qps_caps``) publishes, every
period, how each of that tenant's topics fares on it (:class:`TopicLoad`), and reads what every
other owner published; each then divides the cap the same way (:mod:`capacity.tenant_share`).
One round trip a period per worker, none per job. ``adapters.redis_demand`` implements it on
Redis, ``adapters.memory_demand`` in memory (one process).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass

from emq.core.interfaces import AsyncResource
from emq.core.model import Namespace


@dataclass(frozen=True, slots=True)
class TopicLoad:
    """One topic on one worker over the last period."""

    backlogged: bool  # jobs waited for quota
    rate: float  # deliveries a second

    def to_list(self) -> list[float]:
        return [1.0 if self.backlogged else 0.0, round(self.rate, 2)]

    @classmethod
    def from_list(cls, raw: object) -> TopicLoad:
        """From :meth:`to_list`'s form; ValueError and kin for anything else."""
        if not isinstance(raw, list) or len(raw) != 2:
            raise ValueError(f"not a topic load: {raw!r}")
        return cls(bool(raw[0]), float(raw[1]))


Loads = Mapping[str, TopicLoad]  # topic name -> its load


class DemandBoard(AsyncResource):
    """Where the owners of capped tenants' groups publish and read their loads."""

    @abc.abstractmethod
    async def exchange(
        self, namespace: Namespace, worker_id: str, mine: Mapping[str, Loads], stale_s: float
    ) -> dict[str, list[Loads]]:
        """Publish ``mine`` (tenant -> this worker's loads of its topics) and return, per tenant
        of ``mine``, the loads every worker published within ``stale_s`` (this one's included).
        :class:`~emq.core.errors.BackendUnavailable` if the store cannot be reached."""
