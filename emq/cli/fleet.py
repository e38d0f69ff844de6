"""``emq fleet workers|simulate``: the worker fleet as the API reports it, and its maths at scale.

``emq fleet workers`` shows ``GET /v1/workers`` (admin): each registered worker with its groups,
their fencing epochs and its delivered/s; the leader is marked. ``emq fleet simulate --groups N
--workers M`` runs the assignment function alone (no ZooKeeper) and prints how long it takes,
how even it is, and how many groups move when one worker joins or leaves.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from emq.cli.common import command, group, print_json, run, table
from emq.core.errors import InvalidInput

if TYPE_CHECKING:
    from emq.cli.common import Subparsers
    from emq.client import Client
    from emq.core.settings import Settings


def cmd_fleet_workers(args: argparse.Namespace, settings: Settings) -> int:
    namespace = args.namespace or settings.namespace.value

    async def work(client: Client) -> dict[str, Any]:
        body = await client.request("GET", "v1/workers", query={"namespace": namespace})
        return dict(body) if isinstance(body, dict) else {}

    body = run(args, settings, work)
    if args.json:
        print_json(body)
        return 0
    print(f"generation {body['generation']}  leader {body['leader'] or '-'}")
    rows = [
        (
            ("* " if w["leader"] else "  ") + w["id"],
            w["host"],
            w["pid"],
            w.get("metrics") or "-",
            w["weight"],
            w["group_count"],
            w["delivered_per_s"],
            ", ".join(f"{g['group']}@{g['epoch']}" for g in w["groups"][:3])
            + (" ..." if w["group_count"] > 3 else ""),
        )
        for w in body["workers"]
    ]
    table(
        ("worker", "host", "pid", "metrics", "weight", "groups", "delivered/s", "groups@epoch"),
        rows,
        "no workers registered",
    )
    if body["orphans"]:
        print(f"{len(body['orphans'])} group(s) still assigned to departed workers")
    return 0


def cmd_fleet_simulate(args: argparse.Namespace, settings: Settings) -> int:
    from allocator.simulate import simulate

    for name, lo in (("groups", 1), ("workers", 2), ("trials", 1), ("vnodes", 1)):
        if getattr(args, name) < lo:
            raise InvalidInput(name, f"must be at least {lo}")
    result = simulate(args.groups, args.workers, trials=args.trials, vnodes=args.vnodes)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:<26} {value}")
    return 0


def add_fleet_commands(sub: Subparsers) -> None:
    """Register ``fleet workers`` and ``fleet simulate`` on ``emq``'s subparsers."""
    fleet = group(
        sub,
        "fleet",
        "the worker fleet: members and assignment",
        "Workers join the fleet on ZooKeeper; an elected leader assigns groups to them by "
        "consistent hashing with bounded loads.",
    )
    command(
        fleet,
        "workers",
        cmd_fleet_workers,
        role="admin",
        help="list the workers with their groups, epochs and rates (admin)",
        description="Show GET /v1/workers: every registered worker, its groups with their "
        "fencing epochs, its delivered/s, and which one leads.",
    )
    simulate = fleet.add_parser(
        "simulate",
        help="measure the assignment at fleet scale (no servers needed)",
        description="Assign N synthetic groups to M workers and print the time to compute it, "
        "the max/mean load, and the fraction of groups moved when one worker joins and when one "
        "leaves (averaged over --trials).",
    )
    simulate.add_argument("--groups", type=int, required=True, metavar="N")
    simulate.add_argument("--workers", type=int, required=True, metavar="M")
    simulate.add_argument("--trials", type=int, default=5, help="joins and leaves averaged")
    simulate.add_argument("--vnodes", type=int, default=160, help="ring points per worker")
    simulate.add_argument("--json", action="store_true", help="print JSON")
    simulate.set_defaults(func=cmd_fleet_simulate)
