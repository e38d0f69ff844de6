"""The API's envelope encoding (orjson) is the core's ``Envelope.encode`` document."""

from __future__ import annotations

import json

import pytest

from emq.api.enqueue import encode_envelope, parse_body
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
