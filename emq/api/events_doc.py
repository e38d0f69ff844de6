"""The route table entries of subscriptions and events for ``/openapi.json``
(:mod:`emq.api.openapi` adds them to its table; the bodies are :mod:`emq.core.schema.subscriptions`,
the answers the handlers' TypedDicts)."""

from __future__ import annotations

from typing import Any

from emq.api import events, subscriptions
from emq.core import schema
from emq.core.schema.subscriptions import (
    EventBatchIn,
    EventIn,
    SubscriptionIn,
    SubscriptionPatch,
)
from emq.core.schema.transactions import EnqueueQueryDoc
from emq.core.subscriptions import EVENT_ID_PATTERN, SUBSCRIPTION_ID_PATTERN

_BODY_ERRORS = (400, 408, 422, 503)


def routes(route: Any) -> tuple[Any, ...]:
    """The entries, made with the table's ``Route`` class."""
    subs, one = subscriptions.PATH, subscriptions.ONE
    ns = schema.NamespaceQuery
    sub = subscriptions.SubscriptionView
    return (
        route(
            "post",
            subs,
            "Subscribe an endpoint to the topic's events whose type matches one of its patterns; "
            "the answer holds its Standard Webhooks signing secret, shown once (422 beyond 1000 "
            "subscriptions per topic)",
            "tenant",
            (201, "the subscription, with its secret", sub),
            (*_BODY_ERRORS, 409, 413),
            SubscriptionIn,
            ns,
        ),
        route(
            "get", subs, "List the topic's subscriptions", "tenant",
            (200, "subscriptions", subscriptions.Subscriptions), (422, 503), query=ns,
        ),
        route(
            "get", one, "Show a subscription (without its secret)", "tenant",
            (200, "the subscription", sub), (422, 503), query=ns,
        ),
        route(
            "patch",
            one,
            "Change a subscription's URL, patterns, headers or enabled; applies to events "
            "accepted after",
            "tenant",
            (200, "the subscription", sub),
            (*_BODY_ERRORS, 409, 413),
            SubscriptionPatch,
            ns,
        ),
        route(
            "delete", one, "Delete a subscription (deliveries already made stay); a repeat "
            "answers deleted: false", "tenant",
            (200, "deleted", subscriptions.Deleted), (422, 503), query=ns,
        ),
        route(
            "post",
            one + "/rotate-secret",
            "Give the subscription a new signing secret (shown once); events accepted after "
            "are signed with it",
            "tenant",
            (200, "the subscription, with its new secret", sub),
            (409, 422, 503),
            query=ns,
        ),
        route(
            "post",
            events.PATH,
            "Publish one event or a batch: one delivery job per enabled subscription whose "
            "patterns match its type, all stored together (202; 0 deliveries when none matches); "
            "with transaction_id, prepared in that open transaction and delivered only once it "
            "commits (404 if unknown, 409 with its final state if decided)",
            "tenant",
            (202, "accepted", events.EventsAnswer),
            (*_BODY_ERRORS, 404, 409, 413, 429),
            {"oneOf": [EventIn, EventBatchIn]},
            EnqueueQueryDoc,
        ),
        route(
            "get",
            events.PATH + "/{event}",
            "An event's deliveries: each subscription's job and its status",
            "tenant",
            (200, "the event", events.EventView),
            (422, 503),
            query=ns,
        ),
    )  # fmt: skip


def path_parameters(path: str) -> list[dict[str, Any]]:
    """The path parameters of these routes' ids."""
    out = []
    for name, pattern in (("subscription", SUBSCRIPTION_ID_PATTERN), ("event", EVENT_ID_PATTERN)):
        if "{" + name + "}" in path:
            schema_ = {"type": "string", "pattern": pattern}
            out.append({"name": name, "in": "path", "required": True, "schema": schema_})
    return out
