"""The ``emq`` command line: the entry point that reads the environment and wires things up.

Every command has ``--help``; bad input is one line on stderr (``emq: error: ...``) and a
non-zero exit; commands that print data print JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

from allocator.settings import FleetSettings
from emq import __version__
from emq.api.app import ApiSettings
from emq.cli.capacity import add_commands as add_capacity_commands
from emq.cli.commands import add_commands
from emq.cli.fleet import add_fleet_commands
from emq.cli.jobs import add_job_commands
from emq.cli.zk import add_zk_commands
from emq.core.errors import EmqError
from emq.core.settings import Settings, load, read_toml, unknown_env
from emq.stack import Service, local_stack
from worker.settings import WorkerSettings

EXIT_ERROR = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, naming where to get help."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


SECTIONS: dict[str, tuple[type[Any], str]] = {
    "api": (ApiSettings, "EMQ_API_"),
    "worker": (WorkerSettings, "EMQ_WORKER_"),
    "fleet": (FleetSettings, "EMQ_FLEET_"),
}


def _settings(args: argparse.Namespace) -> Settings:
    env = dict(os.environ)
    unknown = unknown_env(env, [Settings], {prefix: cls for cls, prefix in SECTIONS.values()})
    if unknown:
        raise EmqError(f"unknown setting {unknown[0]} in the environment (a typo?)")
    path = args.config or env.get("EMQ_CONFIG")
    table = dict(read_toml(path)) if path else {}
    sections = {name: table.pop(name, {}) for name in SECTIONS}
    args.sections = {
        name: load(
            cls, env, sections[name], env_prefix=prefix, source=f"config file {path} [{name}]"
        )
        for name, (cls, prefix) in SECTIONS.items()
    }
    return load(Settings, env, table, source=f"config file {path}")


# --------------------------------------------------------------------------- stack


def _print_status(services: Sequence[Service], as_json: bool) -> None:
    statuses = [s.status() for s in services]
    if as_json:
        print(json.dumps({s.name: s.to_dict() for s in statuses}, indent=2))
        return
    for s in statuses:
        state = f"running  pid {s.pid}" if s.running else "stopped"
        print(f"{s.name:<10} {state:<18} {s.address:<16} data {s.data_dir}")


def cmd_stack(args: argparse.Namespace, settings: Settings) -> int:
    services = local_stack(settings)
    if args.action == "up":
        for service in services:
            service.start()
    elif args.action == "down":
        for service in reversed(services):
            service.stop()
    _print_status(services, args.json)
    return 0


def cmd_config(args: argparse.Namespace, settings: Settings) -> int:
    values = dataclasses.asdict(settings)
    for secret in ("admin_token", "token", "zk_auth", "zk_previous_auth"):
        values[secret] = "***" if values[secret] else ""
    values["push_allow_cidrs"] = [str(n) for n in settings.push_allow_cidrs]
    values["namespace"] = settings.namespace.value
    values["durability"] = settings.durability.value
    if args.json:
        print(json.dumps(values, indent=2))
    else:
        for key, value in values.items():
            print(f"{key:<22} {value}")
    return 0


def cmd_api(args: argparse.Namespace, settings: Settings) -> int:
    import uvloop

    from emq.api.server import serve

    if not settings.admin_token:
        raise EmqError("EMQ_ADMIN_TOKEN is not set: the admin API needs a token")
    url = urlsplit(settings.api_url)
    host = args.host or url.hostname or "127.0.0.1"
    port = args.port or url.port or 8080
    uvloop.run(serve(settings, args.sections["api"], host, port))
    return 0


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    import uvloop

    from emq.compose import open_config, open_fleet, open_history, open_jobs, open_queues
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
                allow=settings.push_allow_cidrs,
                max_group_qps=settings.max_group_qps,
                jobs=jobs,
            )
        finally:
            if assignment is not None:  # a fleet member leaves only once it released its groups
                await assignment.aclose()
            await jobs.aclose()
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


def cmd_bench(args: argparse.Namespace, settings: Settings) -> int:
    if args.name == "faults":
        from emq.bench import faults

        doc = faults.run_cli(args.trials, args.duration_s, say=lambda s: print(s, file=sys.stderr))
        if args.out:
            Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
        print(json.dumps(doc, indent=2) if args.json else faults.summary(doc))
        return 0 if doc["pass"] else 1
    if args.name == "promises":
        from emq.bench import mixed

        doc = mixed.run_cli(args.seeds, args.duration_s, say=lambda s: print(s, file=sys.stderr))
        if args.out:
            Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
        print(json.dumps(doc, indent=2) if args.json else mixed.summary(doc))
        return 0 if doc["ok"] else 1
    if args.duration_s is None:
        args.duration_s = 10.0
    if args.name == "all":
        from emq.bench import suite

        # Checked before the first part runs, not minutes later when the plan bench starts.
        if args.duration_s <= 0:
            raise EmqError("--duration-s must be greater than 0")
        if args.rows < suite.MIN_ROWS:
            raise EmqError(f"--rows must be at least {suite.MIN_ROWS} (one topic-week of minutes)")
        doc = suite.run(args.duration_s, args.rows, say=lambda s: print(s, file=sys.stderr))
        if args.out:
            Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
        print(json.dumps(doc, indent=2) if args.json else doc["markdown"])
        return 0
    if args.name == "plan":
        from emq.cli.capacity import cmd_bench_plan

        return cmd_bench_plan(args, settings)
    if args.name == "dispatch":
        from emq.bench import dispatch

        result = dispatch.run(
            args.workload,
            noop=args.noop,
            duration_s=args.duration_s,
            competitor=args.competitor,
        )
        print(json.dumps(result, indent=2) if args.json else dispatch.summary(result))
        return 0
    from emq.bench import enqueue

    if args.durability == "compare":
        result = enqueue.compare(duration_s=args.duration_s)
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            for mode, figures in result["modes"].items():
                print(f"{mode:<8} " + "  ".join(f"{k} {v}" for k, v in figures.items()))
        return 0
    result = enqueue.run(duration_s=args.duration_s, durability=args.durability)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key in ("jobs_per_s", "requests_per_s", "p50_ms", "p99_ms"):
            print(f"{key:<16} {result[key]}")
    return 0


# --------------------------------------------------------------------------- parser


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="emq",
        description="EMQ: a multi-tenant, rate-limited scheduler for HTTP push jobs.",
        epilog="Settings come from EMQ_* environment variables and --config FILE (TOML).",
    )
    parser.add_argument("--version", action="version", version=f"emq {__version__}")
    parser.add_argument("--config", metavar="FILE", help="TOML settings file (env vars win)")
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=_Parser
    )

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
        "in-flight requests finish before it exits.",
    )
    api.add_argument("--host", help="listen address (default: EMQ_API_URL's host)")
    api.add_argument("--port", type=int, help="listen port (default: EMQ_API_URL's port)")
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

    bench = sub.add_parser(
        "bench",
        help="run a benchmark and print its figures",
        description="Benchmarks start their own servers on free loopback ports and print the "
        "measured figures (JSON with --json), with a description of the machine.",
    )
    bench.add_argument("name", choices=["enqueue", "dispatch", "plan", "faults", "promises", "all"])
    bench.add_argument(
        "--rows", type=int, default=10_000_000, help="plan: rows of synthetic history (10M)"
    )
    bench.add_argument(
        "--duration-s",
        type=float,
        default=None,
        help="seconds per run (10); faults: the length of each timed fault (ZooKeeper outage, "
        "hanging window, Redis load; the trials' own defaults if not given); promises: the "
        "length of each seed's run (30)",
    )
    bench.add_argument(
        "--seeds",
        type=int,
        default=3,
        help="promises: run the randomized mixed workloads of seeds 1..N (3)",
    )
    bench.add_argument(
        "--trials",
        default="",
        help="faults: comma-separated trials (worker_kill,redis_restart,zk_outage,sigstop,"
        "hanging,poison; default all)",
    )
    bench.add_argument(
        "--competitor",
        action="store_true",
        help="dispatch W3: run a busy-loop process beside the worker (pacing under CPU theft)",
    )
    bench.add_argument(
        "--workload",
        choices=["W2", "W3", "W4", "W5", "W6", "W6b", "W9", "W10", "W11", "all"],
        default="all",
        help="dispatch: which worker workload (default: all)",
    )
    bench.add_argument(
        "--noop", action="store_true", help="dispatch W2: deliver nothing, measure CPU per job"
    )
    bench.add_argument(
        "--out", metavar="FILE", help="all, faults, promises: also write the JSON document to FILE"
    )
    bench.add_argument(
        "--durability",
        choices=["default", "fsync", "replica", "compare"],
        default="default",
        help="enqueue: EMQ_DURABILITY of the API and the Redis it starts (fsync: appendfsync "
        "always; replica: plus one replica); compare: the three interleaved, 3 rounds, medians",
    )
    _json_flag(bench)
    bench.set_defaults(func=cmd_bench)

    config = sub.add_parser("config", help="show the effective settings")
    config.add_argument("action", choices=["show"])
    _json_flag(config)
    config.set_defaults(func=cmd_config)
    add_commands(sub)
    add_capacity_commands(sub)
    add_fleet_commands(sub)
    add_zk_commands(sub)
    add_job_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace, Settings], int] = args.func
    try:
        settings = _settings(args)
        logging.basicConfig(
            level=settings.log_level.upper(),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        return func(args, settings)
    except EmqError as e:
        print(f"emq: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `emq ... | head`: the reader left, which is not an error
        sys.stderr.close()
        return 0


def _one_line(e: Any) -> str:
    text = str(e).strip()
    return text if "\n" not in text else text.replace("\n", "\n  ")


if __name__ == "__main__":
    sys.exit(main())
