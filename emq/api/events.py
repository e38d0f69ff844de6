"""Events: ``POST .../events`` publishes one event (or ``{"events": [...]}``) to every enabled
subscription of the topic whose patterns match its type; ``GET .../events/{event}`` answers each
delivery's job status.

**One job per delivery.** :class:`EventPublisher` matches each event against the topic's
subscriptions as of the request (:meth:`~emq.core.subscriptions.SubscriptionStore.snapshot`:
one GET of their version), builds one job per (event, matching subscription) and stores all of
a request's jobs with ONE :meth:`~emq.core.interfaces.JobProducer.put` (the batched path of a job
batch, coalesced with the other requests of the loop iteration), so they are accepted together
or not at all, and each is an ordinary job: the topic's quota, priority, retries, DLQ, job
status. The validated path is :meth:`EventPublisher.publish`, for other modules that publish.

**In a transaction** (``?transaction_id=``, :mod:`emq.api.transactions`) the same jobs are
prepared in it instead of put (the publisher's ``store``): all or none, invisible to workers
until the commit releases them, discarded by a rollback; the event's record lists them from the
start, and their status reads ``prepared`` until then. An idempotency key is checked by the
release (a taken one drops the prepared job), so a repeat keeps the deliveries recorded first.

Each delivery is a POST of the Standard Webhooks payload ``{"type", "timestamp", "data"}`` to the
subscription's URL with its headers and ``emq-event-id``, ``emq-event-type``; its job id is its
``webhook-id`` (unique per event and subscription, stable across retries); its envelope names
the subscription's signer (``s``), and the worker signs it with the subscription's secret
(:func:`~emq.core.subscriptions.subscription_secret`). A ``key`` becomes the job key
``<subscription id>:<key>``: deliveries of one key are ordered per subscription, and the
subscriptions do not wait for each other. An ``idempotency_key`` makes the event id and each
delivery's idempotency key deterministic, so a repeat stores nothing twice.

Each event's record (its deliveries' job ids, :class:`EventRecord`) is written for
``GET .../events/{event}``. Usually in the same pipeline as the version check, before the put:
the publisher matches against the snapshot it last read and
:meth:`~emq.core.subscriptions.SubscriptionStore.record_if_current` checks that snapshot is
still current while writing the records (on a change, the request is matched again on the new
snapshot, with new ids). With an ``idempotency_key`` (a repeat is answered with the first
acceptance's ids) or no snapshot yet, the version is read first and the records written after
the put. If that write fails the deliveries
stand (they are durable) and only the lookup of that event is missing, so the answer is still
202 (a record of jobs whose put failed, answered with an error, is never looked up: its event id
was not given out).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, NotRequired

import orjson
from aiohttp import web
from pydantic import Field
from typing_extensions import TypedDict

from emq.api import jsonbody
from emq.api.enqueue import BacklogGuard, jump_hash
from emq.api.jobs import job_status
from emq.api.transactions import closed_response
from emq.core import schema
from emq.core.errors import BackendUnavailable, InvalidInput, NotFound, PayloadTooLarge
from emq.core.interfaces import ConfigStore, JobProducer, PutItem, PutResult
from emq.core.jobs import JobStore, placed_job_ids
from emq.core.model import GroupRef, JobLimits, Priority, QueueRef, Topic, TopicRef
from emq.core.schema.subscriptions import MAX_EVENTS, EventBatchIn, EventIn
from emq.core.schema.transactions import EnqueueQuery
from emq.core.subscriptions import (
    EVENT_ID_HEADER,
    EVENT_TYPE_HEADER,
    EventRecord,
    Snapshot,
    SubscriptionStore,
    idempotent_event_id,
    is_event_id,
    new_event_id,
)
from emq.core.transactions import TransactionClosed

if TYPE_CHECKING:
    from emq.api.app import Api

log = logging.getLogger(__name__)

_TOPIC = "/v1/tenants/{tenant}/topics/{topic}"
PATH = _TOPIC + "/events"
MAX_DELIVERIES = 10_000  # delivery jobs one request may create (413 beyond)
_PRIORITIES = {p.value: p for p in Priority}


Store = Callable[[list[PutItem]], Awaitable[Sequence[PutResult]]]
"""What stores a request's delivery jobs instead of the queues (:meth:`EventPublisher.publish`)."""


