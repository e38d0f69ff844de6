"""Request bodies decoded by orjson where it agrees with ``json.loads``, by ``json.loads``
elsewhere: every body gives the same value, or the same error, as before."""

from __future__ import annotations

import json
import random

import pytest

from emq.api.jsonbody import decode, encode

BODIES = [
    b'{"jobs": [{"url": "https://example.com/hook", "body": {"order": 1}}]}',
    b' \t\r\n{"a": [1, 2.5, -0, -0.0, 1e5, 1E+2, true, false, null, ""]}\n',
    b'{"a": "\\u00e9 \\ud83d\\ude00 \x7f caf\xc3\xa9"}',
    b'{"a": 1, "a": 2}',  # the last one wins, as json.loads
    b'{"a": NaN, "b": Infinity, "c": -Infinity}',  # json.loads takes them
    b'{"a": 1e400}',  # inf for json.loads
    b'{"a": "\\ud800", "b": "\\udc00\\ud800"}',  # lone surrogates, as escapes
    b'{"a": "\xed\xa0\x80"}',  # a lone surrogate, encoded (json.loads passes it)
    b'\xef\xbb\xbf{"a": 1}',  # a UTF-8 byte order mark
    '{"a": 1}'.encode("utf-16"),
    b'{"a": 18446744073709551615, "b": -9223372036854775809}',
    b'{"a": 123456789012345678901234567890}',  # beyond 64 bits: exact, not a float
    b'{"a": 0.1234567890123456789012}',
    b'"text"',
    b"[]",
]
BAD = [
    b'{"a": "x\ny"}',
    b"{} x",
    b'{"a": 01}',
    b'{"a": .5}',
    b"[1,]",
    b"\xc0\xaf",
    b"\x00",
    b"[" * 5000 + b"]" * 5000,
]


def _outcome(fn: object, raw: bytes) -> tuple[str, str]:
    try:
        return "value", repr(fn(raw))  # type: ignore[operator]
    except (ValueError, RecursionError) as e:
        return type(e).__name__, str(e)


@pytest.mark.parametrize("raw", BODIES + BAD)
def test_the_same_value_or_error_as_json_loads(raw: bytes) -> None:
    assert _outcome(decode, raw) == _outcome(json.loads, raw)


def test_numbers_read_the_same() -> None:
    rng = random.Random(3)
    for _ in range(5000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 18)))
        text = f"{rng.choice(['', '-'])}{digits[:1]}.{digits[1:] or '0'}e{rng.randint(-320, 300)}"
        raw = f'{{"n": {text}, "i": {int(digits)}}}'.encode()
        assert repr(decode(raw)) == repr(json.loads(raw))


def test_the_answer_is_compact_json() -> None:
    answer = {"ids": ["msg_01", "msg_02"], "duplicates": 0}
    assert json.loads(encode(answer)) == answer
