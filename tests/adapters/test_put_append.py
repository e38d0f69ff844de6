"""A put's APPEND script: the payloads of a batch travel as one argument with their (stream,
length) pairs; each job must come back byte for byte, in order, on its own queue."""

from __future__ import annotations

import random

from emq.core.interfaces import ZERO_OFFSET, PutItem
from emq.core.model import Namespace, Priority, TopicRef
from tests.adapters.conftest import Subject


async def test_a_batch_over_many_queues_reads_back_byte_for_byte(redis_subject: Subject) -> None:
    backend = redis_subject.backend
    topic = TopicRef(Namespace.ONLINE, "acme", "append")
    queues = [topic.group(g).queue(p) for g in range(3) for p in (Priority.HIGH, Priority.LOW)]
    rng = random.Random(11)
    odd = [b"", b",", b":", b"1:2,3:4", b"\x00\xff", "naïve ☃ \u2028".encode(), b"%d+"]
    items = []
    for n in range(300):
        payload = odd[n % len(odd)] + bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
        items.append(PutItem(rng.choice(queues), f"j{n}", payload))
    items.append(PutItem(queues[0], "big", b"x" * 300_000))
    results = await backend.put(items)
    assert [r.job_id for r in results] == [i.job_id for i in items]
    read = await backend.read(dict.fromkeys(queues, ZERO_OFFSET), 1000)
    for q in queues:
        sent = [i for i in items if i.queue == q]
        got = read[q]
        assert [e.payload for e in got] == [i.payload for i in sent]
        by_id = {r.job_id: r.offset for r in results}
        assert [e.offset for e in got] == [by_id[i.job_id] for i in sent]
