"""What the API commands of ``emq`` share: the token, the client run, tables and flags.

The API's commands (``tenant``, ``topic``, ``enqueue``, ``dlq``, ``fleet``, ``plan apply``) are
thin shells over :class:`emq.client.Client`. The API is at ``EMQ_API_URL``; admin commands
authenticate with ``--token`` or ``EMQ_ADMIN_TOKEN``, tenant commands with ``--token``,
``EMQ_TOKEN`` or ``EMQ_ADMIN_TOKEN``. An error from the API is one line,
``emq: error: <code>: <message> (field: X)``, and exit 1.

The client (aiohttp) and uvloop are imported when a command runs, not when the parser is built,
so that ``emq --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from emq.core.errors import EmqError
from emq.core.model import Namespace

if TYPE_CHECKING:
    from emq.client import Client
    from emq.core.settings import Settings

    # argparse has no public name for it, and it is generic only in typeshed
    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]
    Command: TypeAlias = Callable[[argparse.Namespace, Settings], int]
_T = TypeVar("_T")
EXIT_ERROR = 1


class CommandFailed(EmqError):
    """An EMQ error worded for the command line (``code: message (field: X)``)."""

    def __init__(self, error: EmqError, prefix: str = "") -> None:
        from emq.client import describe

        super().__init__(prefix + describe(error))
        self.code = error.code
        self.error = error


# ----------------------------------------------------------------------------- running


def token(args: argparse.Namespace, settings: Settings) -> str:
    """The API token of a command: ``--token``, else the one of its role's variable."""
    if args.token:
        return str(args.token)
    if args.role == "admin":
        return settings.admin_token
    return settings.token or settings.admin_token


def _namespace(args: argparse.Namespace, settings: Settings) -> str:
    return str(getattr(args, "namespace", None) or settings.namespace.value)


def run(
    args: argparse.Namespace, settings: Settings, work: Callable[[Client], Awaitable[_T]]
) -> _T:
    """Run ``work`` with a client on a fresh event loop; API errors become one CLI line."""
    import uvloop

    from emq.client import Client

    async def main() -> _T:
        namespace = _namespace(args, settings)
        retry_for = getattr(args, "retry_for", None)
        async with Client(
            settings.api_url,
            token(args, settings),
            namespace=namespace,
            retry_for_s=settings.client_retry_s if retry_for is None else retry_for,
            change_route="cli",  # recorded with quota, split, weight and cap changes
            change_reason=getattr(args, "why", None),
        ) as client:
            return await work(client)

    try:
        return uvloop.run(main())
    except CommandFailed:
        raise
    except EmqError as e:
        raise CommandFailed(e) from e


# ----------------------------------------------------------------------------- printing


def print_json(value: object) -> None:
    print(json.dumps(value, indent=2))


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[object]],
    empty: str,
    max_chars: int | None = 60,
) -> None:
    """Print ``rows`` in aligned columns under ``headers`` (``empty`` when there are none).

    A cell longer than ``max_chars`` is cut (``None``: never, for a table whose last column is
    a sentence to read whole, such as a plan's notes and errors).
    """
    cells = [list(headers)] + [[_cell(v, max_chars) for v in row] for row in rows]
    if len(cells) == 1:
        print(empty)
        return
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _cell(value: object, max_chars: int | None) -> str:
    text = "-" if value is None or value == "" else _printable(str(value))
    return text if max_chars is None or len(text) <= max_chars else text[: max_chars - 3] + "..."


def _printable(text: str) -> str:
    """``text`` with what a terminal must not get (a lone surrogate cannot even be printed; an
    escape sequence would be obeyed) written as Python escapes, e.g. ``\\ud800``, ``\\x1b``."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def when(epoch_s: object) -> str:
    """A UTC time for a table (``-`` for none)."""
    if not isinstance(epoch_s, int | float) or not epoch_s:
        return "-"
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def where(body: dict[str, Any]) -> str:
    """A topic's ``namespace/tenant/topic``."""
    return f"{body['namespace']}/{body['tenant']}/{body['topic']}"


# ----------------------------------------------------------------------------- parsers


def _options(*, namespace: bool) -> argparse.ArgumentParser:
    """The flags every API command shares."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--json", action="store_true", help="print the API's JSON answer")
    p.add_argument(
        "--token",
        help="API token (default: EMQ_ADMIN_TOKEN for admin commands; EMQ_TOKEN, else "
        "EMQ_ADMIN_TOKEN, for tenant commands)",
    )
    if namespace:
        p.add_argument(
            "--namespace",
            choices=[n.value for n in Namespace],
            help="the topic's namespace (default: EMQ_NAMESPACE, online)",
        )
    return p


def command(
    sub: Subparsers,
    name: str,
    func: Command,
    *,
    role: str,
    help: str,
    description: str,
    topic: bool = True,
) -> argparse.ArgumentParser:
    """Add an API command with the shared flags (``--namespace`` too for a ``topic`` one)."""
    parent = _options(namespace=topic)
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=description, parents=[parent]
    )
    p.set_defaults(func=func, role=role, parser=p)
    return p


def group(sub: Subparsers, name: str, help: str, description: str) -> Subparsers:
    """Add a command group (``emq topic ...``); its actions are added to what it returns."""
    p = sub.add_parser(name, help=help, description=description)
    return p.add_subparsers(dest="action", metavar="ACTION", required=True)


def why_flag(p: argparse.ArgumentParser) -> None:
    """``--why``: the reason recorded with the change a command makes (``emq changes``)."""
    p.add_argument("--why", metavar="TEXT", help="the reason, recorded with the change")


def tenant_and_topic(p: argparse.ArgumentParser) -> None:
    """The ``TENANT TOPIC`` arguments of a topic's commands."""
    p.add_argument("tenant", metavar="TENANT", help="tenant name")
    p.add_argument("topic", metavar="TOPIC", help="topic name")
