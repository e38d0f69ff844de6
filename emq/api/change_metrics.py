"""Prometheus metrics of the change log (:mod:`emq.api.changes`) and of plan rollouts
(:mod:`emq.api.rollouts`), on the API's registry (:class:`~emq.api.metrics.ApiMetrics`).

Counted once, by the API process that did it, where it is decided:

* ``emq_changes_total{namespace, tenant, route}``: quota, split, weight and cap changes applied
  (one per change-log entry, a topic's creation and a revert included), ``route`` ``api``,
  ``cli`` or ``plan``; counted by :class:`~emq.api.changes.ChangeRecorder` once the write is
  done, even if Redis then refuses the log entry (the change is applied; the API logs it).
* ``emq_change_reverts_total{namespace, tenant, route}``: reverts that set fields back
  (``POST /v1/changes/{change}/revert``); also counted in ``emq_changes_total``. A refused one
  (409: stale) or one that found nothing to set back is not counted.
* ``emq_rollouts_started_total``: rollouts started (``POST /v1/rollouts``).
* ``emq_rollouts_ended_total{state}``: rollouts ended, by the state the ``PATCH`` that ended
  them set: ``done``, ``rolled-back``, ``failed`` (a rollback that could not set every topic
  back), or ``abandoned`` when a client says so.

Read from the store when ``/metrics`` is scraped (at most once per
:data:`~emq.api.metrics.TOPIC_REFRESH_S`, one round trip):

* ``emq_rollout_latest_state{state}``: 1 for the state of the rollout started last, as
  ``GET /v1/rollouts/latest`` answers it, 0 for the others (no series before the first rollout).
  A rollout whose ``emq plan apply`` stopped beating reads ``abandoned`` here: that state is
  decided by the clock, not by a request, so it is a gauge and not in the counter (a CLI that
  beats again takes its rollout back to ``running``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily

from emq.api.metrics import ScrapedGauges
from emq.core.changes import Change
from emq.core.rollouts import STATES, RolloutStore, shown

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


CHANGE_LABELS = ["namespace", "tenant", "route"]


class ChangeMetrics:
    """The change log's counters on ``registry`` (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.changes = Counter(
            "emq_changes_total",
            "Quota, split, weight and cap changes applied (change-log entries), by route",
            CHANGE_LABELS,
            registry=registry,
        )
        self.reverts = Counter(
            "emq_change_reverts_total",
            "Changes reverted (their fields set back), by route",
            CHANGE_LABELS,
            registry=registry,
        )

    def applied(self, change: Change) -> None:
        labels = (change.namespace, change.tenant, change.route.value)
        self.changes.labels(*labels).inc()
        if change.revert_of is not None:
            self.reverts.labels(*labels).inc()


class RolloutMetrics:
    """The rollouts' counters and the latest rollout's state on ``registry``."""

    def __init__(self, registry: CollectorRegistry, store: RolloutStore) -> None:
        self.started = Counter(
            "emq_rollouts_started", "Plan rollouts started (emq plan apply --canary)",
            registry=registry,
        )  # fmt: skip
        self.ended = Counter(
            "emq_rollouts_ended", "Plan rollouts ended, by the state they ended in", ["state"],
            registry=registry,
        )  # fmt: skip
        self.latest = LatestRollout(store)
        registry.register(self.latest)

    def patched(self, before: dict[str, Any], after: dict[str, Any]) -> None:
        """A PATCH stored ``after`` over ``before``: counted if it ended the rollout."""
        if before.get("state") == "running" and after.get("state") != "running":
            self.ended.labels(str(after.get("state"))).inc()


class LatestRollout(ScrapedGauges):
    """``emq_rollout_latest_state``, refreshed by the scrape."""

    what = "rollout metrics"

    def __init__(self, store: RolloutStore) -> None:
        super().__init__()
        self._store = store
        self._state: str | None = None

    async def _read(self) -> None:
        rollout = await self._store.latest()
        self._state = None if rollout is None else shown(rollout, time.time()).get("state")

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "emq_rollout_latest_state",
            "1 for the state of the rollout started last (abandoned: its CLI stopped beating)",
            labels=["state"],
        )
        if self._state is not None:
            for state in STATES:
                family.add_metric([state], 1.0 if state == self._state else 0.0)
        yield family