@dataclass(frozen=True, slots=True)
class Event:
    """An event to publish, validated."""

    type: str
    payload: Any = None
    key: str | None = None
    idempotency_key: str | None = None
    priority: Priority = Priority.MEDIUM
    delay_s: float = 0.0

    @classmethod
    def of(cls, body: EventIn) -> Event:
        priority = _PRIORITIES[body.priority]
        return cls(body.type, body.payload, body.key, body.idempotency_key, priority, body.delay_s)


@dataclass(frozen=True, slots=True)
class Published:
    event_id: str
    deliveries: int
    duplicates: int


class EventAccepted(TypedDict):
    event_id: str
    deliveries: Annotated[
        int,
        Field(description="one job per matching enabled subscription (0 when none matches)"),
    ]
    duplicates: Annotated[int, Field(description="deliveries already stored (a repeat)")]


class EventsAccepted(TypedDict):
    events: list[EventAccepted]
    transaction_id: NotRequired[str]


class EventsAnswer(TypedDict):
    """One event: its ``event_id``, ``deliveries`` and ``duplicates``; a batch: ``events``,
    one of those per event, in order; with ``?transaction_id=``, that ``transaction_id``."""

    event_id: NotRequired[str]
    deliveries: NotRequired[int]
    duplicates: NotRequired[int]
    events: NotRequired[list[EventAccepted]]
    transaction_id: NotRequired[
        Annotated[str, Field(description="with ?transaction_id=: deliveries prepared in it")]
    ]


class DeliveryState(TypedDict):
    subscription: str
    job_id: str
    state: Annotated[str, Field(description="the job status's state; unknown once forgotten")]
    status: Annotated[dict[str, Any] | None, Field(description="the job status document")]


class EventView(TypedDict):
    event_id: str
    type: str
    accepted_at: str | None
    deliveries: list[DeliveryState]


def parse_events(body: object) -> tuple[list[Event], bool]:
    """A request's events and whether it was a batch; errors name ``events[3].type``."""
    if isinstance(body, dict) and "events" in body:
        raw = body["events"]
        if isinstance(raw, list) and len(raw) > MAX_EVENTS:
            raise PayloadTooLarge("events", f"more than {MAX_EVENTS} events in one request")
        batch = schema.validate(EventBatchIn, body)
        return [Event.of(e) for e in batch.events], True
    return [Event.of(schema.validate(EventIn, body))], False


def _records(plan: list[Any], results: Sequence[PutResult], now_ms: int) -> list[EventRecord]:
    """Each event's record: its type, and the job of each subscription it matched."""
    out, at = [], 0
    for event, event_id, subs in plan:
        mine = results[at : at + len(subs)]
        at += len(subs)
        done = {s.id: r.job_id for s, r in zip(subs, mine, strict=True)}
        out.append(EventRecord(event_id, event.type, now_ms, done))
    return out


