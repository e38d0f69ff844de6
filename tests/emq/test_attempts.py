"""The attempt log's pure parts: outcome kinds from the push clients' words, the stored form
of an attempt, the search cursor bound to its topic, windows within the retention, and the
callback's body."""

from __future__ import annotations

import orjson
import pytest

from emq.core.attempts import (
    Attempt,
    callback_body,
    check_window,
    decode_cursor,
    encode_cursor,
    kind_of,
)
from emq.core.errors import InvalidInput


@pytest.mark.parametrize(
    ("status", "error", "kind"),
    [
        (503, "HTTP 503", "http"),
        (0, "timed out", "timeout"),
        (0, "cannot connect to 127.0.0.1:9: Connection refused", "refused"),
        (0, "cannot connect to x.example:443: [SSL: CERTIFICATE_VERIFY_FAILED]", "tls"),
        (0, "ConnectionLost: connection closed before the answer was complete", "reset"),
        (0, "ConnectionResetError: [Errno 104] Connection reset by peer", "reset"),
        (0, "BadResponse: not an HTTP/1.1 response: invalid constant string", "protocol"),
        (0, "cannot connect to nowhere.invalid:80: Name or service not known", "connect"),
        (0, "RuntimeError: boom", "error"),
        (0, None, "error"),
    ],
)
def test_the_kind_of_an_outcome(status: int, error: str | None, kind: str) -> None:
    assert kind_of(status, error) == kind


@pytest.mark.parametrize(
    "attempt",
    [
        Attempt(1, 1_700_000_000_000, 12, 200, "http", None, {"content-type": "text/plain"}),
        Attempt(2, 1_700_000_000_000, 5000, 0, "timeout", "timed out"),
        Attempt(3, 1_700_000_000_000, 3, 502, "http", None, None, 'bad "gateway"\n\u00e9'),
    ],
)
def test_an_attempt_reads_back_as_stored(attempt: Attempt) -> None:
    assert Attempt.decode(attempt.encode()) == attempt
    shown = attempt.to_dict()
    assert shown["attempt"] == attempt.n and shown["outcome"] == attempt.kind
    assert ("response_excerpt" in shown) == (attempt.excerpt is not None)


def test_a_cursor_is_bound_to_its_topic() -> None:
    cursor = encode_cursor("online/acme/a", 1_700_000_000_123, "msg_x")
    assert decode_cursor("online/acme/a", cursor) == (1_700_000_000_123, "msg_x")
    with pytest.raises(InvalidInput, match="another topic") as e:
        decode_cursor("online/acme/b", cursor)
    assert e.value.field == "cursor"
    for garbage in ("!!", "bm90IGpzb24", encode_cursor("online/acme/a", 1, "x")[:-3]):
        with pytest.raises(InvalidInput):
            decode_cursor("online/acme/a", garbage)


def test_a_window_must_lie_within_the_retention() -> None:
    now = 1_700_000_000_000
    check_window(now - 500_000, now, now, 600)
    check_window(None, None, now, 600)
    with pytest.raises(InvalidInput, match="older than the retention"):
        check_window(now - 700_000, None, now, 600)
    with pytest.raises(InvalidInput, match="before since") as e:
        check_window(now - 1000, now - 2000, now, 600)
    assert e.value.field == "until"
    with pytest.raises(InvalidInput, match="nothing is retained"):
        check_window(None, None, now, 0)


def test_a_callback_body_says_the_outcome() -> None:
    body = orjson.loads(callback_body("msg_a", "orders", "dead", 503, 8, "HTTP 503", None))
    assert body == {
        "type": "job.dead",
        "job_id": "msg_a",
        "topic": "orders",
        "outcome": "dead",
        "status": 503,
        "attempts": 8,
        "error": "HTTP 503",
    }
    told = orjson.loads(callback_body("msg_b", "orders", "delivered", 200, 1, None, "ok"))
    assert told["response_excerpt"] == "ok" and "error" not in told
