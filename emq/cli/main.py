"""The ``emq`` command line: the parser and the entry point.

Every command has ``--help``; bad input is one line on stderr (``emq: error: ...``) and a
non-zero exit; commands that print data print JSON with ``--json``. Each command group lives in
its own module of :mod:`emq.cli`, which registers its parsers (``add_commands``) and imports
what its commands need (aiohttp, kazoo, redis, pyspark, uvloop) only when one runs: building the
parser, and so ``emq --help``, imports none of them (``tests/emq/test_cli_lazy.py``).
The settings are read here, once, by :func:`emq.cli.config.load_settings`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, cast

from emq import __version__
from emq.cli import (
    attempts,
    bench,
    capacity,
    changes,
    config,
    dlq,
    enqueue,
    fleet,
    jobs,
    schedules,
    services,
    subscriptions,
    tenants,
    topics,
    transactions,
    zk,
)
from emq.core.errors import EmqError

if TYPE_CHECKING:
    from emq.cli.common import Subparsers
    from emq.core.settings import Settings

EXIT_ERROR = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, naming where to get help."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="emq",
        description="EMQ: a multi-tenant, rate-limited scheduler for HTTP push jobs.",
        epilog="Settings come from EMQ_* environment variables and --config FILE (TOML); "
        "'emq config show' lists them all.",
    )
    parser.add_argument("--version", action="version", version=f"emq {__version__}")
    parser.add_argument("--config", metavar="FILE", help="TOML settings file (env vars win)")
    sub = cast(
        "Subparsers",
        parser.add_subparsers(
            dest="command", metavar="COMMAND", required=True, parser_class=_Parser
        ),
    )
    services.add_commands(sub)
    bench.add_commands(sub)
    config.add_commands(sub)
    tenants.add_commands(sub)
    topics.add_commands(sub)
    enqueue.add_commands(sub)
    dlq.add_commands(sub)
    jobs.add_commands(sub)
    subscriptions.add_commands(sub)
    transactions.add_commands(sub)
    attempts.add_commands(sub)
    capacity.add_commands(sub)
    fleet.add_fleet_commands(sub)
    zk.add_zk_commands(sub)
    schedules.add_commands(sub)
    changes.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace, Settings], int] = args.func
    try:
        settings = config.load_settings(args)
        import logging  # here: `emq --help` has exited by now and need not pay for it

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
