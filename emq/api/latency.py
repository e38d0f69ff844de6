"""Per-topic enqueue-to-delivery p50/p99 over the last minute, for the topic answers.

Read from the latency board the workers add to (:mod:`emq.core.latency`, in Redis beside the
rates): a few small hashes per topic whatever the traffic, all topics of an answer in one round
trip. The counts are exact, the quantiles estimates within their bucket (see the core module).
"""

from __future__ import annotations

from collections.abc import Sequence

from emq.api import answers
from emq.core.interfaces import HistoryStore
from emq.core.latency import LatencyBoard, summary
from emq.core.model import TopicRef


async def topic_latency(
    history: HistoryStore | None, refs: Sequence[TopicRef]
) -> dict[TopicRef, answers.Latency]:
    """Each topic's ``p50_ms``/``p99_ms`` (None: nothing delivered in the window) and the
    window's length; ``{}`` when the API has no board (no traffic history)."""
    if not isinstance(history, LatencyBoard) or not refs:
        return {}
    windows = await history.latency_window([str(r) for r in refs])
    out: dict[TopicRef, answers.Latency] = {}
    for ref in refs:
        s = summary(windows.get(str(ref)))
        out[ref] = {
            "p50_ms": s["p50_ms"],
            "p99_ms": s["p99_ms"],
            "latency_window_s": history.window_s,
        }
    return out
