"""Prometheus metrics of the API, on a registry of the app's own (one per app, so tests and
several apps in one process never collide)."""

from __future__ import annotations

import time

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from emq.api.errors import Handler
from emq.core.model import TopicRef

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "emq_api_requests_total",
            "HTTP requests served by the API",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "emq_api_request_duration_seconds",
            "Time to answer an API request",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.enqueued = Counter(
            "emq_jobs_enqueued_total",
            "Jobs accepted (durably stored)",
            ["namespace", "tenant", "topic"],
            registry=self.registry,
        )
        self.duplicates = Counter(
            "emq_jobs_duplicate_total",
            "Jobs dropped as duplicates of an idempotency key",
            ["namespace", "tenant", "topic"],
            registry=self.registry,
        )

    def accepted(self, ref: TopicRef, stored: int, duplicates: int) -> None:
        labels = (ref.namespace.value, ref.tenant, ref.topic)
        if stored:
            self.enqueued.labels(*labels).inc(stored)
        if duplicates:
            self.duplicates.labels(*labels).inc(duplicates)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        start = time.perf_counter()
        response = await handler(request)
        route = request.match_info.route.resource
        name = route.canonical if route is not None else "unmatched"
        self.requests.labels(name, request.method, str(response.status)).inc()
        self.latency.labels(name).observe(time.perf_counter() - start)
        return response

    async def handle(self, request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )
