"""What a flush of the job log adds for the attempt log (emq.core.attempts): each outcome's
attempt, its search index entry, and the delivered jobs a topic keeps for redeliveries.

Built at flush time, never per push: an outcome is a tuple appended by :mod:`worker.joblog`,
and a delivery's attempt is formatted here from that tuple (its answer's
:attr:`~emq.core.interfaces.PushResult.meta`) in a few hundred nanoseconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import orjson

from emq.core.attempts import AttemptWrite, IndexEntry, kind_of
from emq.core.interfaces import PushResult
from emq.core.jobs import JobRecord
from emq.core.model import QueueRef
from worker.groups import Buffered, GroupState

_HEADER_NAMES = ("retry-after", "content-type", "content-length")


class Writes(NamedTuple):
    attempts: list[AttemptWrite]
    index: list[IndexEntry]
    kept: list[tuple[QueueRef, int, bytes]]

    @property
    def empty(self) -> bool:
        return not (self.attempts or self.index or self.kept)


def _answer(d: dict[str, Any], meta: tuple[Any, ...] | None) -> None:
    if meta is None:
        return
    headers = {}
    for name, value in zip(_HEADER_NAMES, meta, strict=False):
        if value is not None:
            headers[name] = value.decode("latin-1")
    if headers:
        d["h"] = headers
    if meta[3] is not None:
        d["x"] = meta[3].decode("utf-8", "replace")


def encode_attempt(n: int, end_ms: int, result: PushResult | None, error: str | None) -> bytes:
    """The stored form of :class:`~emq.core.attempts.Attempt` (the same fields), built
    directly: one per delivered job."""
    if result is None:  # ended before any push (refused by the guard, unsendable)
        d: dict[str, Any] = {"n": n, "s": end_ms, "d": 0, "k": kind_of(0, error)}
        if error:
            d["e"] = error
        return orjson.dumps(d)
    duration = int(result.elapsed_s * 1000)
    d = {"n": n, "s": end_ms - duration, "d": duration}
    if result.status:
        d["st"] = result.status
    else:
        d["k"] = kind_of(0, result.error)
        if result.error:
            d["e"] = result.error
    _answer(d, result.meta)
    return orjson.dumps(d)


def _kept(group: GroupState, item: Buffered, attempts: int) -> bytes | None:
    """The envelope a redelivery sends again: as delivered, its attempts counted (the next
    one is its attempt ``attempts + 1``, ``webhook-id`` unchanged)."""
    try:
        d = orjson.loads(item.payload)
    except orjson.JSONDecodeError:
        return None
    d["a"] = attempts
    job = d.get("job")
    if isinstance(job, dict):  # a redelivery tells no callback (its first delivery did)
        job["callback_url"] = job["failure_callback_url"] = ""
    return orjson.dumps(d)


def writes(
    batch: Sequence[tuple[Any, ...]],
    more: Sequence[tuple[JobRecord, PushResult | None, GroupState, Buffered]],
) -> Writes:
    """The attempt-log writes of a flush: ``batch`` the job log's pending entries (a delivery
    is ``(id, at, n, status, latency, result, group, item)``), ``more`` the retries and dead
    letters with their answers."""
    attempts: list[AttemptWrite] = []
    index: list[IndexEntry] = []
    kept: list[tuple[QueueRef, int, bytes]] = []
    names: dict[int, str] = {}  # str(TopicRef) by id(TopicState): once per topic per flush
    for r in batch:
        if len(r) != 8 or r[5] is None:
            continue  # (a JobRecord, or a delivery told without its answer)
        job_id, at_ms, n, _, _, result, group, item = r
        attempts.append((job_id, n, encode_attempt(n, at_ms, result, None)))
        state = group.topic
        name = names.get(id(state))
        if name is None:
            name = names[id(state)] = str(state.topic.ref)
        job = item.job_dict()
        index.append(
            IndexEntry(name, job_id, "delivered", at_ms, job.get("key"), job.get("idempotency_key"))
        )
        keep_s = state.topic.keep_delivered_s
        if keep_s and not job.get("callback_of"):
            payload = _kept(group, item, n)
            if payload is not None:
                kept.append((item.queue, keep_s * 1000, payload))
    for record, result, group, item in more:
        if not record.job_id:
            continue
        attempts.append(
            (
                record.job_id,
                record.attempt,
                encode_attempt(record.attempt, record.at_ms, result, record.error),
            )
        )
        job = item.job_dict()
        index.append(
            IndexEntry(
                str(group.topic.topic.ref),
                record.job_id,
                record.state,
                record.at_ms,
                job.get("key"),
                job.get("idempotency_key"),
            )
        )
    return Writes(attempts, index, kept)
