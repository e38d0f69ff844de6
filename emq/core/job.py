"""The job: an HTTP request to deliver, its size limits, its id, and its stored envelope.

``Job.parse`` validates what a tenant sends with the API's schema (:mod:`emq.core.schema`,
imported when first needed), then ``Job.checked`` runs the checks a schema cannot express
(sendability, configurable sizes, reserved and repeated headers); both raise
:class:`~emq.core.errors.InvalidInput` naming the field. :class:`Envelope` is a job as stored in
a queue; :class:`Delivery` is what the worker's hot path reads off it. (Where a job is and what
happened to it: :mod:`emq.core.jobs`.) Nothing here does I/O.
"""

from __future__ import annotations

import enum
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from emq.core.errors import InvalidInput, PayloadTooLarge
from emq.core.outbound import check_text, push_url, utf8
from emq.core.refs import Priority


class Method(enum.StrEnum):
    GET = "GET"
    POST = "POST"
    PUT = "PUT"
    PATCH = "PATCH"
    DELETE = "DELETE"
    HEAD = "HEAD"
    OPTIONS = "OPTIONS"


# Headers a job may not set: hop-by-hop ones the client manages, and the signature headers the
# worker adds (a tenant must not be able to forge or pre-empt them).
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "proxy-connection",
        "proxy-authorization",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    }
)


@dataclass(frozen=True, slots=True)
class JobLimits:
    """Size limits applied when parsing a job; exceeding one is ``PayloadTooLarge`` (413).

    They are configurable, so they are checked here rather than by the schema (which states the
    defaults); limits that are not sizes (``key`` 1-256 characters, ``delay_s``) are the schema's.
    """

    max_body_bytes: int = 256 * 1024
    max_url_chars: int = 2048
    max_headers: int = 64
    max_header_bytes: int = 16 * 1024


@dataclass(frozen=True, slots=True)
class Job:
    """An HTTP request to deliver. ``key`` pins a group (order kept); ``delay_s`` defers it."""

    url: str
    method: Method = Method.POST
    headers: Mapping[str, str] = field(default_factory=dict)
    body: str | None = None
    priority: Priority = Priority.MEDIUM
    key: str | None = None
    idempotency_key: str | None = None
    delay_s: float = 0.0
    # Where its final outcome is told (docs/concepts/attempts.md): delivered to
    # ``callback_url``; dead to ``failure_callback_url`` (or ``callback_url``). A callback job
    # carries ``callback_of`` (the job it tells of) and never has a callback itself.
    callback_url: str | None = None
    failure_callback_url: str | None = None
    callback_of: str | None = None

    @classmethod
    def parse(cls, value: object, limits: JobLimits | None = None) -> Job:
        """Validate a job as sent by a tenant (decoded JSON) and build it."""
        from emq.core import schema  # here: pydantic loads on first parse

        return schema.validate(schema.JobIn, value).job(limits or _LIMITS)

    @classmethod
    def checked(
        cls,
        url: str,
        method: str,
        headers: Mapping[str, str] | None,
        body: object,
        priority: str,
        key: str | None,
        idempotency_key: str | None,
        delay_s: float,
        lim: JobLimits,
        callback_url: str | None = None,
        failure_callback_url: str | None = None,
    ) -> Job:
        """A job from fields the schema has validated, after the checks it cannot express:
        sendability, sizes (413), reserved and repeated headers, lone surrogates."""
        checked_headers = _check_headers(headers, lim) if headers else {}
        text, checked_headers = _check_body(body, checked_headers, lim)
        return cls(
            _check_url(url, lim),
            _METHODS[method],
            checked_headers,
            text,
            _PRIORITIES[priority],
            None if key is None else check_text(key, "key"),
            None if idempotency_key is None else check_text(idempotency_key, "idempotency_key"),
            delay_s,
            None if callback_url is None else _check_callback(callback_url, "callback_url", lim),
            None
            if failure_callback_url is None
            else _check_callback(failure_callback_url, "failure_callback_url", lim),
        )

    def to_dict(self) -> dict[str, Any]:
        """The compact form stored in a queue (defaults left out)."""
        d: dict[str, Any] = {"url": self.url}
        if self.method is not Method.POST:
            d["method"] = self.method.value
        if self.headers:
            d["headers"] = dict(self.headers)
        if self.body is not None:
            d["body"] = self.body
        if self.priority is not Priority.MEDIUM:
            d["priority"] = self.priority.value
        if self.key is not None:
            d["key"] = self.key
        if self.idempotency_key is not None:
            d["idempotency_key"] = self.idempotency_key
        if self.delay_s:
            d["delay_s"] = self.delay_s
        if self.callback_url is not None:
            d["callback_url"] = self.callback_url
        if self.failure_callback_url is not None:
            d["failure_callback_url"] = self.failure_callback_url
        if self.callback_of is not None:
            d["callback_of"] = self.callback_of
        return d


_LIMITS = JobLimits()


def _check_url(value: str, lim: JobLimits) -> str:
    if len(value) > lim.max_url_chars:
        raise PayloadTooLarge("url", f"is longer than {lim.max_url_chars} characters")
    push_url(value)  # the worker's own parse: what passes here can be sent
    return value


def _check_callback(value: str, name: str, lim: JobLimits) -> str:
    try:
        return _check_url(value, lim)
    except InvalidInput as e:
        raise InvalidInput(name, e.message) from None


