"""Keyed groups under a backlog larger than the dispatcher parks, on real Redis, a real worker
and a real sink (issue 12): a job held at its buffer's head never stops its group, and a high
of a busy key goes before the key's parked lows (see worker.keys, worker.dispatch).
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from typing import Any

import orjson
import pytest

from emq.api.enqueue import jump_hash
from tests.worker.conftest import Sink, Stack

pytestmark = pytest.mark.serial  # judges how long highs wait: `make test` runs it alone


def keys_per_group(groups: int, per_group: int) -> list[str]:
    keys: dict[int, list[str]] = defaultdict(list)
    for i in range(10_000):
        g = jump_hash(f"k{i}", groups)
        if len(keys[g]) < per_group:
            keys[g].append(f"k{i}")
    return [k for ks in keys.values() for k in ks]


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
