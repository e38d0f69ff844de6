"""Prometheus metrics of a worker, served with ``/healthz`` on a small aiohttp server.

Counters (delivered, attempts failed, retried, jobs failed) move with the history recorder once
a second. Histograms and per-topic gauges are read at scrape time from what the hot path
counts anyway (:class:`TopicCollector`): no ``observe()`` per job. Per-topic series carry the
labels namespace/tenant/topic of the topics this worker owns groups of (bounded by the topics
configured; a worker owning a share of the fleet's groups exports only its topics).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from emq.core.model import TopicRef

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from worker.groups import TopicState

LABELS = ["namespace", "tenant", "topic"]


class WorkerMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.delivered = Counter(
            "emq_jobs_delivered_total", "Jobs delivered (2xx)", LABELS, registry=r
        )
        self.failed = Counter(
            "emq_push_attempts_failed_total",
            "Push attempts that failed (non-2xx, timeout, connection error)",
            LABELS,
            registry=r,
        )
        self.retried = Counter(
            "emq_jobs_retried_total", "Jobs re-scheduled for a retry", LABELS, registry=r
        )
        self.dead = Counter(
            "emq_jobs_failed_total",
            "Jobs that failed for good: moved to the DLQ (attempts exhausted or undeliverable)",
            LABELS,
            registry=r,
        )
        self.buffered = Gauge(
            "emq_worker_buffered_jobs", "Jobs fetched, waiting for quota", registry=r
        )
        self.in_flight = Gauge("emq_worker_in_flight_jobs", "Pushes in flight", registry=r)
        self.groups = Gauge("emq_worker_groups", "Groups owned", registry=r)
        self.loop_lag = Gauge("emq_worker_event_loop_lag_seconds", "Event-loop lag", registry=r)
        self.last_loop_lag_s = 0.0  # the gauge's value, readable without prometheus' privates
        self.send_limit = Gauge(
            "emq_worker_send_limit", "Pushes allowed at once (fewer when CPU-bound)", registry=r
        )
        self.slow_pushes = Gauge(
            "emq_worker_slow_pushes",
            "Pushes waiting on slow or hanging endpoints, off the send limit",
            registry=r,
        )
        self.collector = TopicCollector()
        r.register(self.collector)

    def watch(
        self,
        topics: Mapping[TopicRef, TopicState],
        buffer_bytes: Callable[[], int] = lambda: 0,
        fetches: Callable[[], int] = lambda: 0,
    ) -> None:
        """Read these at scrape time: the worker's topics, its buffer bytes, its fetches."""
        self.collector.topics = topics
        self.collector.buffer_bytes = buffer_bytes
        self.collector.fetches = fetches

    def labels(self, ref: TopicRef) -> tuple[str, str, str]:
        return (ref.namespace.value, ref.tenant, ref.topic)

    def lagged(self, lag_s: float) -> None:
        """The event loop's lag: how late its last timer ran (the dispatcher's pause, which
        runs at least every 0.1 s: no timer of its own to wake an idle worker)."""
        self.last_loop_lag_s = lag_s
        self.loop_lag.set(lag_s)

    async def handle(self, request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )


def _buckets(
    bounds: Sequence[float], counts: Sequence[int], scale: float
) -> list[tuple[str, float]]:
    """Per-bucket counts (the last one: over every bound) as Prometheus' cumulative buckets."""
    out, seen = [], 0
    for bound, n in zip(bounds, counts, strict=False):
        seen += n
        out.append((repr(float(bound) * scale), float(seen)))
    out.append(("+Inf", float(sum(counts))))
    return out


def _throttled(state: TopicState, now: float) -> int:
    """Buffered jobs of the topic's groups whose budget is spent: they wait for the quota only
    (a group with budget left waits for something else: the endpoint's concurrency, a sender)."""
    return sum(
        g.buffered() for g in state.groups.values() if g.buffered() and not g.counter.available(now)
    )


class TopicCollector(Collector):
    """Per-topic histograms and gauges, built from the worker's own counts when scraped."""

    def __init__(self) -> None:
        self.topics: Mapping[TopicRef, TopicState] = {}
        self.buffer_bytes: Callable[[], int] = lambda: 0
        self.fetches: Callable[[], int] = lambda: 0

    def describe(self) -> Iterator[Metric]:
        return iter(())  # collected lazily: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        from worker.groups import E2E_BUCKETS_S, LATENCY_BUCKETS_MS, STARVED_S

        push = HistogramMetricFamily(
            "emq_push_duration_seconds", "Time of one successful push", labels=LABELS
        )
        e2e = HistogramMetricFamily(
            "emq_delivery_latency_seconds",
            "From enqueue (accepted by the API) to delivery (2xx)",
            labels=LABELS,
        )
        throttled = GaugeMetricFamily(
            "emq_topic_throttled_jobs",
            "Jobs fetched by this worker and waiting only for the quota (their group's is spent)",
            labels=LABELS,
        )
        shares = GaugeMetricFamily(
            "emq_topic_tenant_share_qps",
            "The topic's share of its tenant's cap on this worker (topics of capped tenants only)",
            labels=LABELS,
        )
        moved = CounterMetricFamily(
            "emq_quota_grants_moved",
            "Quota grants moved later to when their jobs went out: late_send, sent more than "
            f"{STARVED_S * 1000:g} ms after the grant (a slow event loop, senders all busy); "
            "late_write, written "
            "past the HTTP client's margin after its last look at the grant (the CPU taken away "
            "right there). Many of either: the worker is short of CPU",
            labels=[*LABELS, "reason"],
        )
        now = time.time()
        for ref, state in list(self.topics.items()):
            labels = [ref.namespace.value, ref.tenant, ref.topic]
            stats = state.stats
            moved.add_metric([*labels, "late_send"], stats.moved_late_send)
            moved.add_metric([*labels, "late_write"], stats.moved_late_write)
            counts = stats.latency.counts
            push.add_metric(labels, _buckets(LATENCY_BUCKETS_MS, counts, 0.001), state.push_sum_s)
            e2e.add_metric(labels, _buckets(E2E_BUCKETS_S, state.e2e, 1.0), state.e2e_sum_s)
            throttled.add_metric(labels, _throttled(state, now))
            if state.tenant_share is not None:
                shares.add_metric(labels, state.tenant_share)
        yield push
        yield e2e
        yield moved
        yield throttled
        yield shares
        yield GaugeMetricFamily(
            "emq_worker_buffer_bytes",
            "Payload bytes held in this worker's buffers (EMQ_WORKER_BUFFER_BYTES bounds it)",
            value=self.buffer_bytes(),
        )
        yield CounterMetricFamily(
            "emq_worker_fetch_round_trips", "Fetch round trips to Redis", value=self.fetches()
        )
