"""``release_deferred`` on every queue backend: the jobs a re-enabled endpoint deferred to the
delayed set become due at once; other endpoints' jobs, later ones and jobs put with a due time
of their own keep theirs."""

from __future__ import annotations

import time

from emq.core.interfaces import ZERO_OFFSET, PutItem, QueueBackend, Scheduled
from emq.core.model import Envelope, GroupRef, Job, Namespace, Priority, TopicRef

G = GroupRef(TopicRef(Namespace.ONLINE, "acme", "orders"), 0)


def _job(n: int, url: str) -> bytes:
    return Envelope(f"j{n}", Job(url), 0).encode()


async def test_a_re_enabled_endpoints_deferred_jobs_become_due_now(backend: QueueBackend) -> None:
    await backend.claim(G, 1)
    now = int(time.time() * 1000)
    soon = now + 60_000
    await backend.schedule(
        G,
        1,
        [
            Scheduled(Priority.MEDIUM, _job(1, "http://Down.example:8080/a"), soon),
            Scheduled(Priority.HIGH, _job(2, "http://down.example:8080/b?x"), soon - 5),
            Scheduled(Priority.MEDIUM, _job(3, "http://up.example:8080/a"), soon),
            Scheduled(Priority.MEDIUM, _job(4, "http://down.example:8080/c"), soon + 600_000),
            Scheduled(Priority.MEDIUM, _job(5, "https://down.example/d"), soon),  # :443
        ],
    )
    own = _job(6, "http://down.example:8080/e")  # put with delay_s: its due time is its own
    await backend.put([PutItem(G.queue(Priority.LOW), "j6", own, due_ms=soon)])
    assert await backend.release_deferred(G, "down.example:8080", soon + 1, now) == 2
    assert await backend.promote_due(G, now, 100) == 2
    got = await backend.read(dict.fromkeys(G.queues(), ZERO_OFFSET), 10)
    payloads = sorted(e.payload for entries in got.values() for e in entries)
    assert payloads == sorted(
        [_job(1, "http://Down.example:8080/a"), _job(2, "http://down.example:8080/b?x")]
    )
    assert await backend.delayed([G]) == [4]
    assert await backend.release_deferred(G, "nobody.example:80", soon + 1, now) == 0
