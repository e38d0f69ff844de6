"""``emq stack|api|worker|demo``: the commands that run EMQ's processes.

The servers' modules (aiohttp, kazoo, redis, uvloop) are imported when a command runs, not when
the parser is built, so that ``emq --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from emq.core.errors import EmqError

if TYPE_CHECKING:
    from emq.cli.common import Subparsers
    from emq.core.settings import Settings
    from emq.stack import Service
    from worker.settings import WorkerSettings


def _print_status(services: Sequence[Service], as_json: bool) -> None:
    statuses = [s.status() for s in services]
    if as_json:
        print(json.dumps({s.name: s.to_dict() for s in statuses}, indent=2))
        return
    for s in statuses:
        state = f"running  pid {s.pid}" if s.running else "stopped"
        print(f"{s.name:<10} {state:<18} {s.address:<16} data {s.data_dir}")


def cmd_stack(args: argparse.Namespace, settings: Settings) -> int:
    from emq.stack import local_stack

    services = local_stack(settings)
    if args.action == "up":
        for service in services:
            service.start()
    elif args.action == "down":
        for service in reversed(services):
            service.stop()
    _print_status(services, args.json)
    return 0


def cmd_api(args: argparse.Namespace, settings: Settings) -> int:
    import uvloop

    from emq.api.server import Listening, serve
    from emq.api.settings import MAX_WORKERS, ApiSettings

    api: ApiSettings = args.sections["api"]
    workers = api.workers if args.workers is None else args.workers
    if not 1 <= workers <= MAX_WORKERS:
        raise EmqError(f"--workers must be from 1 to {MAX_WORKERS}, not {workers}")
    if not settings.admin_token:
        raise EmqError("EMQ_ADMIN_TOKEN is not set: the admin API needs a token")
    url = urlsplit(settings.api_url)
    host = args.host or url.hostname or "127.0.0.1"
    port = args.port or url.port or 8080
    scheduler = args.sections["scheduler"]
    if workers == 1:
        uvloop.run(serve(settings, api, host, port, scheduler=scheduler))
        return 0
    from emq.api.supervisor import Supervisor

    def child(listening: Listening) -> None:
        uvloop.run(serve(settings, api, host, port, listening, scheduler))

    return Supervisor(child, workers, host, port, grace_s=api.shutdown_grace_s).run()


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    import uvloop

    from emq.compose import (
        open_config,
        open_demand,
        open_endpoint_board,
        open_fleet,
        open_history,
        open_jobs,
        open_queues,
        open_replays,
    )
    from emq.core.interfaces import AssignmentSource
    from worker.main import default_worker_id, run_worker
    from worker.standalone import StandaloneAssignment

    wsettings: WorkerSettings = args.sections["worker"]
    worker_id = args.id or wsettings.id or default_worker_id()

    async def main() -> None:
        queues = await open_queues(settings)
        config = await open_config(settings)
        history = open_history(settings)
        jobs = open_jobs(settings)
        replays = open_replays(settings)
        board = open_endpoint_board(settings)
        demand = open_demand(settings)
        assignment: AssignmentSource | None = None
        try:
            assignment = (
                StandaloneAssignment(config, settings.namespace)
                if args.standalone
                else await open_fleet(settings, args.sections["fleet"], worker_id, config)
            )
            await run_worker(
                worker_id,
                settings.namespace,
                wsettings,
                queues=queues,
                config=config,
                assignment=assignment,
                history=history,
                jobs=jobs,
                replays=replays,
                endpoints=board,
                demand=demand,
                allow=settings.push_allow_cidrs,
                max_group_qps=settings.max_group_qps,
            )
        finally:
            if assignment is not None:  # a fleet member leaves only once it released its groups
                await assignment.aclose()
            await replays.aclose()
            await jobs.aclose()
            await board.aclose()
            await demand.aclose()
            await history.aclose()
            await config.aclose()
            await queues.aclose()

    uvloop.run(main())
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from emq import demo

    result = demo.run(settings, args.duration, args.json, workers=args.workers)
    demo.print_summary(result, args.json)
    return 0


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON")


def add_commands(sub: Subparsers) -> None:
    """Register ``stack``, ``api``, ``demo`` and ``worker`` on ``emq``'s subparsers."""
    stack = sub.add_parser(
        "stack",
        help="local Redis + ZooKeeper on loopback (data under .emq/)",
        description="Start, stop or show the local stack: Redis (AOF on) on the port of "
        "EMQ_REDIS_URL (6390) and a standalone ZooKeeper on the port of EMQ_ZK_HOSTS (2191), "
        "with data and logs under EMQ_STACK_DIR (.emq). 'up' twice is harmless.",
    )
    stack.add_argument("action", choices=["up", "down", "status"])
    _json_flag(stack)
    stack.set_defaults(func=cmd_stack)

    api = sub.add_parser(
        "api",
        help="serve the tenant and admin HTTP API",
        description="Serve the HTTP API on the host and port of EMQ_API_URL until SIGTERM; "
        "in-flight requests finish before it exits. With --workers N (EMQ_API_WORKERS), N "
        "processes share the port (SO_REUSEPORT) under a supervisor that restarts one that "
        "dies and passes SIGTERM/SIGINT on.",
    )
    api.add_argument("--host", help="listen address (default: EMQ_API_URL's host)")
    api.add_argument("--port", type=int, help="listen port (default: EMQ_API_URL's port)")
    api.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="API processes on the port, 1 to 64 (default: EMQ_API_WORKERS, 1)",
    )
    api.set_defaults(func=cmd_api)

    demo = sub.add_parser(
        "demo",
        help="run the whole system locally with a noisy tenant and a hanging endpoint",
        description="Start the local stack (if not running), the API, workers joined through "
        "ZooKeeper and a local sink; drive four tenants (one noisy at 10x its quota, two steady, "
        "one whose endpoint hangs) with a live view; end with a summary and a capacity plan.",
    )
    demo.add_argument("--duration", type=float, help="seconds to run (default: until Ctrl-C)")
    demo.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    _json_flag(demo)
    demo.set_defaults(func=cmd_demo)

    worker = sub.add_parser(
        "worker",
        help="run a worker: fetch, rate-limit and push jobs",
        description="Run a worker until SIGTERM. Without --standalone it joins the fleet on "
        "ZooKeeper and owns the groups the elected leader assigns it (EMQ_FLEET_WEIGHT sets its "
        "share); --standalone owns every group itself (one machine, no fleet). Topic "
        "configuration is read from ZooKeeper either way. Settings: EMQ_WORKER_* (senders, "
        "timeouts, buffer_seconds, metrics_port, ...), EMQ_FLEET_*.",
    )
    worker.add_argument("--id", help="worker id (default: <hostname>-<pid>)")
    worker.add_argument("--standalone", action="store_true", help="own every group, no fleet")
    worker.set_defaults(func=cmd_worker)
