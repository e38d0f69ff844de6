"""``emq topic set-endpoints|enable-endpoint``, and the endpoint lines of ``topic show``.

Per-endpoint flow control (docs/concepts/flow-control.md): ``set-endpoints`` changes a topic's
policy (only the flags given), ``enable-endpoint`` re-enables an endpoint the workers disabled
after repeated failures, and ``topic show`` lists each endpoint's state, rate and why.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from emq.cli.common import CommandFailed, command, print_json, run, table, tenant_and_topic, where
from emq.core.endpoints import EndpointPolicy
from emq.core.errors import InvalidInput

if TYPE_CHECKING:
    from emq.core.settings import Settings

_DEFAULT = EndpointPolicy()
_FLAGS = (
    ("decrease", float, "X", f"rate multiplier on a 429/503 or a slow p90 ({_DEFAULT.decrease})"),
    ("increase_qps", float, "X", f"rate added per second of success ({_DEFAULT.increase_qps})"),
    ("min_qps", float, "X", f"never cut below ({_DEFAULT.min_qps})"),
    ("latency_ms", int, "MS", "p90 push latency that cuts the rate (0: off, the default)"),
    ("disable_after", int, "N", "consecutive failures that disable an endpoint (0: never)"),
    ("disable_after_s", int, "S", f"... spanning at least S seconds ({_DEFAULT.disable_after_s})"),
)


def endpoint_lines(body: dict[str, Any]) -> list[tuple[str, object]]:
    """``topic show``'s line for the policy (when it does anything)."""
    policy = body.get("endpoints")
    if not policy or not (policy["adaptive"] or policy["disable_after"]):
        return []
    parts = []
    if policy["adaptive"]:
        parts.append(
            f"adaptive (x{policy['decrease']:g} on 429/503, +{policy['increase_qps']:g}/s"
            + (f", p90 > {policy['latency_ms']} ms" if policy["latency_ms"] else "")
            + ")"
        )
    if policy["disable_after"]:
        parts.append(
            f"disable after {policy['disable_after']} failures over {policy['disable_after_s']} s"
        )
    return [("endpoints", "; ".join(parts))]


def print_status(body: dict[str, Any]) -> None:
    """``topic show``'s table of the endpoints workers follow (nothing when none)."""
    rows = [
        (
            s["endpoint"],
            s["worker"],
            s["state"],
            f"{s['rate_qps']:g}",
            s["parked"],
            s["failures"],
            s["reason"] or "-",
        )
        for s in body.get("endpoint_status", ())
    ]
    if rows:
        print()
        headings = ("ENDPOINT", "WORKER", "STATE", "RATE/S", "PARKED", "FAILURES", "WHY")
        table(headings, rows, "")


def cmd_set_endpoints(args: argparse.Namespace, settings: Settings) -> int:
    changes: dict[str, Any] = {name: getattr(args, name) for name, *_ in _FLAGS}
    changes["adaptive"] = args.adaptive
    changes = {k: v for k, v in changes.items() if v is not None}
    if not changes:
        raise CommandFailed(InvalidInput(None, "give --adaptive/--no-adaptive or another flag"))
    body = run(args, settings, lambda c: c.update_topic(args.tenant, args.topic, endpoints=changes))
    if args.json:
        print_json(body)
    else:
        line = endpoint_lines(body)
        print(f"topic {where(body)}: {line[0][1] if line else 'no endpoint flow control'}")
    return 0


def cmd_enable_endpoint(args: argparse.Namespace, settings: Settings) -> int:
    body = run(
        args,
        settings,
        lambda c: c.enable_endpoint(args.tenant, args.topic, args.endpoint),
    )
    if args.json:
        print_json(body)
    else:
        at = time.strftime("%H:%M:%S", time.localtime(body["enabled_at"]))
        print(f"topic {where(body)}: {body['enabled']} re-enabled at {at}")
    return 0


def add_commands(topic: Any) -> None:
    """Register the endpoint commands under ``emq topic``."""
    set_ep = command(
        topic,
        "set-endpoints",
        cmd_set_endpoints,
        role="admin",
        help="per-endpoint flow control of a topic: adaptive rate, auto-disable (admin)",
        description="Change how a topic treats each endpoint (host:port): an adaptive rate "
        "(cut on 429/503 or a slow p90, Retry-After held for the endpoint, raised while it "
        "succeeds, up to the quota) and auto-disable after repeated failures. Only the flags "
        "given change.",
    )
    tenant_and_topic(set_ep)
    adaptive = set_ep.add_mutually_exclusive_group()
    adaptive.add_argument(
        "--adaptive", dest="adaptive", action="store_true", default=None, help="AIMD rate on"
    )
    adaptive.add_argument("--no-adaptive", dest="adaptive", action="store_false", help="off")
    for name, kind, metavar, text in _FLAGS:
        flag = "--" + name.replace("_", "-")
        set_ep.add_argument(flag, dest=name, type=kind, metavar=metavar, help=text)
    enable = command(
        topic,
        "enable-endpoint",
        cmd_enable_endpoint,
        role="admin",
        help="re-enable an endpoint workers disabled (admin)",
        description="Re-enable an endpoint the workers disabled after repeated failures; "
        "its held jobs go again. ENDPOINT is host:port as 'topic show' lists it, or '*'.",
    )
    tenant_and_topic(enable)
    enable.add_argument("endpoint", metavar="ENDPOINT", help="host:port, or * for every one")
