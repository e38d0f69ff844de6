"""``emq subscription create|list|show|update|delete|rotate-secret`` and ``emq event
publish|show``: a topic's subscriptions and the events published to it (issue 28).

A subscription's signing secret is printed once, by ``create`` and ``rotate-secret``. Each
command prints a readable line or table, or the API's JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from emq.cli.common import command, group, print_json, run, table, tenant_and_topic, when
from emq.core.errors import InvalidInput

if TYPE_CHECKING:
    from emq.cli.common import Subparsers
    from emq.core.settings import Settings


def _header(text: str) -> tuple[str, str]:
    """An argparse type for ``--header 'Name: value'``."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected 'Name: value', got {text!r}")
    return name.strip(), value.strip()


def _headers(args: argparse.Namespace) -> dict[str, str] | None:
    if args.header is None:
        return None
    headers: dict[str, str] = {}
    for name, value in args.header:
        if name.lower() in (h.lower() for h in headers):
            args.parser.error(f"argument --header: {name!r} given twice")
        headers[name] = value
    return headers


def _show(body: dict[str, Any]) -> None:
    state = "enabled" if body["enabled"] else "disabled"
    print(f"subscription {body['id']} ({state}): {', '.join(body['event_types'])} -> {body['url']}")
    for name, value in body["headers"].items():
        print(f"  header {name}: {value}")
    if "secret" in body:
        print(f"  secret {body['secret']}  (shown once: keep it to verify the signatures)")


def _print(args: argparse.Namespace, body: dict[str, Any]) -> int:
    if args.json:
        print_json(body)
    else:
        _show(body)
    return 0


def cmd_create(args: argparse.Namespace, settings: Settings) -> int:
    body = run(
        args,
        settings,
        lambda c: c.create_subscription(
            args.tenant,
            args.topic,
            args.url,
            args.type,
            headers=_headers(args),
            enabled=not args.disabled,
        ),
    )
    return _print(args, body)


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    rows = run(args, settings, lambda c: c.list_subscriptions(args.tenant, args.topic))
    if args.json:
        print_json({"subscriptions": rows})
        return 0
    cells = [
        (
            s["id"],
            "yes" if s["enabled"] else "no",
            ",".join(s["event_types"]),
            s["url"],
            when(s["created_at"]),
        )
        for s in rows
    ]
    table(("ID", "ENABLED", "TYPES", "URL", "CREATED"), cells, "no subscriptions")
    return 0


def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.get_subscription(args.tenant, args.topic, args.id))
    return _print(args, body)


def cmd_update(args: argparse.Namespace, settings: Settings) -> int:
    changes: dict[str, Any] = {}
    if args.url is not None:
        changes["url"] = args.url
    if args.type is not None:
        changes["event_types"] = args.type
    if args.header is not None or args.no_headers:
        changes["headers"] = _headers(args) or {}
    if args.enable or args.disable:
        changes["enabled"] = bool(args.enable)
    if not changes:
        raise InvalidInput(
            None,
            "nothing to change: give --url, --type, --header, --no-headers, --enable or --disable",
        )
    body = run(
        args, settings, lambda c: c.update_subscription(args.tenant, args.topic, args.id, **changes)
    )
    return _print(args, body)


def cmd_delete(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.delete_subscription(args.tenant, args.topic, args.id))
    if args.json:
        print_json(body)
    elif body["deleted"]:
        print(f"subscription {args.id} deleted (events accepted before keep their deliveries)")
    else:
        print(f"no subscription {args.id}: nothing deleted")
    return 0


def cmd_rotate(args: argparse.Namespace, settings: Settings) -> int:
    body = run(
        args, settings, lambda c: c.rotate_subscription_secret(args.tenant, args.topic, args.id)
    )
    return _print(args, body)


def cmd_publish(args: argparse.Namespace, settings: Settings) -> int:
    try:
        payload = json.loads(args.payload) if args.payload is not None else None
    except ValueError as e:
        raise InvalidInput("--payload", f"is not JSON: {e}") from None
    body = run(
        args,
        settings,
        lambda c: c.publish_event(
            args.tenant,
            args.topic,
            args.type,
            payload,
            key=args.key,
            idempotency_key=args.idempotency_key,
            priority=args.priority,
            delay_s=args.delay,
            transaction_id=args.transaction_id,
        ),
    )
    if args.json:
        print_json(body)
    else:
        dup = f" ({body['duplicates']} already stored)" if body["duplicates"] else ""
        held = f", prepared in transaction {args.transaction_id}" if args.transaction_id else ""
        print(f"event {body['event_id']} accepted: {body['deliveries']} deliveries{dup}{held}")
    return 0


