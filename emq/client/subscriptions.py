"""The client's methods for subscriptions and events (mixed into :class:`emq.client.Client`).

Publishing is retried like an enqueue (:class:`~emq.client.backoff.Backoff`) only when every
event has an ``idempotency_key`` (a repeat then stores nothing twice); otherwise it is sent once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from emq.client.backoff import Backoff

if TYPE_CHECKING:
    from emq.client.client import Client

    _Base = Client
else:
    _Base = object

MAX_BATCH_EVENTS = 1000


def _event(type_: str, payload: Any, **options: Any) -> dict[str, Any]:
    return {"type": type_, "payload": payload} | {k: v for k, v in options.items() if v is not None}


class SubscriptionMethods(_Base):
    """Subscriptions of a topic and the events published to it."""

    async def create_subscription(
        self,
        tenant: str,
        topic: str,
        url: str,
        event_types: Sequence[str],
        *,
        headers: Mapping[str, str] | None = None,
        enabled: bool = True,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """Subscribe ``url`` to the events whose type matches a pattern (``invoice.*``, ``*``).
        The answer holds the subscription's ``secret``: it is shown only here (and on rotation)."""
        body: dict[str, Any] = {"url": url, "event_types": list(event_types), "enabled": enabled}
        if headers is not None:
            body["headers"] = dict(headers)
        path = self._topic_path(tenant, topic, "subscriptions")
        return await self._object("POST", path, body=body, query=self._topic_query(namespace))

    async def list_subscriptions(
        self, tenant: str, topic: str, *, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        path = self._topic_path(tenant, topic, "subscriptions")
        answer = await self._object("GET", path, query=self._topic_query(namespace))
        return list(answer["subscriptions"])

    async def get_subscription(
        self, tenant: str, topic: str, subscription_id: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        path = self._topic_path(tenant, topic, "subscriptions", subscription_id)
        return await self._object("GET", path, query=self._topic_query(namespace))

    async def update_subscription(
        self,
        tenant: str,
        topic: str,
        subscription_id: str,
        *,
        namespace: str | None = None,
        **changes: Any,
    ) -> dict[str, Any]:
        """Change ``url``, ``event_types``, ``headers`` or ``enabled``; applies to later events."""
        path = self._topic_path(tenant, topic, "subscriptions", subscription_id)
        return await self._object("PATCH", path, body=changes, query=self._topic_query(namespace))

    async def delete_subscription(
        self, tenant: str, topic: str, subscription_id: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        """``{"id", "deleted"}``: deleted is false when there was none by that id."""
        path = self._topic_path(tenant, topic, "subscriptions", subscription_id)
        return await self._object("DELETE", path, query=self._topic_query(namespace))

    async def rotate_subscription_secret(
        self, tenant: str, topic: str, subscription_id: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        """A new signing secret (in the answer's ``secret``) for the events accepted after."""
        path = self._topic_path(tenant, topic, "subscriptions", subscription_id, "rotate-secret")
        return await self._object("POST", path, query=self._topic_query(namespace))

    async def publish_event(
        self,
        tenant: str,
        topic: str,
        type_: str,
        payload: Any = None,
        *,
        key: str | None = None,
        idempotency_key: str | None = None,
        priority: str | None = None,
        delay_s: float | None = None,
        namespace: str | None = None,
        transaction_id: str | None = None,
    ) -> dict[str, Any]:
        """Publish one event: ``{"event_id", "deliveries", "duplicates"}``; with
        ``transaction_id``, its deliveries are prepared in that open transaction."""
        event = _event(type_, payload, key=key, idempotency_key=idempotency_key,
                       priority=priority, delay_s=delay_s)  # fmt: skip
        answers = await self.publish_events(
            tenant, topic, [event], namespace=namespace, transaction_id=transaction_id
        )
        return answers[0]

    async def publish_events(
        self,
        tenant: str,
        topic: str,
        events: Sequence[Mapping[str, Any]],
        *,
        namespace: str | None = None,
        transaction_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Publish events (dicts as the API takes them), in requests of up to 1000; one answer
        per event. Requests go one after the other: if one fails, the ones before stay.

        With ``transaction_id`` the deliveries are prepared in that open transaction (delivered
        once it commits, discarded if it rolls back; a decided one is a 409) and each request
        is sent once, as a transaction's jobs are."""
        path = self._topic_path(tenant, topic, "events")
        query = self._topic_query(namespace)
        if transaction_id is not None:
            query = {**query, "transaction_id": transaction_id}
        out: list[dict[str, Any]] = []
        for start in range(0, len(events), MAX_BATCH_EVENTS):
            body = {"events": [dict(e) for e in events[start : start + MAX_BATCH_EVENTS]]}
            retry = transaction_id is None and all(e.get("idempotency_key") for e in body["events"])
            send = lambda body=body: self._object("POST", path, body=body, query=query)  # noqa: E731
            answer = await (Backoff(self.retry_for_s).run(send) if retry else send())
            out += answer["events"]
        return out

    async def event_status(
        self, tenant: str, topic: str, event_id: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        """Each subscription's delivery of the event, with its job status."""
        path = self._topic_path(tenant, topic, "events", event_id)
        return await self._object("GET", path, query=self._topic_query(namespace))
