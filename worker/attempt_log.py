"""What a flush of the job log adds for the attempt log (emq.core.attempts): each outcome's
attempt, its search index entry, and the delivered jobs a topic keeps for redeliveries.

Built at flush time, never per push: an outcome is a tuple appended by :mod:`worker.joblog`,
and a delivery's attempt is formatted here from that tuple (its answer's
:attr:`~emq.core.interfaces.PushResult.meta`) in a few hundred nanoseconds.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, NamedTuple

import orjson

from emq.core.attempts import AttemptWrite, IndexWrite, kind_of
from emq.core.interfaces import PushResult
from emq.core.jobs import JobRecord
from emq.core.model import QueueRef, Topic, TopicRef
from worker.groups import Buffered, GroupState

_HEADER_NAMES = ("retry-after", "content-type", "content-length")
# A header value that needs no JSON escaping (printable ASCII without '"' and '\\')
_PLAIN = re.compile(rb"[ !#-\[\]-~]*\Z")
# The common attempt, formatted directly (8x cheaper than a dict and orjson): an answer with a
# Content-Length, perhaps a plain Content-Type, no Retry-After, no excerpt.
_ANSWERED = b'{"n":%d,"s":%d,"d":%d,"st":%d,"h":{"content-length":"%s"}}'
_TYPED = b'{"n":%d,"s":%d,"d":%d,"st":%d,"h":{"content-type":"%s","content-length":"%s"}}'
# A delivery's job record with its attempt (emq.core.jobs.JobRecord: ``d``, ``h``), formatted
# directly: one per delivered job.
_DELIVERED = b'{"s":"delivered","at":%d,"n":%d,"st":%d,"lat":%d,"d":%d,"h":{"content-length":"%s"}}'
_DELIVERED_TYPED = (
    b'{"s":"delivered","at":%d,"n":%d,"st":%d,"lat":%d,"d":%d,'
    b'"h":{"content-type":"%s","content-length":"%s"}}'
)
_NAMES: dict[TopicRef, str] = {}  # str(TopicRef), made once per topic
MAX_NAMES = 100_000


class Writes(NamedTuple):
    attempts: list[AttemptWrite]
    index: list[IndexWrite]
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
    meta = result.meta
    if result.status and meta is not None and meta[0] is None and meta[3] is None:
        ctype, clen = meta[1], meta[2]
        if clen is not None and clen.isdigit():
            if ctype is None:
                return _ANSWERED % (n, end_ms - duration, duration, result.status, clen)
            if _PLAIN.match(ctype):
                return _TYPED % (n, end_ms - duration, duration, result.status, ctype, clen)
    d = {"n": n, "s": end_ms - duration, "d": duration}
    if result.status:
        d["st"] = result.status
    else:
        d["k"] = kind_of(0, result.error)
        if result.error:
            d["e"] = result.error
    _answer(d, meta)
    return orjson.dumps(d)


def delivered_record(r: tuple[Any, ...]) -> bytes:
    """The job record of a delivery ``(id, at, n, status, latency, result, ...)``, with its
    attempt's duration and headers: the attempt of a delivery needs no write of its own."""
    _, at_ms, n, status, latency, result = r[:6]
    duration = int(result.elapsed_s * 1000)
    meta = result.meta
    if meta is not None and meta[0] is None:
        ctype, clen = meta[1], meta[2]
        if clen is not None and clen.isdigit():
            if ctype is None:
                return _DELIVERED % (at_ms, n, status, latency, duration, clen)
            if _PLAIN.match(ctype):
                return _DELIVERED_TYPED % (at_ms, n, status, latency, duration, ctype, clen)
    d: dict[str, Any] = {"s": "delivered", "at": at_ms, "n": n, "st": status, "lat": latency}
    d["d"] = duration
    _answer(d, meta)
    d.pop("x", None)  # (an excerpt goes to the attempt log, within its budget)
    d.setdefault("h", {})
    return orjson.dumps(d)


def _name(ref: TopicRef) -> str:
    name = _NAMES.get(ref)
    if name is None:
        if len(_NAMES) >= MAX_NAMES:
            _NAMES.clear()
        name = _NAMES[ref] = str(ref)
    return name


def _kept(item: Buffered, attempts: int) -> bytes | None:
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
    index: list[IndexWrite] = []
    kept: list[tuple[QueueRef, int, bytes]] = []
    add_attempt, add_index = attempts.append, index.append
    names: dict[int, tuple[Topic, str]] = {}  # by id(TopicState): alive while the batch is
    for r in batch:
        if len(r) != 8 or r[5] is None:
            continue  # (a JobRecord, or a delivery told without its answer)
        job_id, at_ms, n, _, _, result, group, item = r
        named = names.get(id(group.topic))
        if named is None:
            topic = group.topic.topic
            named = names[id(group.topic)] = (topic, _name(topic.ref))
        topic, name = named
        if topic.response_excerpt_bytes or topic.keep_delivered_s:
            # Its own attempt: the excerpt (the budget counts it), or kept past its record for
            # a redelivery; otherwise its record holds it (delivered_record).
            add_attempt((job_id, n, encode_attempt(n, at_ms, result, None)))
        job = item.job_dict()
        add_index((name, job_id, "delivered", at_ms, job.get("key"), job.get("idempotency_key")))
        if topic.keep_delivered_s and not job.get("callback_of"):
            payload = _kept(item, n)
            if payload is not None:
                kept.append((item.queue, topic.keep_delivered_s * 1000, payload))
    for record, result, group, item in more:
        if not record.job_id:
            continue
        n, at_ms = record.attempt, record.at_ms
        add_attempt((record.job_id, n, encode_attempt(n, at_ms, result, record.error)))
        job = item.job_dict()
        name = _name(group.topic.topic.ref)
        key, idem = job.get("key"), job.get("idempotency_key")
        add_index((name, record.job_id, record.state, at_ms, key, idem))
    return Writes(attempts, index, kept)