def cmd_event_show(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.event_status(args.tenant, args.topic, args.event))
    if args.json:
        print_json(body)
        return 0
    print(f"event {body['event_id']} ({body['type']}), accepted {body['accepted_at']}")
    rows = [(d["subscription"], d["job_id"], d["state"]) for d in body["deliveries"]]
    table(("SUBSCRIPTION", "JOB", "STATE"), rows, "no deliveries (no subscription matched)")
    return 0


def _target_flags(p: argparse.ArgumentParser, *, required: bool) -> None:
    p.add_argument("--url", required=required, help="where deliveries are POSTed")
    p.add_argument(
        "--type",
        action="append",
        metavar="PATTERN",
        required=required,
        help="event types to deliver (repeatable): invoice.paid, invoice.*, *",
    )
    p.add_argument(
        "--header",
        action="append",
        type=_header,
        metavar="'NAME: VALUE'",
        help="a header sent with every delivery (repeatable)",
    )


def _one(sub: Subparsers, name: str, func: Any, help: str, description: str) -> Any:
    p = command(sub, name, func, role="tenant", help=help, description=description)
    tenant_and_topic(p)
    p.add_argument("id", metavar="ID", help="the subscription's id (sub_...)")
    return p


def add_commands(sub: Subparsers) -> None:
    """Register ``emq subscription ...`` and ``emq event ...``."""
    subs = group(
        sub,
        "subscription",
        "a topic's event subscriptions",
        "Endpoints subscribed to a topic's events by type; each delivery is a job.",
    )
    create = command(
        subs,
        "create",
        cmd_create,
        role="tenant",
        help="subscribe an endpoint",
        description="Subscribe --url to the topic's events matching a --type "
        "pattern; prints its signing secret, shown once.",
    )
    tenant_and_topic(create)
    _target_flags(create, required=True)
    create.add_argument("--disabled", action="store_true", help="create it disabled")
    listing = command(
        subs,
        "list",
        cmd_list,
        role="tenant",
        help="list subscriptions",
        description="A topic's subscriptions, oldest first.",
    )
    tenant_and_topic(listing)
    _one(subs, "show", cmd_show, "show a subscription", "One subscription (not its secret).")
    update = _one(
        subs,
        "update",
        cmd_update,
        "change a subscription",
        "Change its URL, patterns, headers or state; applies to events accepted after.",
    )
    _target_flags(update, required=False)
    update.add_argument("--no-headers", action="store_true", help="remove every header")
    state = update.add_mutually_exclusive_group()
    state.add_argument("--enable", action="store_true", help="deliver to it again")
    state.add_argument("--disable", action="store_true", help="stop delivering to it")
    _one(
        subs,
        "delete",
        cmd_delete,
        "delete a subscription",
        "Delete it; deliveries of events accepted before stay.",
    )
    _one(
        subs,
        "rotate-secret",
        cmd_rotate,
        "give it a new signing secret",
        "A new secret (printed once) for the events accepted after.",
    )
    events = group(
        sub,
        "event",
        "publish events to a topic's subscriptions",
        "Publish an event: one delivery job per matching enabled subscription.",
    )
    publish = command(
        events,
        "publish",
        cmd_publish,
        role="tenant",
        help="publish an event",
        description="Publish one event of --type with a JSON --payload.",
    )
    tenant_and_topic(publish)
    publish.add_argument("--type", required=True, help="the event's type (invoice.paid)")
    publish.add_argument("--payload", metavar="JSON", help="the event's data, as JSON")
    publish.add_argument("--key", help="orders the deliveries of this key per subscription")
    publish.add_argument("--idempotency-key", help="a repeat is answered, not stored again")
    publish.add_argument("--priority", choices=["high", "medium", "low"])
    publish.add_argument("--delay", type=float, metavar="S", help="deliver S seconds later")
    publish.add_argument(
        "--transaction-id",
        metavar="ID",
        help="prepare the deliveries in this open transaction (delivered once it commits)",
    )
    show = command(
        events,
        "show",
        cmd_event_show,
        role="tenant",
        help="an event's deliveries",
        description="Each subscription's delivery of the event and its state.",
    )
    tenant_and_topic(show)
    show.add_argument("event", metavar="EVENT", help="the event's id (evt_...)")
