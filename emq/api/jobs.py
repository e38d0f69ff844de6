"""``GET /v1/tenants/{t}/topics/{topic}/jobs/{id}``: one job's state, and why it waits.

The answer is ``{"id", "topic", "state", "reason", ...}`` (docs/concepts/job-status.md). It is built
from :class:`~emq.core.jobs.JobFacts` (one Redis round trip) and the topic's configuration:

* exact: ``delayed`` (its due time), ``retry_wait``/``delivered``/``dead`` (the worker's record
  of the outcome, while it is kept), ``paused``, and which of queued/buffered/in flight it is as
  of the owner's last snapshot (at most about a second old);
* estimates: ``position`` (exact up to 10 000 jobs of its own queue, plus the higher
  priorities' backlog, which later high jobs may still overtake), ``eta_s`` (the position at the
  group's share of the quota, or at its endpoint's pace if slower, after a hold; none while the
  endpoint is disabled: nothing says when it will be re-enabled), and the reason of a buffered
  or queued job (the snapshot's).

A job whose endpoint is not open (``worker.endpoints``: adaptive pacing, a ``Retry-After``
hold, auto-disable) says so: ``endpoint_limited``, ``endpoint_held`` (with ``until``) or
``endpoint_disabled``, and a job parked in its owner's memory for its endpoint is ``buffered``
(it was taken from the buffer but not sent).
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import Any

from emq.core.endpoints import endpoint_of
from emq.core.errors import NotFound
from emq.core.interfaces import Offset
from emq.core.jobs import (
    EndpointWait,
    GroupSnapshot,
    JobFacts,
    JobPlace,
    JobRecord,
    JobStore,
    job_place,
)
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
    endpoint = _endpoint_wait(facts, snap)
    out: dict[str, Any]
    if queue is not None and _le(offset, queue.fetched):
        head = queue.buffer_head
        in_buffer = head is not None and Offset.parse(offset) >= Offset.parse(head)
        if in_buffer or (endpoint is not None and _parked(endpoint[1], place, offset)):
            out = {"state": "buffered", "worker": snap.worker if snap else None}
        else:
            out = {"state": "in_flight", "worker": snap.worker if snap else None, "reason": None}
            return out
    else:
        out = {
            "state": "queued",
            "position": facts.ahead,
            "position_exact": facts.ahead_exact,
            "eta_s": _eta_s(topic, facts.ahead, endpoint[1] if endpoint else None, now_ms),
        }
    out["reason"] = _why(topic, place, snap, now_ms, endpoint)
    return out


def _endpoint_wait(facts: JobFacts, snap: GroupSnapshot | None) -> tuple[str, EndpointWait] | None:
    """The job's endpoint, if its owner's snapshot says it is not open."""
    if snap is None or not snap.endpoints or facts.url is None:
        return None
    name = endpoint_of(facts.url)
    wait = snap.endpoints.get(name)
    return (name, wait) if wait is not None else None


def _parked(wait: EndpointWait, place: JobPlace, offset: str) -> bool:
    """Fetched, not in the buffer, and at or after the oldest job parked on its endpoint."""
    oldest = wait.parked.get(place.priority.value)
    return oldest is not None and Offset.parse(offset) >= Offset.parse(oldest)


def _eta_s(topic: Topic, ahead: int, wait: EndpointWait | None, now_ms: int) -> float | None:
    """The position at the group's share of the quota, or at the endpoint's pace when slower
    (after its hold); None while the endpoint is disabled (no one can say until when)."""
    rate = topic.qps / topic.groups
    start_s = 0.0
    if wait is not None:
        if wait.state == "disabled":
            return None
        if wait.state == "held" and wait.until_ms is not None:
            start_s = max(0.0, (wait.until_ms - now_ms) / 1000)
        if wait.rate_qps > 0:
            rate = min(rate, wait.rate_qps)
    return round(start_s + ahead / rate, 1) if rate > 0 else None


def _why(
    topic: Topic,
    place: JobPlace,
    snap: GroupSnapshot | None,
    now_ms: int,
    endpoint: tuple[str, EndpointWait] | None = None,
) -> dict[str, Any] | None:
    if topic.paused:
        return _reason("paused", f"topic {topic.ref.topic} is paused")
    if endpoint is not None and endpoint[1].state != "open":
        return _endpoint_reason(*endpoint)
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


def _endpoint_reason(name: str, wait: EndpointWait) -> dict[str, Any]:
    if wait.state == "disabled":
        detail = f"endpoint {name} is disabled until an operator re-enables it"
        return _reason("endpoint_disabled", detail)
    if wait.state == "held":
        detail = f"endpoint {name} asked to wait (Retry-After)"
        return _reason("endpoint_held", detail, wait.until_ms)
    detail = f"endpoint {name} is paced at {wait.rate_qps:g}/s (it answered 429/503 or slowly)"
    return _reason("endpoint_limited", detail)


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
