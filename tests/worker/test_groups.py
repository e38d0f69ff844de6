"""The latency histogram the worker keeps per topic."""

from __future__ import annotations

from worker.groups import LATENCY_BUCKETS_MS, LatencyHistogram


def test_each_latency_lands_in_the_first_bucket_that_holds_it() -> None:
    h = LatencyHistogram()
    for ms in (0.0, 1.0, 1.01, 2.0, 49.9, 50.0, 60_000.0, 60_000.5, 1e9):
        h.add(ms)
    at = dict(zip((*LATENCY_BUCKETS_MS, "over"), h.counts, strict=True))
    assert at[1] == 2 and at[2] == 2 and at[50] == 2 and at[60000] == 1 and at["over"] == 2
    assert sum(h.counts) == 9
