"""Prometheus metrics of the API, on a registry of the app's own (one per app, so tests and
several apps in one process never collide).

Per-topic gauges of the store (backlog, delayed jobs, quota, paused, oldest waiting job's age:
:class:`TopicGauges`) are read when ``/metrics`` is scraped, at most once per
:data:`TOPIC_REFRESH_S` whoever scrapes: one pipelined round trip per kind for every group of
every topic in the API's namespace (about 3 small scripts per group). Their labels are
namespace/tenant/topic (and priority for the backlog): one series per configured topic.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from emq.api.errors import Handler
from emq.core.errors import BackendUnavailable
from emq.core.interfaces import ConfigStore, QueueBackend
from emq.core.jobs import JobStore
from emq.core.model import PRIORITIES, Namespace, Topic, TopicRef

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

log = logging.getLogger(__name__)

TOPIC_REFRESH_S = 1.0

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

        self.topics: TopicGauges | None = None
        # Other collectors read at scrape time (their own throttle): each refreshed first.
        self.refreshers: list[Callable[[], Awaitable[None]]] = []
        # (route, method, status) -> its request counter and latency histogram
        self._series: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}
        self._enqueued: dict[TopicRef, Counter] = {}  # a topic's series of emq_jobs_enqueued

    def watch_topics(
        self, config: ConfigStore, queues: QueueBackend, jobs: JobStore | None, ns: Namespace
    ) -> None:
        """Export the per-topic gauges of namespace ``ns`` (read when scraped)."""
        self.topics = TopicGauges(config, queues, jobs, ns)
        self.registry.register(self.topics)

    def accepted(self, ref: TopicRef, stored: int, duplicates: int) -> None:
        labels = (ref.namespace.value, ref.tenant, ref.topic)
        if stored:
            counter = self._enqueued.get(ref)
            if counter is None:
                counter = self._enqueued[ref] = self.enqueued.labels(*labels)
            counter.inc(stored)
        if duplicates:
            self.duplicates.labels(*labels).inc(duplicates)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        start = time.perf_counter()
        response = await handler(request)
        route = request.match_info.route.resource
        name = route.canonical if route is not None else "unmatched"
        key = (name, request.method, response.status)
        series = self._series.get(key)
        if series is None:  # labels() costs a lock and a tuple per call: once per series
            series = self._series[key] = (
                self.requests.labels(name, request.method, str(response.status)),
                self.latency.labels(name),
            )
        series[0].inc()
        series[1].observe(time.perf_counter() - start)
        return response

    async def handle(self, request: web.Request) -> web.Response:
        if self.topics is not None:
            await self.topics.refresh()
        for refresh in self.refreshers:
            await refresh()
        return web.Response(
            body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )


class ScrapedGauges(Collector):
    """Numbers read from the store when ``/metrics`` is scraped (:meth:`refresh`, awaited
    before the registry is collected), at most once per :data:`TOPIC_REFRESH_S`; while the
    store cannot be reached the previous numbers stay and the scrape still answers. A subclass
    reads in :meth:`_read` and says what it reads in ``what`` (the log's words)."""

    what = "metrics"

    def __init__(self) -> None:
        self._at = -TOPIC_REFRESH_S

    def describe(self) -> Iterator[Metric]:
        return iter(())

    async def refresh(self) -> None:
        if time.monotonic() - self._at < TOPIC_REFRESH_S:
            return
        self._at = time.monotonic()
        try:
            await self._read()
        except BackendUnavailable as e:
            log.warning("%s not refreshed: %s", self.what, e)

    async def _read(self) -> None:
        raise NotImplementedError


class TopicGauges(ScrapedGauges):
    """Per-topic numbers of the store, refreshed by the scrape (see the module docstring)."""

    what = "per-topic metrics"

    def __init__(
        self, config: ConfigStore, queues: QueueBackend, jobs: JobStore | None, ns: Namespace
    ) -> None:
        super().__init__()
        self._config = config
        self._queues = queues
        self._jobs = jobs
        self._ns = ns
        self._rows: list[tuple[Topic, list[int], int, float | None]] = []

    async def _read(self) -> None:
        topics = await self._config.list_topics(self._ns)
        groups = [t.group_refs() for t in topics]
        queues = [q for gs in groups for g in gs for q in g.queues()]
        counts = await self._queues.backlog(queues)
        delayed = await self._queues.delayed([g for gs in groups for g in gs])
        oldest = await self._jobs.oldest_ms(queues) if self._jobs is not None else []
        now_ms = time.time() * 1000
        rows, qi, gi = [], 0, 0
        for topic, gs in zip(topics, groups, strict=True):
            n = 3 * len(gs)
            per_priority = [sum(counts[qi + k : qi + n : 3]) for k in range(3)]
            first = [ms for ms in oldest[qi : qi + n] if ms is not None]
            age = max(0.0, (now_ms - min(first)) / 1000) if first else None
            rows.append((topic, per_priority, sum(delayed[gi : gi + len(gs)]), age))
            qi, gi = qi + n, gi + len(gs)
        self._rows = rows

    def collect(self) -> Iterator[Metric]:
        labels = ["namespace", "tenant", "topic"]
        backlog = GaugeMetricFamily(
            "emq_topic_backlog_jobs",
            "Jobs stored and not yet finished, per priority",
            labels=[*labels, "priority"],
        )
        delayed = GaugeMetricFamily(
            "emq_topic_delayed_jobs",
            "Jobs parked until a due time (delay_s, retries)",
            labels=labels,
        )
        quota = GaugeMetricFamily("emq_topic_quota_qps", "The topic's quota", labels=labels)
        paused = GaugeMetricFamily("emq_topic_paused", "1 while the topic is paused", labels=labels)
        oldest = GaugeMetricFamily(
            "emq_topic_oldest_job_age_seconds",
            "Age of the oldest job waiting in the topic's queues (0: none)",
            labels=labels,
        )
        for topic, per_priority, parked, age in self._rows:
            ref = topic.ref
            values = [ref.namespace.value, ref.tenant, ref.topic]
            for p, n in zip(PRIORITIES, per_priority, strict=True):
                backlog.add_metric([*values, p.value], n)
            delayed.add_metric(values, parked)
            quota.add_metric(values, topic.qps)
            paused.add_metric(values, 1.0 if topic.paused else 0.0)
            oldest.add_metric(values, age or 0.0)
        yield from (backlog, delayed, quota, paused, oldest)
