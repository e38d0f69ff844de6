"""The latency board in Redis (adapters.redis_latency): what a worker adds in one call per chunk
of topics (one per topic on a Cluster) reads back as the memory board's sums, for more topics
than a call takes, with a TTL on every slot's hash; a lost script cache is reloaded."""

from __future__ import annotations

import random

from adapters.redis_latency import ADD_CHUNK, TTL_S, MemoryLatencyBoard, RedisLatencyBoard
from emq.core.latency import BUCKETS
from tests.adapters.conftest import Subject


def histograms(rng: random.Random, topics: list[str]) -> dict[str, list[int]]:
    """Sparse counts (most buckets empty, as a topic's few seconds of deliveries are), some
    topics with none at all."""
    out = {}
    for t in topics:
        counts = [0] * BUCKETS
        for _ in range(rng.randrange(0, 4)):
            counts[rng.randrange(BUCKETS)] += rng.randrange(1, 1000)
        out[t] = counts
    return out


async def test_adds_read_back_as_the_sums_for_more_topics_than_a_call_takes(
    redis_subject: Subject,
) -> None:
    assert redis_subject.raw is not None
    board = RedisLatencyBoard(redis_subject.raw, redis_subject.keys)
    memory = MemoryLatencyBoard()
    rng = random.Random(7)
    topics = [f"online/t{i % 7}/topic-{i}" for i in range(ADD_CHUNK * 2 + 13)]
    for _ in range(3):  # the same hashes added to again (several workers, later seconds)
        counts = histograms(rng, topics)
        await board.add_latency(counts)
        await memory.add_latency(counts)
    expected = await memory.latency_window(topics)
    assert 0 < len(expected) < len(topics)  # some topics had nothing: they have no hash
    assert await board.latency_window(topics) == expected

    raw, prefix = redis_subject.raw, redis_subject.keys.prefix
    keys = [k async for k in raw.scan_iter(match=f"{prefix}:lat:*")]
    # a hash per topic with counts and slot (the adds may straddle a 15 s slot's end: two)
    assert len(expected) <= len(keys) <= 2 * len(expected)
    for key in keys[:50]:
        assert 0 < await raw.ttl(key) <= TTL_S


async def test_a_flushed_script_cache_is_loaded_again(redis_subject: Subject) -> None:
    assert redis_subject.raw is not None
    board = RedisLatencyBoard(redis_subject.raw, redis_subject.keys)
    counts = {"online/a/x": [1] + [0] * (BUCKETS - 1)}
    await board.add_latency(counts)
    await redis_subject.raw.script_flush()  # on a Cluster client: every primary
    await board.add_latency(counts)
    assert (await board.latency_window(["online/a/x"]))["online/a/x"][0] == 2
