"""Where the API keeps the latest capacity plans (``POST /v1/plans``, ``GET /v1/plans/latest``).

A plan is stored when it is reviewed or applied (``emq plan apply [--dry-run]`` sends it), with
when and why; the store keeps the latest few (``EMQ_API_PLANS_KEPT``) and forgets older ones, so
it stays bounded whatever the number of runs.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

from emq.core.interfaces import AsyncResource


@dataclass(frozen=True, slots=True)
class StoredPlan:
    """One stored plan: ``plan`` is the validated document (:class:`~emq.core.plan_schema.PlanIn`
    as a dict); ``kept`` is how many plans the store holds, this one included (when read)."""

    id: str
    stored_at: float
    source: str
    plan: dict[str, Any]
    kept: int = 0


class PlanStore(AsyncResource):
    """The latest capacity plans, newest first."""

    @abc.abstractmethod
    async def save(self, plan: StoredPlan, keep: int) -> int:
        """Store ``plan`` as the latest, keep the ``keep`` latest; returns how many are kept."""

    @abc.abstractmethod
    async def latest(self) -> StoredPlan | None:
        """The plan stored last (None if none), with ``kept`` filled in."""
