from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emq.core.errors import InvalidInput, PayloadTooLarge
from emq.core.model import (
    Envelope,
    Job,
    JobLimits,
    Method,
    Namespace,
    Priority,
    RetryPolicy,
    Topic,
    TopicRef,
    new_job_id,
    validate_name,
)

REF = TopicRef(Namespace.ONLINE, "acme", "orders")


def test_minimal_job_gets_defaults() -> None:
    job = Job.parse({"url": "https://example.com/hook"})
    assert job.method is Method.POST
    assert job.priority is Priority.MEDIUM
    assert job.headers == {}
    assert job.body is None
    assert job.delay_s == 0.0
    assert job.key is None and job.idempotency_key is None


def test_full_job_parses_every_field() -> None:
    job = Job.parse(
        {
            "url": "http://example.com:8080/a?b=c",
            "method": "put",
            "headers": {"X-Trace": "abc", "Content-Type": "text/plain"},
            "body": "hello",
            "priority": "high",
            "key": "user-7",
            "idempotency_key": "op-1",
            "delay_s": 2.5,
        }
    )
    assert job.method is Method.PUT
    assert job.priority is Priority.HIGH
    assert job.headers == {"X-Trace": "abc", "Content-Type": "text/plain"}
    assert (job.key, job.idempotency_key, job.delay_s) == ("user-7", "op-1", 2.5)


def test_object_body_becomes_typed_compact_json() -> None:
    job = Job.parse({"url": "https://e.com", "body": {"a": [1, 2], "é": True}})
    assert job.body == '{"a":[1,2],"é":true}'
    assert job.headers["Content-Type"] == "application/json"


def test_object_body_keeps_the_tenants_content_type() -> None:
    job = Job.parse(
        {"url": "https://e.com", "body": [1], "headers": {"content-type": "application/x"}}
    )
    assert job.headers == {"content-type": "application/x"}


def test_to_dict_round_trips() -> None:
    raw = {
        "url": "https://e.com/x",
        "method": "DELETE",
        "headers": {"A": "b"},
        "body": "x",
        "priority": "low",
        "key": "k",
        "idempotency_key": "i",
        "delay_s": 1.0,
    }
    job = Job.parse(raw)
    assert Job.parse(job.to_dict()) == job
    assert Job.parse(json.loads(json.dumps(Job.parse({"url": "http://e.com"}).to_dict()))) == (
        Job.parse({"url": "http://e.com"})
    )


