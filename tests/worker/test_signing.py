"""The signature's HMAC on two precomputed SHA-256 states is ``hmac``'s HMAC-SHA256, for keys
shorter than, as long as and longer than SHA-256's block, and signing leaves the states as
they were (worker.signing; the reference package is checked in test_push)."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from worker.signing import keyed, signature


@pytest.mark.parametrize("length", [1, 32, 63, 64, 65, 128, 200])
def test_the_hmac_is_the_standard_librarys(length: int) -> None:
    key = bytes(range(256))[:length]
    secret = "whsec_" + base64.b64encode(key).decode()
    body = '{"é":"\\u2603 ☃","n":1}'
    message = f"msg_1.1700000000.{body}".encode()
    expected = hmac.new(key, message, hashlib.sha256).digest()
    got = signature(keyed(secret), "msg_1", 1_700_000_000, body)
    assert got == "v1," + base64.b64encode(expected).decode()
    # the cached states were copied, not consumed: the same job signs the same twice
    assert signature(keyed(secret), "msg_1", 1_700_000_000, body) == got
