"""The job status document from given facts: each state, each reason, and what is not found."""

from __future__ import annotations

import pytest

from emq.api.jobs import describe, iso
from emq.core.errors import NotFound
from emq.core.jobs import GroupSnapshot, JobFacts, JobPlace, JobRecord, QueueSnapshot
from emq.core.model import Namespace, Priority, Topic, TopicRef

NOW = 1_800_000_000_000
TOPIC = Topic(TopicRef(Namespace.ONLINE, "acme", "orders"), 100, 2, endpoint_concurrency=8)
PLACE = JobPlace(NOW - 1000, 1, Priority.MEDIUM)


def status(facts: JobFacts, topic: Topic = TOPIC, place: JobPlace = PLACE) -> dict[str, object]:
    return describe(topic, "msg_x", place, facts, NOW)


def snap(**kw: object) -> GroupSnapshot:
    queues = {"medium": QueueSnapshot("100-0", "200-0", "150-0")}
    args: dict[str, object] = {"at_ms": NOW - 200, "quota_until_ms": None, "endpoint_full": False}
    return GroupSnapshot("w1", queues=queues, **(args | kw))  # type: ignore[arg-type]


def test_a_delayed_job_says_until_when() -> None:
    body = status(JobFacts(due_ms=NOW + 60_000))
    assert body["state"] == "delayed" and body["reason"] is None
    assert body["until"] == iso(NOW + 60_000) == "2027-01-15T08:01:00.000+00:00"
    assert body["id"] == "msg_x" and body["topic"] == "orders" and body["group"] == 1


def test_a_queued_job_has_a_position_and_an_eta_at_the_groups_share_of_the_quota() -> None:
    body = status(JobFacts(offset="300-0", committed="100-0", ahead=500))
    assert body["state"] == "queued"
    assert body["position"] == 500 and body["position_exact"] is True
    assert body["eta_s"] == 10.0  # 500 jobs at 50/s (100 QPS over 2 groups)
    assert body["reason"] is None  # enqueued a second ago, nobody reported yet


def test_reasons_of_a_waiting_job_in_order_paused_quota_concurrency_backlog() -> None:
    facts = JobFacts(offset="300-0", committed="100-0", snapshot=snap(quota_until_ms=NOW + 400))
    paused = Topic(TOPIC.ref, 100, 2, paused=True)
    assert status(facts, paused)["reason"]["code"] == "paused"  # type: ignore[index]
    quota = status(facts)["reason"]
    assert quota["code"] == "quota" and quota["until"]  # type: ignore[index]
    full = JobFacts(offset="300-0", committed="100-0", snapshot=snap(endpoint_full=True))
    assert status(full)["reason"]["code"] == "endpoint_concurrency"  # type: ignore[index]
    idle = JobFacts(offset="300-0", committed="100-0", snapshot=snap())
    assert status(idle)["reason"]["code"] == "worker_backlog"  # type: ignore[index]


def test_quota_until_is_the_snapshots_time_or_the_next_grant_at_the_groups_pace_after_it() -> None:
    ahead = JobFacts(offset="300-0", committed="100-0", snapshot=snap(quota_until_ms=NOW + 400))
    assert status(ahead)["reason"]["until"] == iso(NOW + 400)  # type: ignore[index]
    # The snapshot (200 ms old) saw the budget spent until 410 ms ago: the grant then went to
    # the job at the head, the next ones free every 20 ms (100 QPS over 2 groups): still quota,
    # until the first of them after now. (It said worker_backlog: a 1 QPS group whose snapshot
    # came just before each grant answered that for most of every second.)
    passed = JobFacts(offset="300-0", committed="100-0", snapshot=snap(quota_until_ms=NOW - 410))
    reason = status(passed)["reason"]
    assert reason == {  # type: ignore[comparison-overlap]
        "code": "quota",
        "detail": "the group's budget (50/s) is spent",
        "until": iso(NOW + 10),
    }
    on_time = JobFacts(offset="300-0", committed="100-0", snapshot=snap(quota_until_ms=NOW - 400))
    assert status(on_time)["reason"]["until"] == iso(NOW + 20)  # type: ignore[index]
    slow = Topic(TOPIC.ref, 1, 1)  # one grant a second
    facts = JobFacts(offset="300-0", committed="100-0", snapshot=snap(quota_until_ms=NOW - 1))
    assert status(facts, slow)["reason"]["until"] == iso(NOW + 999)  # type: ignore[index]


def test_no_owner_when_nobody_reports_on_a_job_waiting_for_long() -> None:
    old = JobPlace(NOW - 60_000, 1, Priority.MEDIUM)
    body = status(JobFacts(offset="300-0", committed="100-0"), place=old)
    assert body["reason"]["code"] == "no_owner"  # type: ignore[index]
    stale = JobFacts(offset="300-0", committed="100-0", snapshot=snap(at_ms=0))
    assert status(stale, place=old)["reason"]["code"] == "no_owner"  # type: ignore[index]


def test_buffered_and_in_flight_against_the_owners_snapshot() -> None:
    buffered = status(JobFacts(offset="160-0", committed="100-0", snapshot=snap()))
    assert buffered["state"] == "buffered" and buffered["worker"] == "w1"
    taken = status(JobFacts(offset="120-0", committed="100-0", snapshot=snap()))
    assert taken["state"] == "in_flight" and taken["reason"] is None


def test_outcome_records_delivered_retry_wait_and_dead() -> None:
    done = JobRecord("msg_x", "delivered", NOW - 10, attempt=1, status=200, latency_ms=850)
    body = status(JobFacts(record=done, offset="120-0", committed="150-0"))
    assert body["state"] == "delivered" and body["latency_ms"] == 850 and body["status"] == 200
    retry = JobRecord(
        "msg_x", "retry_wait", NOW - 10, 2, 503, "HTTP 503", next_ms=NOW + 30_000, retry_after=True
    )
    body = status(JobFacts(record=retry))
    assert body["state"] == "retry_wait" and body["attempt"] == 2
    assert body["last_status"] == 503 and body["last_error"] == "HTTP 503"
    assert body["reason"]["code"] == "retry_after"  # type: ignore[index]
    dead = JobRecord("msg_x", "dead", NOW - 10, 8, 500, "HTTP 500")
    body = status(JobFacts(record=dead))
    assert body["state"] == "dead" and body["error"] == "HTTP 500" and body["attempts"] == 8


def test_a_retried_job_back_in_its_queue_is_queued_again_with_its_attempt() -> None:
    retry = JobRecord("msg_x", "retry_wait", NOW - 5000, 1, 500, "HTTP 500", next_ms=NOW - 1000)
    body = status(JobFacts(record=retry, offset="300-0", committed="100-0", ahead=3))
    assert body["state"] == "queued" and body["attempt"] == 1 and body["position"] == 3


def test_unknown_or_finished_without_a_record_is_not_found() -> None:
    with pytest.raises(NotFound):
        status(JobFacts())
    with pytest.raises(NotFound):
        status(JobFacts(offset="90-0", committed="100-0"))
