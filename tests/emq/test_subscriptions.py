"""Subscriptions and events, on the in-memory stores: pattern matching, the derived secrets
(checked with the standardwebhooks library), the snapshot a change is seen in, the store's
limit, and what the publisher stores for an event (one job per enabled matching subscription,
all in one put, signed by its subscription, keyed per subscription, idempotent)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import orjson
import pytest
from standardwebhooks import Webhook

from adapters.memory_config import MemoryConfigStore
from adapters.memory_queue import MemoryQueueBackend
from adapters.memory_subscriptions import MemorySubscriptionStore
from emq.api.enqueue import jump_hash
from emq.api.events import Event, EventPublisher, parse_events
from emq.core.errors import InvalidInput, NotFound, PayloadTooLarge
from emq.core.interfaces import PutItem, PutResult
from emq.core.jobs import job_place
from emq.core.model import Delivery, Envelope, Namespace, Priority, Tenant, Topic, TopicRef
from emq.core.subscriptions import (
    Subscription,
    SubscriptionLimit,
    matches,
    new_key_id,
    new_subscription_id,
    subscription_secret,
)
from worker.signing import signature_headers

REF = TopicRef(Namespace.ONLINE, "acme", "billing")
TOPIC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.mark.parametrize(
    ("pattern", "kind", "expected"),
    [
        ("*", "invoice.paid", True),
        ("invoice.*", "invoice.paid", True),
        ("invoice.*", "invoice.paid.late", True),
        ("invoice.*", "invoice", False),
        ("invoice.*", "invoicex.paid", False),
        ("invoice.paid", "invoice.paid", True),
        ("invoice.paid", "invoice.paid2", False),
        ("*.paid", "order.paid", True),
        ("a.b", "aXb", False),  # a dot is a dot, not any character
    ],
)
def test_patterns(pattern: str, kind: str, expected: bool) -> None:
    assert matches(pattern, kind) is expected


def test_each_subscription_signs_with_its_own_secret_and_rotation_changes_it() -> None:
    a, b = f"{new_subscription_id()}.{new_key_id()}", f"{new_subscription_id()}.{new_key_id()}"
    secret_a, secret_b = subscription_secret(TOPIC_SECRET, a), subscription_secret(TOPIC_SECRET, b)
    assert secret_a.startswith("whsec_") and len({secret_a, secret_b, TOPIC_SECRET}) == 3
    assert subscription_secret(TOPIC_SECRET, a) == secret_a  # derived, the same every time
    body = '{"type":"invoice.paid"}'
    headers = signature_headers(secret_a, "msg_1", time.time(), body)
    assert Webhook(secret_a).verify(body, headers) == {"type": "invoice.paid"}
    with pytest.raises(Exception, match="signature"):
        Webhook(secret_b).verify(body, headers)


class Recording(MemoryQueueBackend):
    def __init__(self) -> None:
        super().__init__()
        self.puts: list[list[PutItem]] = []

    async def put(self, items: Sequence[PutItem]) -> list[PutResult]:
        self.puts.append(list(items))
        return await super().put(items)


async def _world(groups: int = 3) -> tuple[MemorySubscriptionStore, Recording, EventPublisher]:
    config = MemoryConfigStore()
    await config.create_tenant(Tenant("acme", "Acme", "x", 0.0))
    await config.create_topic(Topic(REF, 300, groups, secret=TOPIC_SECRET))
    store, queues = MemorySubscriptionStore(), Recording()
    return store, queues, EventPublisher(config, store, queues, clock=lambda: 1_700_000_000.5)


def _sub(patterns: tuple[str, ...], enabled: bool = True, n: int = 0) -> Subscription:
    return Subscription(
        new_subscription_id(), f"https://h{n}.example/hook", patterns, {"X-Team": str(n)},
        enabled, new_key_id(), created_at=float(n),
    )  # fmt: skip


async def test_one_job_per_enabled_matching_subscription_in_one_put() -> None:
    store, queues, publisher = await _world()
    subs = [
        _sub(("invoice.*",), n=1),
        _sub(("*",), n=2),
        _sub(("order.*",), n=3),
        _sub(("invoice.paid",), enabled=False, n=4),
    ]
    for s in subs:
        await store.create(REF, s, 1000)
    (published,) = await publisher.publish(REF, [Event("invoice.paid", {"amount": 5})])
    assert (published.deliveries, published.duplicates) == (2, 0)
    assert len(queues.puts) == 1 and len(queues.puts[0]) == 2
    envelopes = [orjson.loads(item.payload) for item in queues.puts[0]]
    for item, env in zip(queues.puts[0], envelopes, strict=True):  # the id first: job status
        assert item.payload.startswith(b'{"id":"%s"' % item.job_id.encode())
        assert set(env) == {"id", "t", "s", "job"} and env["t"] == 1_700_000_000_500
    assert [e["s"] for e in envelopes] == [subs[0].signer, subs[1].signer]
    for env, sub in zip(envelopes, subs, strict=False):
        delivery = Delivery.from_dict(env)
        assert delivery.signer == sub.signer and delivery.url == sub.url
        assert delivery.headers["emq-event-id"] == published.event_id
        assert delivery.headers["emq-event-type"] == "invoice.paid"
        assert delivery.headers["X-Team"] == sub.headers["X-Team"]
        assert orjson.loads(delivery.body or "") == {
            "type": "invoice.paid",
            "timestamp": "2023-11-14T22:13:20.500+00:00",
            "data": {"amount": 5},
        }
    # A retry re-encodes the envelope: the signer stays
    again = Envelope.from_dict(envelopes[0])
    assert Envelope.decode(Envelope(again.id, again.job, again.enqueued_ms, 1, again.signer)
                           .encode()).signer == subs[0].signer  # fmt: skip
    record = await store.event(REF, published.event_id)
    assert record.deliveries == {s.id: i.job_id for s, i in zip(subs, queues.puts[0], strict=False)}


async def test_nothing_matches_is_zero_deliveries_and_no_put() -> None:
    store, queues, publisher = await _world()
    await store.create(REF, _sub(("order.*",)), 1000)
    (published,) = await publisher.publish(REF, [Event("invoice.paid")])
    assert published.deliveries == 0 and queues.puts == []
    assert (await store.event(REF, published.event_id)).deliveries == {}


async def test_a_change_applies_to_events_accepted_after_it() -> None:
    store, queues, publisher = await _world()
    sub = _sub(("invoice.*",))
    await store.create(REF, sub, 1000)
    (first,) = await publisher.publish(REF, [Event("invoice.paid")])
    await store.update(REF, sub.id, lambda s: s.rotated())
    await store.create(REF, _sub(("*",), n=5), 1000)
    (second,) = await publisher.publish(REF, [Event("invoice.paid")])
    assert (first.deliveries, second.deliveries) == (1, 2)
    signers = [orjson.loads(p[0].payload)["s"] for p in queues.puts]
    assert signers[0] == sub.signer and signers[1] != sub.signer  # rotated: a new secret
    await store.delete(REF, sub.id)
    (third,) = await publisher.publish(REF, [Event("invoice.paid")])
    assert third.deliveries == 1
    with pytest.raises(NotFound):
        await store.delete(REF, sub.id)


async def test_key_orders_per_subscription_and_idempotency_repeats_store_nothing() -> None:
    store, queues, publisher = await _world(groups=7)
    subs = [_sub(("*",), n=i) for i in range(5)]
    for s in subs:
        await store.create(REF, s, 1000)
    event = Event("invoice.paid", key="cust-9", idempotency_key="once", priority=Priority.HIGH)
    (first,) = await publisher.publish(REF, [event])
    (repeat,) = await publisher.publish(REF, [event])
    assert first.event_id == repeat.event_id and (repeat.deliveries, repeat.duplicates) == (5, 5)
    for item, sub in zip(queues.puts[0], subs, strict=True):
        job = orjson.loads(item.payload)["job"]
        assert job["key"] == f"{sub.id}:cust-9" and job["priority"] == "high"
        assert job["idempotency_key"] == item.idempotency_key == f"{first.event_id}:{sub.id}"
        place = job_place(item.job_id)
        assert place is not None and place.group_index == jump_hash(job["key"], 7)
    assert len({item.job_id for item in queues.puts[0]}) == 5  # webhook-id: one per subscription


async def test_limits_and_bad_events_are_refused_whole() -> None:
    store, queues, publisher = await _world()
    await store.create(REF, _sub(("*",)), 2)
    await store.create(REF, _sub(("*",), n=1), 2)
    with pytest.raises(SubscriptionLimit):
        await store.create(REF, _sub(("*",), n=2), 2)
    with pytest.raises(InvalidInput) as bad:
        parse_events({"events": [{"type": "ok"}, {"type": "bad type!"}]})
    assert bad.value.field == "events[1].type"
    with pytest.raises(InvalidInput) as bad:
        parse_events({"type": "x" * 129})
    assert bad.value.field == "type"
    with pytest.raises(PayloadTooLarge):
        parse_events({"events": [{"type": "a"}] * 1001})
    huge = Event("invoice.paid", "x" * 300_000)
    with pytest.raises(PayloadTooLarge):
        await publisher.publish(REF, [Event("invoice.paid"), huge])
    assert queues.puts == []  # the batch was refused whole


async def test_publishers_running_together_each_get_their_own_results() -> None:
    store, _, publisher = await _world()
    await store.create(REF, _sub(("*",)), 1000)
    results = await asyncio.gather(*(publisher.publish(REF, [Event("a")]) for _ in range(5)))
    assert len({r[0].event_id for r in results}) == 5
