"""Every attempt on the record: the attempt log, the search over job records, callbacks and
redeliveries (docs/concepts/attempts.md).

* :class:`Attempt`: one push of a job (when it started, how long it took, what came back:
  a status code, or a transport failure of one :data:`KINDS`, with the detail), written by the
  worker in the same round trip as the job's record (:mod:`worker.joblog`) and kept as long as
  it (``EMQ_JOB_RECORD_TTL_S``), within a byte budget per namespace, oldest out first.
* :class:`Search`: the jobs of a topic whose records are retained, by their latest state, their
  ``key`` or ``idempotency_key``, in a time window, newest first, paged by an opaque cursor
  bound to the topic.
* :func:`callback_body`: what a job's callback says of its final outcome.

Pure: no I/O here; :class:`AttemptStore` is the seam the Redis adapter implements.
"""

from __future__ import annotations

import abc
import base64
import binascii
import hashlib
import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from emq.core.errors import InvalidInput

# What an attempt without an HTTP answer ended in. ``protocol``: bytes that are not an HTTP/1.1
# answer to the request; ``refused``: the connection was refused (or the SSRF guard refused
# the destination); ``error``: anything else.
KINDS = ("http", "timeout", "connect", "reset", "tls", "refused", "protocol", "error")
STATES = ("delivered", "retry_wait", "dead")  # a job record's states (emq.core.jobs.JobRecord)
SEARCH_MAX_LIMIT = 1000
SEARCH_DEFAULT_LIMIT = 50
CALLBACK_KEY_PREFIX = "emq-callback:"  # the idempotency key of a job's callback, + its id
# Response headers an attempt keeps (lower case, as recorded).
KEPT_HEADERS = ("retry-after", "content-type", "content-length")


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def kind_of(status: int, error: str | None) -> str:
    """The kind of an attempt's outcome from its status and its error text (the push clients
    say what failed in words: ``timed out``, ``cannot connect ... Connection refused``, ...)."""
    if status:
        return "http"
    text = (error or "").lower()
    if "timed out" in text or "timeout" in text:
        return "timeout"
    if "ssl" in text or "tls" in text or "certificate" in text:
        return "tls"
    if "refused" in text:
        return "refused"
    if "reset" in text or "connectionlost" in text or "closed before" in text:
        return "reset"
    if "badresponse" in text or "protocol" in text or "not an http" in text:
        return "protocol"
    if "connect" in text or "resolve" in text or "unreachable" in text:
        return "connect"
    return "error"


class Attempt(NamedTuple):
    """One push of a job: ``n`` its number (1 = the first), ``start_ms`` wall-clock epoch ms,
    ``duration_ms``, ``status`` (0: no HTTP answer), ``kind`` (:data:`KINDS`), ``detail`` the
    error, ``headers`` the :data:`KEPT_HEADERS` present, ``excerpt`` the body's start (as text,
    undecodable bytes replaced) when the topic keeps one."""

    n: int
    start_ms: int
    duration_ms: int
    status: int
    kind: str
    detail: str | None = None
    headers: dict[str, str] | None = None
    excerpt: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "attempt": self.n,
            "started_at_ms": self.start_ms,
            "duration_ms": self.duration_ms,
            "outcome": self.kind,
            "status": self.status or None,
        }
        if self.detail:
            d["detail"] = self.detail
        d["headers"] = self.headers or {}
        if self.excerpt is not None:
            d["response_excerpt"] = self.excerpt
        return d

    def encode(self) -> bytes:
        """The stored form (short names: one is kept per attempt)."""
        d: dict[str, Any] = {"n": self.n, "s": self.start_ms, "d": self.duration_ms}
        if self.status:
            d["st"] = self.status
        else:
            d["k"] = self.kind
        if self.detail:
            d["e"] = self.detail
        if self.headers:
            d["h"] = self.headers
        if self.excerpt is not None:
            d["x"] = self.excerpt
        return _dumps(d).encode()

    @classmethod
    def decode(cls, raw: bytes | str) -> Attempt:
        d = json.loads(raw)
        status = int(d.get("st", 0))
        return cls(
            int(d["n"]),
            int(d["s"]),
            int(d["d"]),
            status,
            "http" if status else str(d.get("k", "error")),
            d.get("e"),
            d.get("h"),
            d.get("x"),
        )


def excerpt_text(body: bytes | None) -> str | None:
    """A body's kept bytes as text (UTF-8, undecodable bytes replaced)."""
    return None if body is None else body.decode("utf-8", "replace")


