"""The API's subscriptions of a topic (:mod:`emq.core.subscriptions`): create, list, show,
update, delete, and rotate the signing secret. The tenant's token or the admin's.

``POST .../subscriptions`` answers 201 with the subscription and its signing secret, shown only
there and in the answer of ``POST .../subscriptions/{subscription}/rotate-secret``. A change
applies to the events accepted after it returns (events already accepted keep their deliveries,
their URL, headers and secret).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any, NotRequired

from aiohttp import web
from pydantic import Field
from typing_extensions import TypedDict

from emq.core import schema
from emq.core.errors import BackendUnavailable, ConfigConflict, InvalidInput, NotFound
from emq.core.job import Job, JobLimits
from emq.core.model import Topic, TopicRef
from emq.core.schema.subscriptions import SubscriptionIn, SubscriptionPatch
from emq.core.subscriptions import (
    EVENT_HEADERS,
    MAX_SUBSCRIPTIONS,
    Subscription,
    SubscriptionStore,
    is_subscription_id,
    new_key_id,
    new_subscription_id,
    subscription_secret,
)

if TYPE_CHECKING:
    from emq.api.app import Api

_TOPIC = "/v1/tenants/{tenant}/topics/{topic}"
PATH = _TOPIC + "/subscriptions"
ONE = PATH + "/{subscription}"


class SubscriptionView(TypedDict):
    id: str
    tenant: str
    topic: str
    namespace: str
    url: str
    event_types: list[str]
    headers: dict[str, str]
    enabled: bool
    created_at: float
    updated_at: float
    secret: NotRequired[
        Annotated[str, Field(description="the Standard Webhooks signing secret; shown once")]
    ]


class Deleted(TypedDict):
    id: str
    deleted: Annotated[bool, Field(description="false: there was none by that id (a repeat)")]


class Subscriptions(TypedDict):
    subscriptions: list[SubscriptionView]
    limit: Annotated[int, Field(description="the most subscriptions a topic may have")]


def view(ref: TopicRef, sub: Subscription, secret: str | None = None) -> SubscriptionView:
    out: SubscriptionView = {
        "id": sub.id,
        "tenant": ref.tenant,
        "topic": ref.topic,
        "namespace": ref.namespace.value,
        "url": sub.url,
        "event_types": list(sub.event_types),
        "headers": dict(sub.headers),
        "enabled": sub.enabled,
        "created_at": sub.created_at,
        "updated_at": sub.updated_at,
    }
    if secret is not None:
        out["secret"] = secret
    return out


def checked_target(url: str, headers: Mapping[str, str] | None, limits: JobLimits) -> None:
    """What the schema cannot check of a subscription's URL and headers: the job checks (the
    URL can be sent, sizes, reserved or repeated headers) and the headers EMQ sets on an
    event's delivery (its id and type, and Content-Type: application/json)."""
    Job.checked(url, "POST", headers, None, "medium", None, None, 0.0, limits)
    for name in headers or {}:
        if name.lower() in EVENT_HEADERS or name.lower() == "content-type":
            raise InvalidInput(f"headers.{name}", "is set by EMQ and may not be given")


class SubscriptionRoutes:
    def __init__(self, api: Api, store: SubscriptionStore | None) -> None:
        self.api = api
        self._store = store
        self.limits = JobLimits(max_body_bytes=api.api.max_body_bytes)

    @property
    def store(self) -> SubscriptionStore:
        if self._store is None:
            raise BackendUnavailable("subscriptions are not served by this API (no store)")
        return self._store

    async def _topic(self, request: web.Request) -> Topic:
        await self.api.auth.tenant_or_admin(request, request.match_info["tenant"])
        return await self.api.config.get_topic(self.api.topic_ref(request))

    def _sub_id(self, request: web.Request) -> str:
        sub_id = request.match_info["subscription"]
        if not is_subscription_id(sub_id):
            raise NotFound(f"no subscription {sub_id!r}")
        return sub_id

    async def create(self, request: web.Request) -> web.Response:
        topic = await self._topic(request)
        body = schema.validate(SubscriptionIn, await self.api.json_object(request))
        checked_target(body.url, body.headers, self.limits)
        if not topic.secret:
            raise ConfigConflict(f"topic {topic.ref} has no signing secret to derive one from")
        now = round(time.time(), 3)
        sub = Subscription(
            new_subscription_id(),
            body.url,
            tuple(body.event_types),
            dict(body.headers or {}),
            body.enabled,
            new_key_id(),
            now,
            now,
        )
        await self.store.create(topic.ref, sub, MAX_SUBSCRIPTIONS)
        secret = subscription_secret(topic.secret, sub.signer)
        return web.json_response(view(topic.ref, sub, secret), status=201)

    async def list(self, request: web.Request) -> web.Response:
        topic = await self._topic(request)
        subs = await self.store.list(topic.ref)
        rows = [view(topic.ref, s) for s in subs]
        return web.json_response(Subscriptions(subscriptions=rows, limit=MAX_SUBSCRIPTIONS))

    async def show(self, request: web.Request) -> web.Response:
        topic = await self._topic(request)
        sub = await self.store.get(topic.ref, self._sub_id(request))
        return web.json_response(view(topic.ref, sub))

    async def update(self, request: web.Request) -> web.Response:
        topic = await self._topic(request)
        sub_id = self._sub_id(request)
        body = schema.validate(SubscriptionPatch, await self.api.json_object(request))
        changes: dict[str, Any] = schema.given(body)
        if changes.get("url") is None:
            changes.pop("url", None)
        if changes.get("event_types") is None:
            changes.pop("event_types", None)
        else:
            changes["event_types"] = tuple(changes["event_types"])
        if changes.get("enabled") is None:
            changes.pop("enabled", None)
        if "headers" in changes:
            changes["headers"] = dict(changes["headers"] or {})
        current = await self.store.get(topic.ref, sub_id)
        checked_target(changes.get("url", current.url), changes.get("headers"), self.limits)
        now = round(time.time(), 3)
        sub = await self.store.update(
            topic.ref, sub_id, lambda s: replace(s, **changes, updated_at=now)
        )
        return web.json_response(view(topic.ref, sub))

    async def delete(self, request: web.Request) -> web.Response:
        topic = await self._topic(request)
        sub_id = request.match_info["subscription"]
        try:
            await self.store.delete(topic.ref, self._sub_id(request))
        except NotFound:  # deleting is idempotent: "deleted" says whether this call removed it
            return web.json_response(Deleted(id=sub_id, deleted=False))
        return web.json_response(Deleted(id=sub_id, deleted=True))

    async def rotate(self, request: web.Request) -> web.Response:
        topic = await self._topic(request)
        sub_id = self._sub_id(request)
        if not topic.secret:
            raise ConfigConflict(f"topic {topic.ref} has no signing secret to derive one from")
        now = round(time.time(), 3)
        sub = await self.store.update(topic.ref, sub_id, lambda s: s.rotated(now))
        return web.json_response(
            view(topic.ref, sub, subscription_secret(topic.secret, sub.signer))
        )


def add_routes(app: web.Application, api: Api, store: SubscriptionStore | None) -> None:
    """Register the subscription routes on the API's app."""
    routes = SubscriptionRoutes(api, store)
    app.router.add_routes(
        [
            web.post(PATH, routes.create),
            web.get(PATH, routes.list),
            web.get(ONE, routes.show),
            web.patch(ONE, routes.update),
            web.delete(ONE, routes.delete),
            web.post(ONE + "/rotate-secret", routes.rotate),
        ]
    )
