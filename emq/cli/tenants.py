"""``emq tenant create|list|set-cap``: the tenants, through the admin API.

Each prints a readable table or lines, or the API's JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from emq.cli.common import CommandFailed, command, group, print_json, run, table, when, why_flag
from emq.core.errors import InvalidInput

if TYPE_CHECKING:
    from emq.cli.common import Subparsers
    from emq.core.settings import Settings

TOKEN_ONCE = "the token is shown only this once: store it now"


def cmd_tenant_create(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.create_tenant(args.tenant, args.name))
    if args.json:
        print_json(body)
        return 0
    label = f" ({body['name']})" if body.get("name") else ""
    print(f"created tenant {body['tenant']}{label}")
    print(f"token  {body['token']}")
    print(f"({TOKEN_ONCE})", file=sys.stderr)
    return 0


def _caps(row: dict[str, object]) -> str:
    caps = row.get("qps_caps") or {}
    assert isinstance(caps, dict)
    return ", ".join(f"{ns} {q}" for ns, q in caps.items()) or "-"


def cmd_tenant_list(args: argparse.Namespace, settings: Settings) -> int:
    tenants = run(args, settings, lambda c: c.list_tenants())
    if args.json:
        print_json({"tenants": tenants})
        return 0
    rows = [(t["tenant"], t.get("name"), when(t.get("created_at")), _caps(t)) for t in tenants]
    table(("TENANT", "NAME", "CREATED", "CAPS"), rows, "no tenants")
    return 0


def cmd_tenant_set_cap(args: argparse.Namespace, settings: Settings) -> int:
    cap = None if args.clear else args.qps
    if (cap is None) == (not args.clear) or (cap is not None and cap < 1):
        raise CommandFailed(InvalidInput("qps", "give a cap of at least 1 QPS, or --clear"))
    body = run(args, settings, lambda c: c.set_tenant_cap(args.tenant, cap))
    if args.json:
        print_json(body)
        return 0
    caps = body.get("qps_caps") or {}
    shown = ", ".join(f"{ns} {q} QPS" for ns, q in caps.items()) or "none"
    print(f"tenant {body['tenant']}: caps {shown}")
    return 0


def add_commands(sub: Subparsers) -> None:
    """Register ``tenant`` on ``emq``'s subparsers."""
    tenant = group(
        sub,
        "tenant",
        "create and list tenants (admin)",
        "Tenants own topics and enqueue jobs with their own API token.",
    )
    create = command(
        tenant,
        "create",
        cmd_tenant_create,
        role="admin",
        topic=False,
        help="create a tenant and print its API token",
        description="Create a tenant. Its API token is printed once (only a hash is stored): "
        "give it to the tenant as EMQ_TOKEN.",
    )
    create.add_argument("tenant", metavar="NAME", help="tenant name: A-Z a-z 0-9 _ . - (max 64)")
    create.add_argument("--name", help="display name")
    command(
        tenant,
        "list",
        cmd_tenant_list,
        role="admin",
        topic=False,
        help="list tenants",
        description="List every tenant with its display name and caps.",
    )
    cap = command(
        tenant,
        "set-cap",
        cmd_tenant_set_cap,
        role="admin",
        help="set a tenant's QPS cap over all its topics in a namespace (admin)",
        description="Cap the deliveries of all of a tenant's topics in one namespace together; "
        "its backlogged topics share the cap by weight (emq topic set-weight). Workers apply "
        "it within a second.",
    )
    cap.add_argument("tenant", metavar="TENANT", help="tenant name")
    cap.add_argument("qps", metavar="QPS", type=int, nargs="?", help="the cap")
    cap.add_argument("--clear", action="store_true", help="remove the cap")
    why_flag(cap)
