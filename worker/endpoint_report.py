"""What a worker shows of its topics' endpoints: the status board (for the API) and metrics.

Once a second every topic with followed endpoints (:mod:`worker.endpoints`) is posted to the
:class:`~emq.core.endpoints.EndpointBoard` (a topic whose endpoints were all forgotten is posted
once more, empty); the same numbers are Prometheus gauges read at scrape time, one series per
followed endpoint (at most ``EMQ_WORKER_ENDPOINTS_PER_TOPIC`` per topic: bounded cardinality).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from emq.core.endpoints import EndpointBoard
from emq.core.errors import BackendUnavailable
from emq.core.model import TopicRef

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from worker.groups import TopicState

log = logging.getLogger(__name__)

LABELS = ["namespace", "tenant", "topic", "endpoint"]
REPORT_S = 1.0


def statuses(topics: Mapping[TopicRef, TopicState]) -> dict[str, list[dict[str, Any]]]:
    """Every followed endpoint of ``topics``, by topic (also refreshes their OPEN/not state)."""
    mono = time.monotonic()
    out: dict[str, list[dict[str, Any]]] = {}
    for state in list(topics.values()):
        rates = state.rates
        if rates is not None and rates.endpoints:
            rates.refresh(mono)
            out[state.endpoint] = rates.status(mono)
    return out


async def report_loop(
    board: EndpointBoard, source: str, topics: Mapping[TopicRef, TopicState]
) -> None:
    """Post the endpoints' statuses every REPORT_S (best effort: a failed post is skipped)."""
    shown: set[str] = set()
    while True:
        await asyncio.sleep(REPORT_S)
        current = statuses(topics)
        posts: dict[str, list[dict[str, Any]]] = {t: [] for t in shown - set(current)}
        posts.update(current)
        if not posts:
            continue
        try:
            await board.publish(source, posts)
        except BackendUnavailable as e:
            log.debug("endpoint statuses not posted (%s)", e)
            continue
        shown = set(current)


class EndpointCollector(Collector):
    """``emq_endpoint_*`` series, read from the worker's topics when scraped."""

    def __init__(self, topics: Mapping[TopicRef, TopicState]) -> None:
        self.topics = topics

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        rate = GaugeMetricFamily(
            "emq_endpoint_rate",
            "An endpoint's current adaptive rate on this worker, jobs/s (the quota when open)",
            labels=LABELS,
        )
        disabled = GaugeMetricFamily(
            "emq_endpoint_disabled",
            "1 while an endpoint is disabled (its jobs held)",
            labels=LABELS,
        )
        parked = GaugeMetricFamily(
            "emq_endpoint_parked_jobs", "Jobs waiting for their endpoint's pace", labels=LABELS
        )
        throttled = CounterMetricFamily(
            "emq_endpoint_throttled",
            "429/503 answers from an endpoint since this worker followed it",
            labels=LABELS,
        )
        mono = time.monotonic()
        for ref, state in list(self.topics.items()):
            if state.rates is None:
                continue
            for row in state.rates.status(mono):
                labels = [ref.namespace.value, ref.tenant, ref.topic, row["endpoint"]]
                rate.add_metric(labels, row["rate_qps"])
                disabled.add_metric(labels, 1.0 if row["state"] == "disabled" else 0.0)
                parked.add_metric(labels, row["parked"])
                throttled.add_metric(labels, row["throttled"])
        yield from (rate, disabled, parked, throttled)
