"""Job status of jobs waiting for their endpoint (pure: given facts and snapshots): paced, held
by a Retry-After, disabled; a parked job is buffered, and a disabled endpoint promises no time."""

from __future__ import annotations

from emq.api.jobs import describe, iso
from emq.core.jobs import EndpointWait, GroupSnapshot, JobFacts, JobPlace, QueueSnapshot
from emq.core.model import Namespace, Priority, Topic, TopicRef

NOW = 1_800_000_000_000
TOPIC = Topic(TopicRef(Namespace.ONLINE, "acme", "orders"), 100, 2)
PLACE = JobPlace(NOW - 60_000, 1, Priority.MEDIUM)
URL = "https://hooks.example.com/x"


def status(wait: EndpointWait | None, offset: str, url: str = URL) -> dict[str, object]:
    queues = {"medium": QueueSnapshot("100-0", "200-0", None)}  # fetched to 200, buffer empty
    waits = {"hooks.example.com:443": wait} if wait is not None else {}
    snap = GroupSnapshot("w1", NOW - 200, None, False, queues, waits)
    facts = JobFacts(offset=offset, committed="100-0", ahead=100, snapshot=snap, url=url)
    return describe(TOPIC, "msg_x", PLACE, facts, NOW)


def test_a_job_parked_for_its_held_endpoint_is_buffered_until_the_hold_ends() -> None:
    held = EndpointWait("held", 20.0, NOW + 5_000, {"medium": "150-0"})
    body = status(held, "160-0")
    assert body["state"] == "buffered" and body["worker"] == "w1"
    assert body["reason"] == {
        "code": "endpoint_held",
        "detail": "endpoint hooks.example.com:443 asked to wait (Retry-After)",
        "until": iso(NOW + 5_000),
    }
    assert status(held, "140-0")["state"] == "in_flight"  # before the oldest parked: sent


def test_a_queued_job_of_a_disabled_endpoint_has_no_eta() -> None:
    body = status(EndpointWait("disabled", 0.0), "300-0")
    assert body["state"] == "queued" and body["eta_s"] is None
    assert body["reason"]["code"] == "endpoint_disabled"  # type: ignore[index]


def test_a_paced_endpoint_sets_the_eta_and_the_reason() -> None:
    body = status(EndpointWait("limited", 10.0), "300-0")
    assert body["reason"]["code"] == "endpoint_limited"  # type: ignore[index]
    assert "10/s" in body["reason"]["detail"]  # type: ignore[index]
    assert body["eta_s"] == 10.0  # 100 ahead at the endpoint's 10/s, not the group's 50/s
    held = status(EndpointWait("held", 10.0, NOW + 3_000), "300-0")
    assert held["eta_s"] == 13.0  # the hold, then the pace


def test_another_endpoint_of_the_topic_changes_nothing() -> None:
    body = status(EndpointWait("disabled", 0.0), "300-0", url="https://other.example.com/")
    assert body["eta_s"] == 2.0 and body["reason"]["code"] == "worker_backlog"  # type: ignore[index]
    assert status(None, "300-0")["reason"]["code"] == "worker_backlog"  # type: ignore[index]
