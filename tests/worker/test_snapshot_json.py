"""The group snapshot a worker publishes every second is built directly as JSON (worker.joblog):
the same document as ``GroupSnapshot.to_dict()``, for every state a group can be in."""

from __future__ import annotations

import time

import orjson
import pytest

from emq.core.interfaces import Offset
from emq.core.model import Namespace, Topic, TopicRef
from worker.groups import Buffered, GroupState, TopicState
from worker.joblog import JobLog


def group(buffered: list[int], checkpoints: bool = False) -> GroupState:
    topic = TopicState(Topic(TopicRef(Namespace.ONLINE, "t", "orders"), 20, 1))
    g = GroupState(topic.ref.group(0), 1, topic, 20, [None, None, None])
    for i, (q, p) in enumerate(g.progress.items()):
        if checkpoints:
            p.fetched(Offset(1_700_000_000_000, i))
        for k in range(buffered[i]):
            g.filling()[i].append(Buffered(q, Offset(1_700_000_000_001, k), b"{}", 0.0, p))
    return g


@pytest.mark.parametrize(
    ("buffered", "spent", "full"),
    [
        ([0, 0, 0], False, False),  # no buffers at all
        ([2, 0, 5], False, False),
        ([0, 3, 0], True, False),  # its quota spent: quota_until set
        ([1, 1, 1], True, True),  # and its endpoint full
    ],
)
def test_the_direct_json_is_the_snapshot_document(
    buffered: list[int], spent: bool, full: bool
) -> None:
    g = group(buffered, checkpoints=spent)
    now = time.time()
    if not any(buffered):
        g.buffers = None
    if spent:
        assert g.counter.reserve(g.counter.available(now), now) > 0
    if full:
        g.topic.in_flight = g.topic.topic.endpoint_concurrency
    log = JobLog(None, "w1")
    want = log.snapshot(g, now).to_dict()
    assert orjson.loads(log.snapshot_json(g, now)) == want
    assert (want["qu"] is not None) == spent and want["ef"] == full
