"""The pure rules of transactions (issue 30): a prepared job's stored form round-trips (keys
with any character, due times), the check-back's backoff and its bound, decisions, ids, and
which check URLs the API takes."""

from __future__ import annotations

import ipaddress

import pytest

from emq.api.transactions import check_url
from emq.core.errors import InvalidInput
from emq.core.interfaces import PutItem
from emq.core.model import Namespace, Priority, TopicRef
from emq.core.transactions import (
    CheckPolicy,
    TxState,
    decision_state,
    decode_prepared,
    encode_prepared,
    is_transaction_id,
    new_transaction_id,
    prepared_head,
)

TOPIC = TopicRef(Namespace.SANDBOX, "acme", "orders")


@pytest.mark.parametrize(
    ("key", "due"), [(None, None), ("a b\nc é 9 -", None), (None, 1764370000123), ("k", 5)]
)
def test_a_prepared_job_round_trips(key: str | None, due: int | None) -> None:
    item = PutItem(TOPIC.group(3).queue(Priority.LOW), "msg_x1", b'{"id": "msg_x1", "a": " 1 "}',
                   idempotency_key=key, due_ms=due)  # fmt: skip
    raw = encode_prepared(item)
    assert decode_prepared(TOPIC, raw) == item
    assert prepared_head(raw) == (3, due, key)
    with pytest.raises(ValueError):
        decode_prepared(TOPIC, b"nonsense")


def test_check_back_backoff_doubles_to_its_cap_then_stops() -> None:
    policy = CheckPolicy(attempts=5, backoff_s=2, max_backoff_s=5)
    assert [policy.retry_in_ms(n) for n in range(1, 6)] == [2000, 4000, 5000, 5000, None]
    assert decision_state("commit") is TxState.COMMITTED
    assert decision_state("rollback") is TxState.ROLLED_BACK
    assert decision_state("unknown") is None and decision_state("COMMIT") is None


def test_ids_and_check_urls() -> None:
    made = {new_transaction_id() for _ in range(100)}
    assert len(made) == 100 and all(is_transaction_id(t) for t in made)
    assert not is_transaction_id("tx_../../x") and not is_transaction_id("rpl_" + "0" * 20)
    assert check_url("https://shop.example/check", ()) == "https://shop.example/check"
    loopback = (ipaddress.ip_network("127.0.0.0/8"),)
    assert check_url("http://127.0.0.1:8080/c", loopback) == "http://127.0.0.1:8080/c"
    for bad in ("http://127.0.0.1/c", "http://169.254.169.254/", "ftp://x.example/",
                "http://[::1]/c", "https://user:pw@x.example/"):  # fmt: skip
        with pytest.raises(InvalidInput) as refused:
            check_url(bad, ())
        assert refused.value.field == "check_url"