@pytest.mark.parametrize(
    ("job", "field"),
    [
        ({}, "url"),
        ({"url": 5}, "url"),
        ({"url": "ftp://e.com/x"}, "url"),
        ({"url": "javascript:alert(1)"}, "url"),
        ({"url": "https://"}, "url"),
        ({"url": "https://e.com/a b"}, "url"),
        ({"url": "https://e.com/\r\nX: y"}, "url"),
        ({"url": "https://user:pw@e.com/"}, "url"),
        ({"url": "https://e.com:99999/"}, "url"),
        ({"url": "https://e.com", "method": "BREW"}, "method"),
        ({"url": "https://e.com", "method": 1}, "method"),
        ({"url": "https://e.com", "priority": "urgent"}, "priority"),
        ({"url": "https://e.com", "delay_s": -1}, "delay_s"),
        ({"url": "https://e.com", "delay_s": "5"}, "delay_s"),
        ({"url": "https://e.com", "delay_s": True}, "delay_s"),
        ({"url": "https://e.com", "delay_s": float("nan")}, "delay_s"),
        ({"url": "https://e.com", "headers": []}, "headers"),
        ({"url": "https://e.com", "headers": {"X-A": "a\r\nInjected: 1"}}, "headers.X-A"),
        ({"url": "https://e.com", "headers": {"X-A": "a\nb"}}, "headers.X-A"),
        ({"url": "https://e.com", "headers": {"X-A": 5}}, "headers.X-A"),
        ({"url": "https://e.com", "headers": {"X-A": None}}, "headers.X-A"),
        ({"url": "https://e.com", "headers": {"Bad Name": "x"}}, "headers.Bad Name"),
        ({"url": "https://e.com", "headers": {"Host": "evil"}}, "headers.Host"),
        (
            {"url": "https://e.com", "headers": {"webhook-signature": "v1,x"}},
            "headers.webhook-signature",
        ),
        ({"url": "https://e.com", "headers": {"X-A": "1", "x-a": "2"}}, "headers.x-a"),
        ({"url": "https://e.com", "body": 5}, "body"),
        ({"url": "https://e.com", "key": ""}, "key"),
        ({"url": "https://e.com", "key": 7}, "key"),
        ({"url": "https://e.com", "idempotency_key": ["x"]}, "idempotency_key"),
        ({"url": "https://e.com", "prioirty": "high"}, "prioirty"),
    ],
)
def test_bad_job_names_the_field(job: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        Job.parse(job)
    assert info.value.field == field
    assert not isinstance(info.value, PayloadTooLarge)
    assert field in str(info.value)


def test_job_must_be_an_object() -> None:
    with pytest.raises(InvalidInput, match="must be a JSON object"):
        Job.parse(["https://e.com"])


@pytest.mark.parametrize(
    ("job", "field"),
    [
        ({"url": "https://e.com", "body": "x" * 101}, "body"),
        ({"url": "https://e.com/" + "a" * 200}, "url"),
        ({"url": "https://e.com", "headers": {f"X-{i}": "v" for i in range(5)}}, "headers"),
        ({"url": "https://e.com", "headers": {"X-A": "v" * 90}}, "headers"),
        ({"url": "https://e.com", "body": {"a": "é" * 60}}, "body"),
    ],
)
def test_oversize_job_is_payload_too_large(job: dict[str, object], field: str) -> None:
    limits = JobLimits(max_body_bytes=100, max_url_chars=100, max_headers=4, max_header_bytes=80)
    with pytest.raises(PayloadTooLarge) as info:
        Job.parse(job, limits)
    assert info.value.field == field


def test_delay_beyond_the_limit_is_refused() -> None:
    with pytest.raises(InvalidInput) as info:
        Job.parse({"url": "https://e.com", "delay_s": 31 * 86400})
    assert info.value.field == "delay_s"


@pytest.mark.parametrize("name", ["acme", "a", "A-1_b.c", "x" * 64, "0day"])
def test_good_names(name: str) -> None:
    assert validate_name(name, "tenant") == name


@pytest.mark.parametrize("name", ["", "-a", ".a", "a/b", "a{b}", "a:b", "x" * 65, "é", 5, None])
def test_bad_names(name: object) -> None:
    with pytest.raises(InvalidInput) as info:
        validate_name(name, "topic")
    assert info.value.field == "topic"


def test_priority_order_is_high_medium_low() -> None:
    assert sorted(Priority, key=lambda p: p.rank) == [Priority.HIGH, Priority.MEDIUM, Priority.LOW]


def test_topic_checks_its_numbers() -> None:
    assert Topic(REF, qps=1000, groups=7).group_refs()[-1].index == 6
    for kwargs, field in [
        ({"qps": 0}, "qps"),
        ({"qps": 10, "groups": 0}, "groups"),
        ({"qps": 10, "groups": 11}, "groups"),
        ({"qps": 10, "endpoint_concurrency": 0}, "endpoint_concurrency"),
        ({"qps": 1.5}, "qps"),
    ]:
        with pytest.raises(InvalidInput) as info:
            Topic(REF, **kwargs)  # type: ignore[arg-type]
        assert info.value.field == field


def test_group_and_queue_refs_print_readably() -> None:
    q = REF.group(3).queue(Priority.HIGH)
    assert str(q) == "online/acme/orders/g3/high"
    assert len(REF.group(0).queues()) == 3


def test_retry_policy_parse_and_errors() -> None:
    assert RetryPolicy.parse({}) == RetryPolicy()
    p = RetryPolicy.parse({"max_attempts": 3, "base_delay_s": 0.5})
    assert (p.max_attempts, p.base_delay_s) == (3, 0.5)
    for bad, field in [
        ({"max_attempts": 0}, "retry.max_attempts"),
        ({"jitter": 2}, "retry.jitter"),
        ({"base_delay_s": 10, "max_delay_s": 1}, "retry.max_delay_s"),
        ({"attempts": 3}, "retry.attempts"),
    ]:
        with pytest.raises(InvalidInput) as info:
            RetryPolicy.parse(bad)
        assert info.value.field == field


@given(
    attempt=st.integers(min_value=1, max_value=60),
    rand=st.floats(min_value=0, max_value=1, exclude_max=True),
    jitter=st.floats(min_value=0, max_value=1),
)
def test_backoff_is_bounded_and_jittered_downwards(
    attempt: int, rand: float, jitter: float
) -> None:
    p = RetryPolicy(base_delay_s=1.0, multiplier=2.0, max_delay_s=300.0, jitter=jitter)
    ceiling = min(300.0, 2.0 ** (attempt - 1))
    delay = p.backoff_s(attempt, rand)
    assert ceiling * (1 - jitter) - 1e-9 <= delay <= ceiling + 1e-9


def test_backoff_without_jitter_grows_then_caps() -> None:
    p = RetryPolicy(base_delay_s=1.0, multiplier=2.0, max_delay_s=10.0, jitter=0.0)
    assert [p.backoff_s(a, 0.5) for a in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_envelope_round_trips_and_ids_sort_by_time() -> None:
    job = Job.parse({"url": "https://e.com", "body": {"x": 1}, "priority": "high", "key": "k"})
    env = Envelope(new_job_id(), job, enqueued_ms=1_700_000_000_000, attempt=2)
    assert Envelope.decode(env.encode()) == env
    assert Envelope.decode(Envelope("msg_1", job, 5).encode()).attempt == 0
    early, late = new_job_id(1_000), new_job_id(2_000)
    assert early.startswith("msg_") and len(early) == 30
    assert early < late


@given(a=st.integers(0, 2**48 - 1), b=st.integers(0, 2**48 - 1))
def test_job_ids_order_like_their_times(a: int, b: int) -> None:
    if a < b:
        assert new_job_id(a) < new_job_id(b)