class IndexEntry(NamedTuple):
    """A job record's place in its topic's search indexes (written with the record; a named
    tuple: one is made per outcome)."""

    topic: str  # str(TopicRef)
    job_id: str
    state: str
    at_ms: int
    key: str | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class Search:
    """``GET .../topics/{topic}/jobs``: newest first, at most ``limit``; ``after`` is where the
    previous page stopped (from its cursor)."""

    state: str | None = None
    key: str | None = None
    idempotency_key: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    limit: int = SEARCH_DEFAULT_LIMIT
    after: tuple[int, str] | None = None  # (at_ms, job id) of the last job of the previous page


@dataclass(frozen=True, slots=True)
class Found:
    """One job a search found: its latest record."""

    job_id: str
    state: str
    at_ms: int
    attempts: int
    status: int | None
    error: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.job_id,
            "state": self.state,
            "at_ms": self.at_ms,
            "attempts": self.attempts,
            "status": self.status,
            "last_error": self.error,
        }


def _topic_tag(topic: str) -> str:
    return hashlib.sha256(topic.encode()).hexdigest()[:12]


def encode_cursor(topic: str, at_ms: int, job_id: str) -> str:
    """An opaque cursor: where a page stopped, bound to its topic."""
    raw = _dumps([_topic_tag(topic), at_ms, job_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(topic: str, text: str) -> tuple[int, str]:
    """``(at_ms, job id)`` of a cursor from :func:`encode_cursor` for ``topic``; a cursor that
    is not one, or one of another topic, is ``InvalidInput("cursor", ...)``."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        tag, at_ms, job_id = json.loads(raw)
        at_ms, job_id = int(at_ms), str(job_id)
    except (binascii.Error, ValueError, TypeError):
        raise InvalidInput("cursor", "is not a cursor this API gave") from None
    if tag != _topic_tag(topic):
        raise InvalidInput("cursor", "belongs to another topic's search")
    return at_ms, job_id


def check_window(
    since_ms: int | None, until_ms: int | None, now_ms: int, retention_s: int, name: str = "since"
) -> None:
    """A window must lie within what is retained and not end before it starts."""
    if since_ms is not None and until_ms is not None and until_ms < since_ms:
        raise InvalidInput("until", "is before since")
    oldest = now_ms - retention_s * 1000
    if retention_s <= 0:
        raise InvalidInput(name, "nothing is retained (the retention is 0)")
    if since_ms is not None and since_ms < oldest - 1000:
        raise InvalidInput(
            name, f"is older than the retention ({retention_s} s): those records are gone"
        )


def callback_body(
    job_id: str,
    topic: str,
    outcome: str,
    status: int | None,
    attempts: int,
    error: str | None,
    excerpt: str | None,
) -> str:
    """The JSON a callback job carries (its receiver verifies the Standard Webhooks
    signature with the topic's secret, as for any job)."""
    d: dict[str, Any] = {
        "type": "job." + outcome,
        "job_id": job_id,
        "topic": topic,
        "outcome": outcome,
        "status": status,
        "attempts": attempts,
    }
    if error:
        d["error"] = error
    if excerpt is not None:
        d["response_excerpt"] = excerpt
    return _dumps(d)


class AttemptStore(abc.ABC):
    """Reads of the attempt log and the search indexes (the worker writes them with its job
    records: :meth:`emq.core.jobs.JobStore.record`)."""

    ttl_s: int = 600

    @abc.abstractmethod
    async def attempts(self, job_id: str, most: int) -> list[Attempt]:
        """The recorded attempts of ``job_id``, oldest first (at most ``most``)."""

    @abc.abstractmethod
    async def belongs(self, topic: str, job_id: str) -> bool:
        """Whether ``job_id`` has a retained outcome in ``topic`` (a job's attempts are shown
        only through its own topic)."""

    @abc.abstractmethod
    async def search(self, topic: str, query: Search) -> tuple[list[Found], bool]:
        """Jobs of ``topic`` matching ``query``, newest first; True if there may be more."""

    @abc.abstractmethod
    async def trim(self, budget_bytes: int) -> int:
        """Drop the oldest attempts beyond ``budget_bytes``; returns the bytes dropped."""


AttemptWrite = tuple[str, int, bytes]  # (job id, attempt number, Attempt.encode())
# An IndexEntry as the worker writes it (a plain tuple: one per outcome)
IndexWrite = tuple[str, str, str, int, str | None, str | None]
