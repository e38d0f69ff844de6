"""Prometheus metrics of the transactions (:mod:`emq.api.transactions`, :mod:`emq.api.checkback`)
on the API's registry (:class:`~emq.api.metrics.ApiMetrics`).

Counted where they happen, by this API process:

* ``emq_transaction_decisions_total{outcome, source}``: transactions decided, ``outcome``
  ``committed`` or ``rolled_back``, ``source`` where the decision came from: ``producer`` (its
  commit or rollback), ``check_back`` (its check_url answered), ``default`` (the check-back's
  bound was reached, or the topic was deleted: the topic's ``transaction_default``). Only the
  call that decided counts (a repeated or refused commit does not).
* ``emq_transaction_checks_total{result}``: check-back requests sent to check URLs, by what came
  back: ``commit``, ``rollback``, ``unknown``, ``http_error`` (not a 2xx), ``invalid`` (not the
  expected JSON), ``unreachable`` (no answer: refused, timed out, an address the SSRF rules
  forbid).

Read from the store when ``/metrics`` is scraped (at most once per
:data:`~emq.api.metrics.TOPIC_REFRESH_S`, one pipelined round trip for every topic of the API's
namespace), as :class:`~emq.api.metrics.TopicGauges` are:

* ``emq_topic_open_transactions``: transactions open (neither committed nor rolled back);
* ``emq_topic_prepared_jobs``: jobs held in transactions (open, or committed and not yet in their
  queues): they count against the topic's ``max_backlog``, not in its backlog.

Every series is labelled namespace/tenant/topic.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily

from emq.api.metrics import ScrapedGauges
from emq.core.interfaces import ConfigStore
from emq.core.model import Namespace, TopicRef
from emq.core.transactions import Source, TransactionStore, TxState

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


LABELS = ["namespace", "tenant", "topic"]


def _labels(ref: TopicRef) -> tuple[str, str, str]:
    return ref.namespace.value, ref.tenant, ref.topic


class TransactionMetrics:
    """The transactions' counters and gauges on ``registry`` (see the module docstring)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        store: TransactionStore | None,
        config: ConfigStore,
        ns: Namespace,
    ) -> None:
        self.decisions = Counter(
            "emq_transaction_decisions_total",
            "Transactions decided, by outcome and where the decision came from",
            [*LABELS, "outcome", "source"],
            registry=registry,
        )
        self.checks = Counter(
            "emq_transaction_checks_total",
            "Check-back requests sent to check URLs, by what came back",
            [*LABELS, "result"],
            registry=registry,
        )
        self.gauges: TransactionGauges | None = None
        if store is not None:
            self.gauges = TransactionGauges(store, config, ns)
            registry.register(self.gauges)

    def decided(self, ref: TopicRef, state: TxState, source: Source) -> None:
        self.decisions.labels(*_labels(ref), state.value, source.value).inc()

    def checked(self, ref: TopicRef, result: str) -> None:
        self.checks.labels(*_labels(ref), result).inc()

    async def refresh(self) -> None:
        if self.gauges is not None:
            await self.gauges.refresh()


class TransactionGauges(ScrapedGauges):
    """Open transactions and prepared jobs per topic, refreshed by the scrape."""

    what = "transaction metrics"

    def __init__(self, store: TransactionStore, config: ConfigStore, ns: Namespace) -> None:
        super().__init__()
        self._store = store
        self._config = config
        self._ns = ns
        self._rows: list[tuple[TopicRef, int, int]] = []

    async def _read(self) -> None:
        refs = [t.ref for t in await self._config.list_topics(self._ns)]
        counts = await self._store.counts(refs)
        self._rows = [(ref, n, jobs) for ref, (n, jobs) in zip(refs, counts, strict=True)]

    def collect(self) -> Iterator[Metric]:
        opened = GaugeMetricFamily(
            "emq_topic_open_transactions",
            "Transactions open (neither committed nor rolled back)",
            labels=LABELS,
        )
        prepared = GaugeMetricFamily(
            "emq_topic_prepared_jobs",
            "Jobs held in transactions: open, or committed and not yet in their queues",
            labels=LABELS,
        )
        for ref, n, jobs in self._rows:
            opened.add_metric(list(_labels(ref)), n)
            prepared.add_metric(list(_labels(ref)), jobs)
        yield from (opened, prepared)
