"""Prometheus metrics of a worker, served with ``/healthz`` on a small aiohttp server."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from emq.core.model import TopicRef

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class WorkerMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        labels = ["namespace", "tenant", "topic"]
        self.delivered = Counter(
            "emq_jobs_delivered_total", "Jobs delivered (2xx)", labels, registry=r
        )
        self.failed = Counter("emq_jobs_failed_total", "Failed push attempts", labels, registry=r)
        self.retried = Counter(
            "emq_jobs_retried_total", "Jobs re-scheduled for a retry", labels, registry=r
        )
        self.dead = Counter(
            "emq_jobs_dead_lettered_total", "Jobs moved to the DLQ", labels, registry=r
        )
        self.latency = Histogram(
            "emq_push_duration_seconds", "Time of one push", labels, buckets=_BUCKETS, registry=r
        )
        self.buffered = Gauge(
            "emq_worker_buffered_jobs", "Jobs fetched, waiting for quota", registry=r
        )
        self.in_flight = Gauge("emq_worker_in_flight_jobs", "Pushes in flight", registry=r)
        self.groups = Gauge("emq_worker_groups", "Groups owned", registry=r)
        self.loop_lag = Gauge("emq_worker_event_loop_lag_seconds", "Event-loop lag", registry=r)
        self.send_limit = Gauge(
            "emq_worker_send_limit", "Pushes allowed at once (fewer when CPU-bound)", registry=r
        )
        self.slow_pushes = Gauge(
            "emq_worker_slow_pushes",
            "Pushes waiting on slow or hanging endpoints, off the send limit",
            registry=r,
        )
        self.fetches = Counter(
            "emq_worker_fetch_round_trips_total", "Fetch round trips", registry=r
        )

    def labels(self, ref: TopicRef) -> tuple[str, str, str]:
        return (ref.namespace.value, ref.tenant, ref.topic)

    async def measure_loop_lag(self, interval_s: float = 0.1) -> None:
        while True:
            start = time.perf_counter()
            await asyncio.sleep(interval_s)
            self.loop_lag.set(max(0.0, time.perf_counter() - start - interval_s))

    async def handle(self, request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )
