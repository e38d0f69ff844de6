"""The console's p50/p99: quantiles of the fixed enqueue-to-delivery buckets (emq.core.latency)."""

from __future__ import annotations

import pytest

from adapters.redis_latency import MemoryLatencyBoard
from emq.core.latency import BUCKETS, E2E_BUCKETS_S, quantile, summary


def histogram(**at: int) -> list[int]:
    """Counts by bucket bound (``b0_25=3``: 3 deliveries in the bucket up to 0.25 s)."""
    counts = [0] * BUCKETS
    for name, n in at.items():
        bound = float(name[1:].replace("_", "."))
        counts[E2E_BUCKETS_S.index(bound)] = n
    return counts


def test_an_empty_histogram_has_no_quantile() -> None:
    assert quantile([0] * BUCKETS, 0.99) is None
    assert summary(None) == {"p50_ms": None, "p99_ms": None, "delivered": 0}


def test_quantiles_interpolate_within_their_bucket() -> None:
    # 100 deliveries between 0.1 s and 0.25 s: the median is half-way, p99 near the top.
    counts = histogram(b0_25=100)
    assert quantile(counts, 0.5) == pytest.approx(0.175)
    assert quantile(counts, 0.99) == pytest.approx(0.1 + 0.15 * 0.99)
    # 98 fast ones and 2 slow ones: p99 falls among the slow ones, p50 among the fast.
    counts = histogram(b0_01=98, b5=2)
    assert quantile(counts, 0.5) is not None and quantile(counts, 0.5) <= 0.01  # type: ignore[operator]
    assert 2.5 < quantile(counts, 0.99) <= 5  # type: ignore[operator]
    assert summary(counts)["delivered"] == 100


def test_a_quantile_in_the_overflow_bucket_reads_as_the_last_bound() -> None:
    counts = [0] * BUCKETS
    counts[-1] = 10
    assert quantile(counts, 0.99) == E2E_BUCKETS_S[-1]


async def test_the_memory_board_adds_up_sources_per_topic() -> None:
    board = MemoryLatencyBoard()
    await board.add_latency({"online/a/x": histogram(b0_1=3), "online/a/y": histogram(b1=1)})
    await board.add_latency({"online/a/x": histogram(b0_1=2, b10=1)})
    window = await board.latency_window(["online/a/x", "online/a/y", "online/a/idle"])
    assert window["online/a/x"] == histogram(b0_1=5, b10=1)
    assert window["online/a/y"] == histogram(b1=1)
    assert "online/a/idle" not in window
