"""What the schedule fault tests share: a topic in the real config store, and the ticks whose
jobs are really stored in the topic's Redis queues (read back and decoded)."""

from __future__ import annotations

import time

from emq.core.interfaces import ConfigStore, QueueBackend
from emq.core.interfaces.queues import ZERO_OFFSET
from emq.core.job import Envelope
from emq.core.model import Namespace, Tenant, Topic, TopicRef
from emq.core.schedules import TICK_KEY_PREFIX

REF = TopicRef(Namespace.ONLINE, "acme", "cron")
JOB = {"url": "http://127.0.0.1:9/hook"}


async def make_topic(config: ConfigStore, groups: int = 2) -> Topic:
    await config.create_tenant(Tenant("acme", "Acme", "x", time.time()))
    topic = Topic(REF, 150 * groups, groups, secret="whsec_dGVzdHNlY3JldHRlc3RzZWNyZXQ=")
    await config.create_topic(topic)
    return topic


async def stored_ticks(queues: QueueBackend, topic: Topic, schedule_id: str) -> list[int]:
    """The tick of every job stored for ``schedule_id`` (a tick twice if it was stored twice)."""
    queue_refs = [q for g in topic.group_refs() for q in g.queues()]
    found = await queues.read(dict.fromkeys(queue_refs, ZERO_OFFSET), 100_000)
    prefix = f"{TICK_KEY_PREFIX}{schedule_id}:"
    ticks = []
    for entries in found.values():
        for entry in entries:
            key = Envelope.decode(entry.payload).job.idempotency_key or ""
            if key.startswith(prefix):
                ticks.append(int(key[len(prefix) :]))
    return sorted(ticks)


def assert_each_tick_once(ticks: list[int], step: int = 1) -> None:
    """No tick twice, none missing between the first and the last."""
    assert len(ticks) == len(set(ticks)), f"a tick stored twice: {ticks}"
    assert ticks == list(range(ticks[0], ticks[-1] + 1, step)), f"a tick missing: {ticks}"
