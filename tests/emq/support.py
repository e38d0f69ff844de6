"""Helpers shared by the client and CLI tests."""

from __future__ import annotations

from emq.core.interfaces import ZERO_OFFSET, DeadLetter, QueueBackend
from emq.core.model import Namespace, Priority, TopicRef

JOB = {"url": "https://example.com/hook", "body": {"n": 1}}


async def dead_letter_everything(
    queues: QueueBackend, tenant: str, topic: str, groups: int = 1
) -> int:
    """Move every medium job of the topic to its DLQ, as a worker would after 8 failures."""
    ref = TopicRef(Namespace.ONLINE, tenant, topic)
    moved = 0
    for g in range(groups):
        group = ref.group(g)
        queue = group.queue(Priority.MEDIUM)
        await queues.claim(group, 1)
        entries = (await queues.read({queue: ZERO_OFFSET}, 1000)).get(queue, [])
        letters = [
            DeadLetter("", Priority.MEDIUM, e.payload, "HTTP 500", 500, 8, 1_700_000_000_000)
            for e in entries
        ]
        if letters:
            await queues.dead_letter(group, 1, letters)
        moved += len(letters)
    return moved
