"""Keyed throughput on real Redis, a real worker and a real sink (issue 12).

A key carries one job at a time (worker.keys), so a group may deliver at most its keys / the
endpoint's round trip; with a sink answering in about a millisecond and three keys per group
that is far above the group's quota, so every group must run at its quota, with a backlog of
mixed priorities larger than the jobs the dispatcher parks (some are held at their buffers'
heads): the next job of a key goes as soon as the previous one is done.
"""

from __future__ import annotations

import random
import statistics
import time
from collections import defaultdict
from typing import Any

import orjson

from emq.api.enqueue import jump_hash
from tests.worker.conftest import Sink, Stack


def keys_per_group(groups: int, per_group: int) -> list[str]:
    keys: dict[int, list[str]] = defaultdict(list)
    for i in range(10_000):
        g = jump_hash(f"k{i}", groups)
        if len(keys[g]) < per_group:
            keys[g].append(f"k{i}")
    return [k for ks in keys.values() for k in ks]


async def test_a_keyed_topic_runs_at_its_quota_not_at_the_loops_pace(
    stack: Stack, sink: Sink, worker_process: Any
) -> None:
    await stack.topic("kt", 600)  # four groups of 150 QPS
    groups = stack.topics["kt"].groups
    keys = keys_per_group(groups, 3)
    rng = random.Random(12)
    per_key = 150  # 450 a group: more than it parks (300), three seconds of its quota
    batch = [
        {
            "url": sink.url("kt"),
            "key": k,
            "priority": rng.choice(("high", "medium", "medium", "low", "low")),
            "body": {"k": k, "n": n},
        }
        for n in range(per_key)
        for k in keys
    ]
    await stack.enqueue("kt", batch)
    worker = worker_process()
    total = len(keys) * per_key
    assert await sink.wait_for(lambda: len(sink.of("kt")) >= total, 30), (
        len(sink.of("kt")),
        worker.log(),
    )
    per_group: dict[int, list[float]] = defaultdict(list)
    for d in sink.of("kt"):
        per_group[jump_hash(orjson.loads(d.body)["k"], groups)].append(d.at)
    rates = {}
    for g, times in per_group.items():
        times.sort()
        rates[g] = round((len(times) - 1) / (times[-1] - times[0]), 1)
    assert all(r >= 0.9 * 150 for r in rates.values()), rates


async def test_highs_of_busy_keys_pass_their_parked_lows_and_never_stall_the_group(
    stack: Stack, sink: Sink, worker_process: Any
) -> None:
    """Each group parks its limit of lows and mediums behind three keys in flight; then highs
    of the same keys arrive, more than a dispatch grants at once. Each high parks ahead of its
    key's lows (it goes as soon as its key is free), and a high held at its buffer's head never
    stops the group (its key's next job may be a low)."""
    await stack.topic("kh", 600)
    groups = stack.topics["kh"].groups
    keys = keys_per_group(groups, 3)
    per_key = 150
    backlog = [
        {"url": sink.url("kh"), "key": k, "priority": p, "body": {"k": k, "p": p}}
        for n in range(per_key)
        for k in keys
        for p in (("low", "medium")[n % 2],)
    ]
    await stack.enqueue("kh", backlog)
    worker = worker_process()
    assert await sink.wait_for(lambda: len(sink.of("kh")) >= 200, 20), worker.log()
    highs = [
        {"url": sink.url("kh"), "key": k, "priority": "high", "body": {"k": k, "t": time.time()}}
        for _ in range(10)
        for k in keys
    ]
    await stack.enqueue("kh", highs)
    total = len(backlog) + len(highs)
    assert await sink.wait_for(lambda: len(sink.of("kh")) >= total, 30), (
        len(sink.of("kh")),
        worker.log(),
    )
    waits = [d.at - body["t"] for d in sink.of("kh") if "t" in (body := orjson.loads(d.body))]
    assert statistics.median(waits) < 1.0, sorted(waits)
