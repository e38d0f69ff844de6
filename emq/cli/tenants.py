"""``emq tenant create|list``: the tenants, through the admin API.

Each prints a readable table or lines, or the API's JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from emq.cli.common import command, group, print_json, run, table, when

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


def cmd_tenant_list(args: argparse.Namespace, settings: Settings) -> int:
    tenants = run(args, settings, lambda c: c.list_tenants())
    if args.json:
        print_json({"tenants": tenants})
        return 0
    rows = [(t["tenant"], t.get("name"), when(t.get("created_at"))) for t in tenants]
    table(("TENANT", "NAME", "CREATED"), rows, "no tenants")
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
        description="List every tenant with its display name.",
    )