class EventPublisher:
    """Turns events into delivery jobs stored together (see the module)."""

    def __init__(
        self,
        config: ConfigStore,
        subscriptions: SubscriptionStore,
        queues: JobProducer,
        *,
        limits: JobLimits | None = None,
        guard: BacklogGuard | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._subs = subscriptions
        self._queues = queues
        self._limits = limits or JobLimits()
        self._guard = guard or BacklogGuard(queues)
        self._clock = clock
        self._spread: dict[TopicRef, itertools.count[int]] = {}
        self._heads_of: dict[TopicRef, tuple[Snapshot, dict[str, bytes]]] = {}

    async def publish(
        self, ref: TopicRef, events: Sequence[Event], *, store: Store | None = None
    ) -> list[Published]:
        """Store one delivery job per (event, enabled matching subscription), all or none.

        ``store`` stores the items instead of the queues' put (and answers their results): the
        transactions' prepare. It is called even with no items (a transaction's state is then
        still checked) and guards the backlog itself, so this one's guard is skipped."""
        topic = await self._config.get_topic(ref)
        now = self._clock()
        repeatable = any(e.idempotency_key is not None for e in events)
        known = None if repeatable else self._subs.cached(ref)
        if known is not None:  # the usual case: its version checked as its records are written
            plan, items = self._prepare(topic, known, events, now)
            records = _records(plan, [PutResult(i.job_id) for i in items], int(now * 1000))
            if not await self._subs.record_if_current(ref, known.version, records):
                known = None  # changed meanwhile: again on the new snapshot, with new ids
        if known is None:
            plan, items = self._prepare(topic, await self._subs.snapshot(ref), events, now)
        results: Sequence[PutResult]
        if store is not None:
            results = await store(items)
        else:
            if items:
                await self._guard.check(topic, len(items))
            results = await self._queues.put(items) if items else []
        if known is None:  # recorded once the put answered: a repeat's ids are the first ones
            records = _records(plan, results, int(now * 1000))
            if store is not None and repeatable:
                records = await self._first_kept(ref, records)
            await self._record(ref, records)
        if store is None:
            self._guard.accepted(topic, sum(1 for r in results if not r.duplicate))
        out, at = [], 0
        for _, event_id, subs in plan:
            mine = results[at : at + len(subs)]
            at += len(subs)
            out.append(Published(event_id, len(subs), sum(1 for r in mine if r.duplicate)))
        return out

    def _prepare(
        self, topic: Topic, snap: Snapshot, events: Sequence[Event], now: float
    ) -> tuple[list[Any], list[PutItem]]:
        plan = [(e, self._event_id(topic.ref, e), snap.matching(e.type)) for e in events]
        total = sum(len(subs) for _, _, subs in plan)
        if total > MAX_DELIVERIES:
            raise PayloadTooLarge(
                "events", f"{total} deliveries in one request; at most {MAX_DELIVERIES}"
            )
        return plan, self._items(topic, snap, plan, now, batch=len(events) > 1)

    async def _first_kept(self, ref: TopicRef, records: list[EventRecord]) -> list[EventRecord]:
        """Prepared deliveries of a repeated event keep the jobs recorded first: a prepared job
        whose idempotency key is taken when its transaction is released is dropped there, so the
        first one is the delivery (as a put answers a repeat with the first job's id)."""

        async def kept(record: EventRecord) -> EventRecord:
            try:
                first = await self._subs.event(ref, record.id)
            except NotFound:
                return record
            except BackendUnavailable as e:
                log.warning("topic %s: event %s not read before recording: %s", ref, record.id, e)
                return record
            merged = {**record.deliveries, **first.deliveries}
            return EventRecord(record.id, record.type, record.accepted_ms, merged)

        out: list[EventRecord] = []
        for start in range(0, len(records), 100):  # at most 100 reads in flight
            out += await asyncio.gather(*(kept(r) for r in records[start : start + 100]))
        return out

    async def _record(self, ref: TopicRef, records: list[EventRecord]) -> None:
        try:
            await self._subs.record_events(ref, records)
        except BackendUnavailable as e:  # the deliveries are stored: only the lookup is lost
            log.warning("topic %s: events accepted but not recorded for lookup: %s", ref, e)

    @staticmethod
    def _event_id(ref: TopicRef, event: Event) -> str:
        if event.idempotency_key is None:
            return new_event_id()
        return idempotent_event_id(ref, event.idempotency_key)

    def _items(
        self, topic: Topic, snap: Snapshot, plan: list[Any], now: float, *, batch: bool
    ) -> list[PutItem]:
        """The put items: each envelope spelt from its subscription's part (made once per
        snapshot), its event's part (once per event) and its id: what orjson would write for
        ``{"id", "t", "s", "job": {"url", "headers", "body", ...}}`` (the id first, as job
        status looks for it), at a fraction of the cost per delivery."""
        now_ms = int(now * 1000)
        stamp = datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds")
        heads = self._heads(topic.ref, snap)
        stamp_ms = b'","t":%d,' % now_ms
        places: list[tuple[int, Priority]] = []
        parts: list[tuple[bytes, bytes, str | None, int | None]] = []
        for i, (event, event_id, subs) in enumerate(plan):
            if not subs:
                continue
            body = self._body(event, stamp, f"events[{i}].payload" if batch else "payload")
            due = now_ms + int(event.delay_s * 1000) if event.delay_s > 0 else None
            common = b"".join(
                (
                    b'"Content-Type":"application/json","',
                    EVENT_ID_HEADER.encode(),
                    b'":"',
                    event_id.encode(),
                    b'","',
                    EVENT_TYPE_HEADER.encode(),
                    b'":',
                    orjson.dumps(event.type),
                    b'},"body":',
                    orjson.dumps(body),
                )
            )
            if event.priority is not Priority.MEDIUM:
                common += b',"priority":"%s"' % event.priority.value.encode()
            for sub in subs:
                pin = idem = None
                middle = common
                if event.key is not None:
                    pin = f"{sub.id}:{event.key}"
                    middle += b',"key":' + orjson.dumps(pin)
                if event.idempotency_key is not None:
                    idem = f"{event_id}:{sub.id}"
                    middle += b',"idempotency_key":' + orjson.dumps(idem)
                places.append((self._group(topic, pin or idem), event.priority))
                parts.append((heads[sub.id], middle, idem, due))
        ids = placed_job_ids(now_ms, places)
        queues: dict[tuple[int, Priority], QueueRef] = {}
        items = []
        for (head, middle, idem, due), job_id, place in zip(parts, ids, places, strict=True):
            queue = queues.get(place)
            if queue is None:
                queue = queues[place] = GroupRef(topic.ref, place[0]).queue(place[1])
            payload = b"".join((b'{"id":"', job_id.encode(), stamp_ms, head, middle, b"}}"))
            items.append(PutItem(queue, job_id, payload, idem, due))
        return items

    def _heads(self, ref: TopicRef, snap: Snapshot) -> dict[str, bytes]:
        """Per subscription of ``snap``: its envelope's start, up to its event's headers."""
        known = self._heads_of.get(ref)
        if known is not None and known[0] is snap:
            return known[1]
        heads = {}
        for sub in snap.subscriptions:
            headers = orjson.dumps(dict(sub.headers))[:-1] + (b"," if sub.headers else b"")
            heads[sub.id] = b"".join(
                (
                    b'"s":',
                    orjson.dumps(sub.signer),
                    b',"job":{"url":',
                    orjson.dumps(sub.url),
                    b',"headers":',
                    headers,
                )
            )
        if len(self._heads_of) > 10_000:
            self._heads_of.clear()
        self._heads_of[ref] = (snap, heads)
        return heads

    def _body(self, event: Event, stamp: str, field: str) -> str:
        try:
            text = orjson.dumps({"type": event.type, "timestamp": stamp, "data": event.payload})
        except (TypeError, orjson.JSONEncodeError) as e:
            raise InvalidInput(field, f"cannot be sent as JSON: {e}") from None
        if len(text) > self._limits.max_body_bytes:
            raise PayloadTooLarge(field, f"is larger than {self._limits.max_body_bytes} bytes")
        return text.decode()

    def _group(self, topic: Topic, pin: str | None) -> int:
        if topic.groups == 1:
            return 0
        if pin is not None:
            return jump_hash(pin, topic.groups)
        spread = self._spread.get(topic.ref)
        if spread is None:
            spread = self._spread[topic.ref] = itertools.count(random.randrange(1 << 16))
        return next(spread) % topic.groups


async def event_view(
    jobs: JobStore | None,
    topic: Topic,
    record: EventRecord,
    prepared: Callable[[Topic, str], Awaitable[dict[str, Any] | None]] | None = None,
) -> EventView:
    """Each delivery's job status (``unknown`` once its record is no longer kept); ``prepared``
    answers the status of a job held in a transaction (state ``prepared``), or None."""

    async def one(sub_id: str, job_id: str) -> DeliveryState:
        held = await prepared(topic, job_id) if prepared is not None else None
        if held is not None:
            return {"subscription": sub_id, "job_id": job_id, "state": "prepared", "status": held}
        if jobs is None:
            return {"subscription": sub_id, "job_id": job_id, "state": "unknown", "status": None}
        try:
            status = await job_status(jobs, topic, job_id)
        except NotFound:
            return {"subscription": sub_id, "job_id": job_id, "state": "unknown", "status": None}
        return {
            "subscription": sub_id,
            "job_id": job_id,
            "state": status["state"],
            "status": status,
        }

    pairs = list(record.deliveries.items())
    states: list[DeliveryState] = []
    for start in range(0, len(pairs), 100):  # at most 100 lookups in flight
        states += await asyncio.gather(*(one(s, j) for s, j in pairs[start : start + 100]))
    accepted = datetime.fromtimestamp(record.accepted_ms / 1000, UTC)
    return {
        "event_id": record.id,
        "type": record.type,
        "accepted_at": accepted.isoformat(timespec="milliseconds"),
        "deliveries": states,
    }


class EventRoutes:
    def __init__(self, api: Api, store: SubscriptionStore | None, queues: JobProducer) -> None:
        self.api = api
        self._store = store
        limits = JobLimits(max_body_bytes=api.api.max_body_bytes)
        guard = BacklogGuard(api.queues, api.api.backlog_refresh_s)
        self.publisher = (
            EventPublisher(api.config, store, queues, limits=limits, guard=guard)
            if store is not None
            else None
        )

    async def publish(self, request: web.Request) -> web.Response:
        """``POST .../events``; with ``?transaction_id=`` the deliveries are prepared in that
        open transaction (:meth:`~emq.api.transactions.Transactions.prepare_items`) instead of
        queued: delivered once it commits, discarded if it rolls back."""
        await self.api.auth.tenant_or_admin(request, request.match_info["tenant"])
        tx_id = None
        if "transaction_id" in request.query:
            query = schema.query(EnqueueQuery, request.query)
            ref, tx_id = self.api.topic_ref(request, query), query.transaction_id
        else:
            ref = self.api.topic_ref(request)
        events, batch = parse_events(await self.api.read_object(request))
        if self.publisher is None:
            raise BackendUnavailable("events are not served by this API (no subscription store)")
        if tx_id is not None:
            return await self._prepare(ref, tx_id, events, batch)
        published = await self.publisher.publish(ref, events)
        stored = sum(p.deliveries - p.duplicates for p in published)
        self.api.metrics.accepted(ref, stored, sum(p.duplicates for p in published))
        if self.api.enqueue_history is not None and stored:
            self.api.enqueue_history.add(await self.api.config.get_topic(ref), stored)
        return _answer(published, batch, None)

    async def _prepare(
        self, ref: TopicRef, tx_id: str, events: list[Event], batch: bool
    ) -> web.Response:
        assert self.publisher is not None
        transactions = self.api.transactions
        if transactions is None:
            raise BackendUnavailable("transactions are not served by this API")
        topic = await self.api.config.get_topic(ref)

        async def store(items: list[PutItem]) -> list[PutResult]:
            return await transactions.prepare_items(topic, tx_id, items, field="events")

        try:
            published = await self.publisher.publish(ref, events, store=store)
        except TransactionClosed as e:
            return closed_response(e)
        return _answer(published, batch, tx_id)

    async def show(self, request: web.Request) -> web.Response:
        await self.api.auth.tenant_or_admin(request, request.match_info["tenant"])
        ref = self.api.topic_ref(request)
        event_id = request.match_info["event"]
        if not is_event_id(event_id):
            raise NotFound(f"no event {event_id!r}")
        topic = await self.api.config.get_topic(ref)
        if self._store is None:
            raise BackendUnavailable("events are not served by this API (no subscription store)")
        record = await self._store.event(ref, event_id)
        tx = self.api.transactions
        prepared = tx.job_status if tx is not None else None
        return web.json_response(await event_view(self.api.jobs, topic, record, prepared))


def _answer(published: list[Published], batch: bool, tx_id: str | None) -> web.Response:
    rows = [
        EventAccepted(event_id=p.event_id, deliveries=p.deliveries, duplicates=p.duplicates)
        for p in published
    ]
    answer: Any = EventsAccepted(events=rows) if batch else rows[0]
    if tx_id is not None:
        answer["transaction_id"] = tx_id
    return web.json_response(answer, status=202, dumps=jsonbody.encode)


def add_routes(
    app: web.Application, api: Api, store: SubscriptionStore | None, queues: JobProducer
) -> None:
    """Register the event routes on the API's app (``queues``: the coalesced producer)."""
    routes = EventRoutes(api, store, queues)
    app.router.add_routes([web.post(PATH, routes.publish), web.get(PATH + "/{event}", routes.show)])
