"""Callbacks: after a job's final outcome (delivered, or dead), one job to its callback URL.

The callback is an ordinary job (docs/concepts/attempts.md): put in the same group and priority
as the job it tells of, so it spends that topic's quota, is signed with its secret (Standard
Webhooks), checked by the SSRF guard when pushed, retried with its policy and dead-lettered
like any job. It carries ``callback_of`` and never has a callback itself.

Exactly one per final outcome: the callback is put with the idempotency key
``emq-callback:<job id>``, whose marker lives in the group with the queue (the check and the
append are one atomic step, :mod:`adapters.redis_queue.producer`), and the job is marked
finished only after the put is written (:mod:`worker.outcomes`). A worker that dies between
the final outcome and the put leaves the job unfinished: its next owner pushes it again from
the checkpoint and puts the callback then; one that dies after the put leaves a marker that
makes the next put a duplicate. (A job is final once: its callback names the first final
outcome written; a redelivery, or a job delivered again after a crash, makes none.)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

from emq.core.attempts import CALLBACK_KEY_PREFIX, callback_body
from emq.core.interfaces import PushResult, PutItem, PutResult
from emq.core.job import Job, Method
from emq.core.jobs import placed_job_id
from emq.core.model import Envelope, Topic
from worker.groups import Buffered, GroupState


class Puts(Protocol):
    async def put(self, items: Sequence[PutItem]) -> list[PutResult]: ...


def callback_url(topic: Topic, job: dict[str, Any], outcome: str) -> str | None:
    """Where ``job``'s ``outcome`` is told (None: nowhere): its own URLs, then its topic's."""
    if job.get("callback_of"):
        return None
    own = job.get("callback_url")  # ('' : none, not even the topic's: a redelivery's)
    if outcome == "dead":
        url = job.get("failure_callback_url")
        if url is None:
            url = topic.failure_callback_url or (own if own is not None else topic.callback_url)
        return str(url) if url else None
    url = own if own is not None else topic.callback_url
    return str(url) if url else None


def callback_item(
    group: GroupState,
    item: Buffered,
    url: str,
    outcome: str,
    attempts: int,
    status: int | None,
    error: str | None,
    result: PushResult | None,
) -> PutItem:
    """The callback job of ``item``'s final ``outcome``, to put in its group."""
    job_id = item.job_id()
    topic = group.topic.topic
    excerpt = None
    if topic.response_excerpt_bytes and result is not None and result.meta is not None:
        kept = result.meta[3]
        excerpt = None if kept is None else kept.decode("utf-8", "replace")
    body = callback_body(job_id, topic.ref.topic, outcome, status, attempts, error, excerpt)
    now_ms = int(time.time() * 1000)
    priority = item.queue.priority
    callback_id = placed_job_id(now_ms, group.ref.index, priority)
    job = Job(
        url,
        Method.POST,
        {"Content-Type": "application/json"},
        body,
        priority,
        callback_of=job_id,
    )
    payload = Envelope(callback_id, job, now_ms).encode()
    return PutItem(item.queue, callback_id, payload, idempotency_key=CALLBACK_KEY_PREFIX + job_id)
