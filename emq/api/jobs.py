"""``GET /v1/tenants/{t}/topics/{topic}/jobs/{id}``: one job's state, and why it waits.

The answer is ``{"id", "topic", "state", "reason", ...}`` (README, "Job status"). It is built
from :class:`~emq.core.jobs.JobFacts` (one Redis round trip) and the topic's configuration:

* exact: ``delayed`` (its due time), ``retry_wait``/``delivered``/``dead`` (the worker's record
  of the outcome, while it is kept), ``paused``, and which of queued/buffered/in flight it is as
  of the owner's last snapshot (at most about a second old);
* estimates: ``position`` (exact up to 10 000 jobs of its own queue, plus the higher
  priorities' backlog, which later high jobs may still overtake), ``eta_s`` (the position at the
  group's share of the quota), and the reason of a buffered or queued job (the snapshot's).
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import Any

from emq.core.errors import NotFound
from emq.core.interfaces import Offset
from emq.core.jobs import GroupSnapshot, JobFacts, JobPlace, JobRecord, JobStore, job_place
from emq.core.model import Topic

SNAPSHOT_FRESH_MS = 3_000  # an owner's snapshot older than this says nothing any more
NO_OWNER_AFTER_MS = 5_000  # a job waiting this long in a group nobody reports on: no owner


def iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _reason(code: str, detail: str, until_ms: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"code": code, "detail": detail}
    if until_ms is not None:
        out["until"] = iso(until_ms)
    return out


async def job_status(store: JobStore, topic: Topic, job_id: str) -> dict[str, Any]:
    """The status document of ``job_id`` in ``topic``; NotFound if it is not (or no longer)
    known there."""
    place = job_place(job_id)
    if place is None or place.group_index >= topic.groups:
        raise NotFound(f"job {job_id} not found in topic {topic.ref}")
    facts = await store.facts(topic.ref.group(place.group_index), place, job_id)
    return describe(topic, job_id, place, facts, int(time.time() * 1000))


def describe(
    topic: Topic, job_id: str, place: JobPlace, facts: JobFacts, now_ms: int
) -> dict[str, Any]:
    """The status document from the facts (pure: the tests feed it facts)."""
    base: dict[str, Any] = {
        "id": job_id,
        "topic": topic.ref.topic,
        "priority": place.priority.value,
        "group": place.group_index,
        "enqueued_at": iso(place.enqueued_ms),
    }
    state = _state(topic, place, facts, now_ms)
    if state is None:
        raise NotFound(
            f"job {job_id} not found in topic {topic.ref} (finished jobs are kept for "
            "EMQ_JOB_RECORD_TTL_S)"
        )
    return base | state


def _state(topic: Topic, place: JobPlace, facts: JobFacts, now_ms: int) -> dict[str, Any] | None:
    record = facts.record
    finished = facts.offset is not None and _le(facts.offset, facts.committed)
    if record is not None and (record.state != "retry_wait" or facts.offset is None or finished):
        return _from_record(record, now_ms)
    if facts.offset is None:
        if facts.due_ms is not None:
            return {"state": "delayed", "until": iso(facts.due_ms), "reason": None}
        return None
    if finished:
        return None  # passed by the checkpoint, no record kept: nothing honest to say
    attempt = record.attempt if record is not None else 0
    return _waiting(topic, place, facts, now_ms) | {"attempt": attempt}


def _from_record(record: JobRecord, now_ms: int) -> dict[str, Any]:
    if record.state == "delivered":
        return {
            "state": "delivered",
            "reason": None,
            "delivered_at": iso(record.at_ms),
            "status": record.status,
            "latency_ms": record.latency_ms,
            "attempts": record.attempt,
        }
    if record.state == "dead":
        return {
            "state": "dead",
            "reason": _reason("dead", record.error or "failed"),
            "failed_at": iso(record.at_ms),
            "error": record.error,
            "status": record.status,
            "attempts": record.attempt,
        }
    nxt = record.next_ms
    if record.retry_after:
        reason = _reason("retry_after", "the endpoint asked to wait (Retry-After)", nxt)
    elif nxt is not None and nxt <= now_ms:
        reason = _reason("worker_backlog", "due; waiting for its owner to take it again")
    else:
        reason = _reason("backoff", "waiting for the next attempt (retry backoff)", nxt)
    return {
        "state": "retry_wait",
        "reason": reason,
        "attempt": record.attempt,
        "next_attempt_at": iso(nxt),
        "last_status": record.status,
        "last_error": record.error,
    }


def _waiting(topic: Topic, place: JobPlace, facts: JobFacts, now_ms: int) -> dict[str, Any]:
    """Queued in Redis, buffered in a worker or in flight: decided against the snapshot."""
    snap = facts.snapshot
    if snap is not None and now_ms - snap.at_ms > SNAPSHOT_FRESH_MS:
        snap = None
    queue = snap.queues.get(place.priority.value) if snap is not None else None
    offset = facts.offset or "0-0"
    out: dict[str, Any]
    if queue is not None and _le(offset, queue.fetched):
        head = queue.buffer_head
        if head is not None and Offset.parse(offset) >= Offset.parse(head):
            out = {"state": "buffered", "worker": snap.worker if snap else None}
        else:
            out = {"state": "in_flight", "worker": snap.worker if snap else None, "reason": None}
            return out
    else:
        group_qps = topic.qps / topic.groups
        out = {
            "state": "queued",
            "position": facts.ahead,
            "position_exact": facts.ahead_exact,
            "eta_s": round(facts.ahead / group_qps, 1) if group_qps > 0 else None,
        }
    out["reason"] = _why(topic, place, snap, now_ms)
    return out


def _why(
    topic: Topic, place: JobPlace, snap: GroupSnapshot | None, now_ms: int
) -> dict[str, Any] | None:
    if topic.paused:
        return _reason("paused", f"topic {topic.ref.topic} is paused")
    if snap is None:
        if now_ms - place.enqueued_ms > NO_OWNER_AFTER_MS:
            return _reason("no_owner", "no worker reports owning this job's group")
        return None
    if snap.quota_until_ms is not None:
        group_qps = topic.qps / topic.groups
        detail = f"the group's budget ({group_qps:g}/s) is spent"
        return _reason("quota", detail, _next_grant_ms(snap.quota_until_ms, group_qps, now_ms))
    if snap.endpoint_full:
        return _reason(
            "endpoint_concurrency",
            f"the endpoint has {topic.endpoint_concurrency} requests in flight (its limit)",
        )
    return _reason("worker_backlog", f"worker {snap.worker} has not reached it yet")


def _next_grant_ms(free_ms: int, group_qps: float, now_ms: int) -> int:
    """When the group's budget frees up next, from a snapshot that saw it spent until
    ``free_ms``: then, if that is still ahead; else the first of the grants that followed at
    the group's pace (one each ``1 / group_qps``) after ``now_ms``. A group held by its quota
    with jobs waiting stays held: the grant that freed went to the job at its head, and the
    next one frees a grant's interval later. (Answering the snapshot's time only while it was
    ahead said ``worker_backlog`` for most of every second of a 1 QPS group whose snapshot
    came just before its grant: both run once a second and stay in step, 15 s and more in
    tests/worker/test_job_status.py.)"""
    if free_ms > now_ms or group_qps <= 0:
        return free_ms
    step_ms = 1000 / group_qps
    return free_ms + int(math.ceil((now_ms - free_ms + 1) / step_ms) * step_ms)


def _le(a: str, b: str | None) -> bool:
    """Offset ``a`` at or below ``b`` (None: nothing)."""
    return b is not None and Offset.parse(a) <= Offset.parse(b)
