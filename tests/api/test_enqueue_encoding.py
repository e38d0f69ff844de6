"""The API's envelope encoding (orjson) is the core's ``Envelope.encode`` document."""

from __future__ import annotations

import json

import pytest

from emq.api.enqueue import encode_envelope, parse_body
from emq.core.errors import InvalidInput, PayloadTooLarge
from emq.core.model import Envelope, JobLimits

JOBS = [
    {"url": "https://example.com/hook"},
    {"url": "https://example.com/hook", "body": {"order": 12345, "status": "paid"}},
    {
        "url": "https://example.com/hook?q=1",
        "method": "PUT",
        "headers": {"X-Trace": "abc", "Content-Type": "text/plain"},
        "body": 'naïve ☃ \u2028 "quoted" \\ tab\t',
        "priority": "high",
        "key": "customer-ü",
        "idempotency_key": "idem-1",
        "delay_s": 2.5,
    },
]


@pytest.mark.parametrize("raw", JOBS)
def test_the_same_document_as_envelope_encode(raw: dict[str, object]) -> None:
    job = parse_body(raw, JobLimits())[0]
    fast = encode_envelope("msg_0123", job, 1_700_000_000_123)
    core = Envelope("msg_0123", job, 1_700_000_000_123).encode()
    assert json.loads(fast) == json.loads(core)
    assert Envelope.decode(fast) == Envelope("msg_0123", job, 1_700_000_000_123)


@pytest.mark.parametrize(
    "body",
    [
        {"order": 12345, "status": "paid"},
        [1, 2.5, 1e-07, 1e16, None, True, {"é": '☃ \u2028 "q" \\'}],
        {"n": float("nan"), "i": 10**30, "e": {}, "l": []},
    ],
)
def test_an_object_body_is_the_standard_librarys_compact_json(body: object) -> None:
    """The encoder made once gives the text ``json.dumps`` gave (what the endpoint receives)."""
    job = parse_body({"url": "https://example.com/hook", "body": body}, JobLimits())[0]
    assert job.body == json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    assert job.headers == {"Content-Type": "application/json"}


@pytest.mark.parametrize(("body", "kind"), [(1, "int"), (2.5, "float"), (True, "boolean")])
def test_a_body_of_another_type_is_named(body: object, kind: str) -> None:
    raw = {"jobs": [{"url": "https://example.com/hook"}, {"url": "https://e.com/", "body": body}]}
    with pytest.raises(InvalidInput) as e:
        parse_body(raw, JobLimits())
    assert e.value.field == "jobs[1].body"
    assert str(e.value) == f"jobs[1].body: must be a string, object or array, got {kind}"


@pytest.mark.parametrize("char", ["a", "é", "☃"])
def test_a_body_is_measured_in_utf8_bytes(char: str) -> None:
    limits = JobLimits(max_body_bytes=60)
    fits = char * (60 // len(char.encode()))
    assert parse_body({"url": "https://e.com/", "body": fits}, limits)[0].body == fits
    with pytest.raises(PayloadTooLarge):
        parse_body({"url": "https://e.com/", "body": fits + char}, limits)
    with pytest.raises(PayloadTooLarge):  # an object body, measured once encoded
        parse_body({"url": "https://e.com/", "body": {"k": fits}}, limits)
