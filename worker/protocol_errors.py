"""Protocol errors of push responses (ARCHITECTURE.md invariant 9), named alike by both push
clients, counted per topic for the metric ``emq_push_protocol_errors_total``.

An answer counts only if it is the complete response to its request on a connection that
carried nothing else. What breaks that rule:

* ``stray_bytes``: bytes after a complete response, before the next request is written (in the
  same read or while the connection idles): the connection is closed, never reused, and the
  bytes are never parsed as an answer. The answer before them stands (it was complete).
* ``head_too_large``, ``field_too_large``, ``too_many_headers``: a response head past the
  worker's limits (``max_response_head_bytes``, ``max_response_field_bytes``,
  ``max_response_headers``);
* ``malformed``: bytes that are not an HTTP/1.1 response (the parser's reason follows);
* ``upgrade``: a protocol switch nobody asked for.

All but ``stray_bytes`` fail their request (``PushResult(0, error="protocol: ...")``): the job is
retried, and its last error, in the DLQ entry and the job's status, is that text.

The counts are read at scrape time (:class:`ProtocolErrorCollector`): counting one is a dict
update on a path that is already failing, nothing on the hot path.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from emq.core.model import TopicRef

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

STRAY = "stray_bytes"
HEAD_TOO_LARGE = "head_too_large"
FIELD_TOO_LARGE = "field_too_large"
TOO_MANY_HEADERS = "too_many_headers"
MALFORMED = "malformed"
UPGRADE = "upgrade"

TEXT = {
    STRAY: "bytes after a complete response",
    HEAD_TOO_LARGE: "response head larger than the limit",
    FIELD_TOO_LARGE: "header field larger than the limit",
    TOO_MANY_HEADERS: "more header fields than the limit",
    MALFORMED: "not an HTTP/1.1 response",
    UPGRADE: "an upgrade nobody asked for",
}
PREFIX = "protocol: "


def message(reason: str, detail: str = "") -> str:
    """The readable text of a protocol error (a push's ``error``, the DLQ's last error)."""
    text = PREFIX + TEXT[reason]
    return f"{text} ({detail})" if detail else text


class ProtocolErrors:
    """Protocol errors counted by (endpoint, reason); the endpoint is a topic's
    (``PushRequest.endpoint``), ``""`` when no request was known."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}

    def count(self, endpoint: str, reason: str) -> None:
        key = (endpoint, reason)
        self.counts[key] = self.counts.get(key, 0) + 1

    def total(self, reason: str | None = None) -> int:
        return sum(n for (_, r), n in self.counts.items() if reason is None or r == reason)


class ProtocolErrorCollector(Collector):
    """``emq_push_protocol_errors_total{namespace,tenant,topic,reason}`` from a pusher's counts;
    an endpoint that is not one of the worker's topics (any more) is labelled by its text."""

    def __init__(self, errors: ProtocolErrors, topics: Mapping[TopicRef, object]) -> None:
        self._errors = errors
        self._topics = topics

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "emq_push_protocol_errors",
            "Push responses that broke the HTTP/1.1 rules (invariant 9): stray_bytes closed a "
            "connection (its answer stood); every other reason failed its request",
            labels=["namespace", "tenant", "topic", "reason"],
        )
        refs = {str(ref): ref for ref in list(self._topics)}
        for (endpoint, reason), n in list(self._errors.counts.items()):
            ref = refs.get(endpoint)
            labels = [ref.namespace.value, ref.tenant, ref.topic] if ref else ["", "", endpoint]
            family.add_metric([*labels, reason], n)
        yield family