def _check_headers(value: Mapping[str, str], lim: JobLimits) -> dict[str, str]:
    if len(value) > lim.max_headers:
        raise PayloadTooLarge("headers", f"has more than {lim.max_headers} headers")
    seen: set[str] = set()
    total = 0
    for name, val in value.items():
        # The schema has checked each name is a token and each value carries no control
        # character (what emq.core.outbound.check_header checks in the worker); left: what
        # depends on the other headers, and lone surrogates.
        lower = name.lower()
        if lower in RESERVED_HEADERS:
            raise InvalidInput(f"headers.{name}", "is set by EMQ and may not be given")
        if lower in seen:
            raise InvalidInput(
                f"headers.{name}", "is given twice (header names are case-insensitive)"
            )
        seen.add(lower)
        total += len(name) + (len(val) if val.isascii() else len(utf8(val, f"headers.{name}")))
    if total > lim.max_header_bytes:
        raise PayloadTooLarge("headers", f"are larger than {lim.max_header_bytes} bytes")
    return dict(value)


_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
# The same encoder's C core, made once: JSONEncoder.encode builds it anew on every call, which
# costs twice the encoding of a small body (a batch pays it per job). No circular check: decoded
# JSON has no cycles. The same text: the stdlib encodes in C with these arguments too.
_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_COMPACT_C = (
    _C_ENCODER(None, None, json.encoder.encode_basestring, None, ":", ",", False, False, True)
    if _C_ENCODER is not None
    else None
)


def _compact_json(value: object) -> str:
    if _COMPACT_C is None:  # not CPython
        return _COMPACT_JSON(value)
    return "".join(_COMPACT_C(value, 0))


def _check_body(
    value: object, headers: dict[str, str], lim: JobLimits
) -> tuple[str | None, dict[str, str]]:
    if value is None:
        return None, headers
    if type(value) is dict or isinstance(value, Mapping | list):  # dict first: no ABC check
        # A JSON body given as an object is sent as compact JSON, typed unless the tenant typed it.
        try:
            value = _compact_json(value)
        except RecursionError:
            raise InvalidInput("body", "is nested too deeply") from None
        if not (headers and any(h.lower() == "content-type" for h in headers)):
            headers = {**headers, "Content-Type": "application/json"}
    if not isinstance(value, str):
        raise InvalidInput("body", f"must be a string, object or array, got {type(value).__name__}")
    # ASCII text is as many bytes as characters: no copy to count them (a batch pays it per job)
    if (len(value) if value.isascii() else len(utf8(value, "body"))) > lim.max_body_bytes:
        raise PayloadTooLarge("body", f"is larger than {lim.max_body_bytes} bytes")
    return value, headers


_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def new_job_id(now_ms: int | None = None) -> str:
    """``msg_`` + 26 characters: 48 bits of milliseconds then 80 random bits (sortable by time)."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    n = (ms << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):  # Crockford base32 keeps the order of the number in the text
        n, r = divmod(n, 32)
        chars.append(_CROCKFORD[r])
    return "msg_" + "".join(reversed(chars))


class Delivery(NamedTuple):
    """What a worker needs to push a stored job, read from the envelope's decoded JSON without
    building its :class:`Job` (the worker's hot path; :meth:`Envelope.from_dict` for the rest)."""

    id: str
    url: str
    method: str
    headers: dict[str, str]
    body: str | None
    attempt: int
    signer: str | None = None  # an event's delivery: whose secret signs it (emq.core.subscriptions)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Delivery:
        j = d["job"]
        return cls(
            d["id"],
            j["url"],
            j.get("method", "POST"),
            j.get("headers", {}),
            j.get("body"),
            d.get("a", 0),
            d.get("s"),
        )


_METHODS = {m.value: m for m in Method}  # a dict lookup is 5x cheaper than Method(value)
_PRIORITIES = {p.value: p for p in Priority}


@dataclass(frozen=True, slots=True)
class Envelope:
    """A job as stored in a queue: its id, when it was accepted, and failed attempts so far.

    ``decode`` trusts its input (it was validated before it was stored) and does not re-validate.
    """

    id: str
    job: Job
    enqueued_ms: int
    attempt: int = 0
    signer: str | None = None  # ``s``: the subscription whose secret signs it (an event's)

    def encode(self) -> bytes:
        d = {"id": self.id, "t": self.enqueued_ms, "job": self.job.to_dict()}
        if self.attempt:
            d["a"] = self.attempt
        if self.signer is not None:
            d["s"] = self.signer
        return json.dumps(d, separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def decode(cls, raw: bytes | str) -> Envelope:
        return cls.from_dict(json.loads(raw))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Envelope:
        """From the decoded JSON of :meth:`encode` (the worker decodes with a faster parser)."""
        j = d["job"]
        job = Job(
            j["url"],
            _METHODS[j.get("method", "POST")],
            j.get("headers", {}),
            j.get("body"),
            _PRIORITIES[j.get("priority", "medium")],
            j.get("key"),
            j.get("idempotency_key"),
            j.get("delay_s", 0.0),
            j.get("callback_url"),
            j.get("failure_callback_url"),
            j.get("callback_of"),
        )
        return cls(d["id"], job, d["t"], d.get("a", 0), d.get("s"))
