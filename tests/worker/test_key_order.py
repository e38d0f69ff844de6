"""Order per key (ARCHITECTURE.md invariant 5) on real Redis, a real worker and a real sink.

Jobs of one key are delivered in enqueue order, one at a time, over a topic of several groups;
a job handed to retry does not hold back the later jobs of its key (see worker.keys).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

import orjson

from emq.api.enqueue import jump_hash
from tests.worker.conftest import Sink, Stack, fast_retry


def inversions(sink: Sink, topic: str) -> tuple[int, dict[str, list[int]]]:
    """Jobs that reached the sink before an earlier-enqueued job of their key."""
    seen: dict[str, list[int]] = defaultdict(list)
    for d in sink.of(topic):
        body = orjson.loads(d.body)
        seen[body["k"]].append(body["n"])
    bad = sum(b < a for runs in seen.values() for a, b in itertools.pairwise(runs))
    return bad, seen


async def test_keyed_jobs_over_several_groups_arrive_in_order(
    stack: Stack, sink: Sink, worker_process: Any
) -> None:
    await stack.topic("ko", 600)  # four groups
    groups = stack.topics["ko"].groups
    keys = [f"key-{i}" for i in range(8)]
    assert len({jump_hash(k, groups) for k in keys}) > 1
    sink.behaviour["ko"].jitter_s = 0.02  # two of a key in flight at once would likely swap
    per_key = 150
    batch = [
        {"url": sink.url("ko"), "key": k, "body": {"k": k, "n": n}}
        for n in range(per_key)
        for k in keys
    ]
    await stack.enqueue("ko", batch)
    worker = worker_process()
    total = len(keys) * per_key
    assert await sink.wait_for(lambda: len(sink.of("ko")) >= total, 40), worker.log()
    bad, seen = inversions(sink, "ko")
    assert bad == 0, {k: v for k, v in seen.items() if v != sorted(v)}
    assert all(v == list(range(per_key)) for v in seen.values())


async def test_a_retried_job_lets_the_later_jobs_of_its_key_go(
    stack: Stack, sink: Sink, worker_process: Any
) -> None:
    await stack.topic("kr", 100, retry=fast_retry(attempts=5, base_s=0.5))
    flaky = sink.behaviour["kr-flaky"]
    flaky.fail_first = 1  # the first job's first attempt fails, after 0.3 s
    flaky.delay_s = 0.3
    batch = [
        {"url": sink.url("kr-flaky" if n == 0 else "kr"), "key": "k", "body": {"k": "k", "n": n}}
        for n in range(5)
    ]
    ids = await stack.enqueue("kr", batch)
    worker = worker_process()
    assert await sink.wait_for(lambda: len(sink.deliveries) >= 5, 20), worker.log()
    order = [orjson.loads(d.body)["n"] for d in sorted(sink.deliveries, key=lambda d: d.at)]
    assert order == [1, 2, 3, 4, 0]  # in order, but for the retried one, which came last
    assert sink.attempts[ids[0]] == 2
    # ...and no later job of its key went while its first attempt was in flight.
    failed_at = sink.first_attempt_at[ids[0]] + 0.3
    assert all(d.at >= failed_at for d in sink.deliveries), (failed_at, order)
