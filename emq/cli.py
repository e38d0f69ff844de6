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
from typing import Any, NoReturn

from emq import __version__
from emq.errors import EmqError
from emq.settings import Settings, load, read_toml, unknown_env
from emq.stack import Service, local_stack

EXIT_ERROR = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, naming where to get help."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _settings(args: argparse.Namespace) -> Settings:
    env = dict(os.environ)
    unknown = unknown_env(env, [Settings])
    if unknown:
        raise EmqError(f"unknown setting {unknown[0]} in the environment (a typo?)")
    path = args.config or env.get("EMQ_CONFIG")
    table = read_toml(path) if path else None
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
    values["admin_token"] = "***" if settings.admin_token else ""
    values["push_allow_cidrs"] = [str(n) for n in settings.push_allow_cidrs]
    values["namespace"] = settings.namespace.value
    if args.json:
        print(json.dumps(values, indent=2))
    else:
        for key, value in values.items():
            print(f"{key:<22} {value}")
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

    config = sub.add_parser("config", help="show the effective settings")
    config.add_argument("action", choices=["show"])
    _json_flag(config)
    config.set_defaults(func=cmd_config)
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


def _one_line(e: Any) -> str:
    text = str(e).strip()
    return text if "\n" not in text else text.replace("\n", "\n  ")


if __name__ == "__main__":
    sys.exit(main())
