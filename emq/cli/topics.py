"""The tenant and admin commands of ``emq``: thin shells over :class:`emq.client.Client`.

``tenant create|list``, ``topic create|list|show|set-quota|pause|resume``, ``enqueue`` and
``dlq list|replay``. Each prints a readable table or lines, or the API's JSON with ``--json``.
The API is at ``EMQ_API_URL``; admin commands authenticate with ``--token`` or
``EMQ_ADMIN_TOKEN``, tenant commands with ``--token``, ``EMQ_TOKEN`` or ``EMQ_ADMIN_TOKEN``.

An error from the API is one line, ``emq: error: <code>: <message> (field: X)``, and exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import uvloop

from emq.client import Client, describe
from emq.core.errors import EmqError, InvalidInput
from emq.core.model import DLQ_MAX_AGE_S, DLQ_MAX_ENTRIES, Job, Namespace, Priority, PriorityMode
from emq.core.settings import Settings

_T = TypeVar("_T")
if TYPE_CHECKING:  # argparse has no public name for it, and it is generic only in typeshed
    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]
EXIT_ERROR = 1
TOKEN_ONCE = "the token is shown only this once: store it now"


class CommandFailed(EmqError):
    """An EMQ error worded for the command line (``code: message (field: X)``)."""

    def __init__(self, error: EmqError, prefix: str = "") -> None:
        super().__init__(prefix + describe(error))
        self.code = error.code
        self.error = error


# ----------------------------------------------------------------------------- running


def _token(args: argparse.Namespace, settings: Settings) -> str:
    if args.token:
        return str(args.token)
    if args.role == "admin":
        return settings.admin_token
    return settings.token or settings.admin_token


def _namespace(args: argparse.Namespace, settings: Settings) -> str:
    return str(getattr(args, "namespace", None) or settings.namespace.value)


def _run(
    args: argparse.Namespace, settings: Settings, work: Callable[[Client], Awaitable[_T]]
) -> _T:
    """Run ``work`` with a client on a fresh event loop; API errors become one CLI line."""

    async def main() -> _T:
        namespace = _namespace(args, settings)
        retry_for = getattr(args, "retry_for", None)
        async with Client(
            settings.api_url,
            _token(args, settings),
            namespace=namespace,
            retry_for_s=settings.client_retry_s if retry_for is None else retry_for,
        ) as client:
            return await work(client)

    try:
        return uvloop.run(main())
    except CommandFailed:
        raise
    except EmqError as e:
        raise CommandFailed(e) from e


def _print_json(value: object) -> None:
    print(json.dumps(value, indent=2))


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]], empty: str) -> None:
    cells = [list(headers)] + [[_cell(v) for v in row] for row in rows]
    if len(cells) == 1:
        print(empty)
        return
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _cell(value: object) -> str:
    text = "-" if value is None or value == "" else _printable(str(value))
    return text if len(text) <= 60 else text[:57] + "..."


def _printable(text: str) -> str:
    """``text`` with what a terminal must not get (a lone surrogate cannot even be printed; an
    escape sequence would be obeyed) written as Python escapes, e.g. ``\\ud800``, ``\\x1b``."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _when(epoch_s: object) -> str:
    if not isinstance(epoch_s, int | float) or not epoch_s:
        return "-"
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _where(body: dict[str, Any]) -> str:
    return f"{body['namespace']}/{body['tenant']}/{body['topic']}"


# ----------------------------------------------------------------------------- tenants


def cmd_tenant_create(args: argparse.Namespace, settings: Settings) -> int:
    body = _run(args, settings, lambda c: c.create_tenant(args.tenant, args.name))
    if args.json:
        _print_json(body)
        return 0
    label = f" ({body['name']})" if body.get("name") else ""
    print(f"created tenant {body['tenant']}{label}")
    print(f"token  {body['token']}")
    print(f"({TOKEN_ONCE})", file=sys.stderr)
    return 0


def cmd_tenant_list(args: argparse.Namespace, settings: Settings) -> int:
    tenants = _run(args, settings, lambda c: c.list_tenants())
    if args.json:
        _print_json({"tenants": tenants})
        return 0
    rows = [(t["tenant"], t.get("name"), _when(t.get("created_at"))) for t in tenants]
    _table(("TENANT", "NAME", "CREATED"), rows, "no tenants")
    return 0


# ----------------------------------------------------------------------------- topics


def _print_topic(body: dict[str, Any]) -> None:
    shares = ", ".join(f"{n}x{q}" for q, n in Counter(body["group_qps"]).items())
    retry = ", ".join(f"{k} {v}" for k, v in body["retry"].items())
    lines = [
        ("topic", _where(body)),
        ("qps", f"{body['qps']} in {body['groups']} groups of {shares} QPS"),
        ("paused", "yes" if body["paused"] else "no"),
        ("max_backlog", body["max_backlog"]),
        ("endpoint_concurrency", body["endpoint_concurrency"]),
        ("priority_mode", body["priority_mode"]),
        ("retry", retry),
        ("dlq_retention", _dlq_retention(body)),
    ]
    if "backlog" in body:
        queued = ", ".join(f"{p} {n}" for p, n in body["backlog"].items())
        lines.append(("backlog", f"{queued}; delayed {body['delayed']}"))
    if "secret" in body:
        lines.append(("secret", body["secret"]))
    for key, value in lines:
        print(f"{key:<21} {value}")
    if len(body.get("per_group", ())) > 1:
        print()
        rows = [
            (g["index"], *(g["backlog"][p.value] for p in Priority), g["delayed"])
            for g in body["per_group"]
        ]
        _table(("GROUP", "HIGH", "MEDIUM", "LOW", "DELAYED"), rows, "")


def _dlq_retention(body: dict[str, Any]) -> str:
    """A topic's DLQ retention; "?" from an API that predates it."""
    entries, age = body.get("dlq_max_entries"), body.get("dlq_max_age_s")
    if entries is None or age is None:
        return "?"
    return f"{entries} letters per group, none older than {age} s ({age / 86400:g} d)"


def _show(args: argparse.Namespace, body: dict[str, Any], verb: str | None = None) -> int:
    if args.json:
        _print_json(body)
    elif verb is None:
        _print_topic(body)
    else:
        print(
            f"{verb} topic {_where(body)}: qps {body['qps']} in {body['groups']} groups, "
            f"{'paused' if body['paused'] else 'running'}"
        )
    return 0


def cmd_topic_create(args: argparse.Namespace, settings: Settings) -> int:
    retry = {"max_attempts": args.max_attempts} if args.max_attempts is not None else None
    body = _run(
        args,
        settings,
        lambda c: c.create_topic(
            args.tenant,
            args.topic,
            args.qps,
            retry=retry,
            endpoint_concurrency=args.endpoint_concurrency,
            max_backlog=args.max_backlog,
            priority_mode=args.priority_mode,
            dlq_max_entries=args.dlq_max_entries,
            dlq_max_age_s=args.dlq_max_age_s,
        ),
    )
    if not args.json:
        print(f"created topic {_where(body)}")
    return _show(args, body)


def cmd_topic_list(args: argparse.Namespace, settings: Settings) -> int:
    topics = _run(args, settings, lambda c: c.list_topics(args.tenant))
    if args.json:
        _print_json({"topics": topics})
        return 0
    rows = [
        (t["topic"], t["namespace"], t["qps"], t["groups"], "yes" if t["paused"] else "no")
        for t in topics
    ]
    _table(("TOPIC", "NAMESPACE", "QPS", "GROUPS", "PAUSED"), rows, "no topics")
    return 0


def cmd_topic_show(args: argparse.Namespace, settings: Settings) -> int:
    return _show(args, _run(args, settings, lambda c: c.get_topic(args.tenant, args.topic)))


def cmd_topic_set_quota(args: argparse.Namespace, settings: Settings) -> int:
    body = _run(args, settings, lambda c: c.set_quota(args.tenant, args.topic, args.qps))
    return _show(args, body, "updated")


def cmd_topic_set_dlq(args: argparse.Namespace, settings: Settings) -> int:
    changes = {"dlq_max_entries": args.max_entries, "dlq_max_age_s": args.max_age_s}
    changes = {k: v for k, v in changes.items() if v is not None}
    if not changes:
        raise CommandFailed(InvalidInput(None, "give --max-entries and/or --max-age-s"))
    body = _run(args, settings, lambda c: c.update_topic(args.tenant, args.topic, **changes))
    return _show(args, body)


def cmd_topic_pause(args: argparse.Namespace, settings: Settings) -> int:
    body = _run(args, settings, lambda c: c.pause(args.tenant, args.topic))
    return _show(args, body, "paused")


def cmd_topic_resume(args: argparse.Namespace, settings: Settings) -> int:
    body = _run(args, settings, lambda c: c.resume(args.tenant, args.topic))
    return _show(args, body, "resumed")


# ----------------------------------------------------------------------------- enqueue


def _header(text: str) -> tuple[str, str]:
    """An argparse type for ``--header 'Name: value'``."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected 'Name: value', got {text!r}")
    return name.strip(), value.strip()


def _read_text(path: str, flag: str) -> str:
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError) as e:
        raise CommandFailed(InvalidInput(flag, f"cannot read {path}: {e}")) from None


def _job(args: argparse.Namespace) -> dict[str, Any]:
    """The one job described by ``--url`` and its companion flags."""
    job: dict[str, Any] = {"url": args.url}
    headers: dict[str, str] = {}
    for name, value in args.header or ():
        if name.lower() in (h.lower() for h in headers):
            args.parser.error(f"argument --header: {name!r} given twice")
        headers[name] = value
    body = _read_text(args.body_file, "--body-file") if args.body_file else args.body
    options = {
        "method": args.method,
        "headers": headers or None,
        "body": body,
        "priority": args.priority,
        "key": args.key,
        "idempotency_key": args.idempotency_key,
        "delay_s": args.delay,
    }
    return job | {k: v for k, v in options.items() if v is not None}


JOB_FLAGS = ("method", "header", "body", "body_file", "priority", "key", "idempotency_key", "delay")


def read_jobs(text: str) -> list[tuple[int, dict[str, Any]]]:
    """Jobs from JSON Lines with their line numbers, each checked like the API does.

    Every bad line is found before anything is sent: one raises its error (naming the line),
    several raise one error listing each (a bad file sends nothing at all).
    """
    jobs = []
    bad: list[InvalidInput] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            job = json.loads(line)
        except ValueError as e:
            bad.append(InvalidInput(f"line {n}", f"is not valid JSON: {e}"))
            continue
        try:
            Job.parse(job)  # the API's own check, so a bad line sends nothing at all
        except InvalidInput as e:
            bad.append(e.prefixed(f"line {n}"))
            continue
        jobs.append((n, job))
    if len(bad) == 1:
        raise bad[0]
    if bad:
        lines = "\n".join(f"{e}" for e in bad)
        raise InvalidInput(
            "--file", f"{len(bad)} lines are not valid jobs; nothing was sent:\n{lines}"
        )
    if not jobs:
        raise InvalidInput("--file", "holds no jobs")
    return jobs


async def _produce(
    client: Client, args: argparse.Namespace, jobs: Sequence[tuple[int, dict[str, Any]]]
) -> tuple[list[object], int]:
    """Send ``jobs`` through a Producer (which retries 503s and unanswered requests within
    the client's deadline); each job's id or error, and the duplicate count."""
    async with client.producer(args.tenant, args.topic) as producer:
        futures = [await producer.submit(job) for _, job in jobs]
    results: list[object] = list(await asyncio.gather(*futures, return_exceptions=True))
    return results, producer.duplicates


def cmd_enqueue(args: argparse.Namespace, settings: Settings) -> int:
    if args.file is None:
        job = _job(args)
        body = _run(args, settings, lambda c: c.enqueue(args.tenant, args.topic, job))
        if args.json:
            _print_json(body)
        else:
            print(("duplicate of job " if body["duplicates"] else "accepted job ") + body["ids"][0])
        return 0
    given = [f for f in JOB_FLAGS if getattr(args, f) is not None]
    if given:
        args.parser.error(f"--{given[0].replace('_', '-')} describes one job; not with --file")
    try:
        jobs = read_jobs(_read_text(args.file, "--file"))
    except InvalidInput as e:
        raise CommandFailed(e) from None
    results, duplicates = _run(args, settings, lambda c: _produce(c, args, jobs))
    return _report_batch(args, [n for n, _ in jobs], results, duplicates)


def _report_batch(
    args: argparse.Namespace, lines: list[int], results: list[object], duplicates: int
) -> int:
    """Print what was accepted; every line that was not, with its reason, fails the command."""
    ids = [r if isinstance(r, str) else None for r in results]
    rejected = [(n, r) for n, r in zip(lines, results, strict=True) if isinstance(r, BaseException)]
    if args.json:
        failed = [{"line": n, "error": _error_json(e)} for n, e in rejected]
        _print_json(
            {"ids": ids, "duplicates": duplicates, "failed": len(rejected), "rejected": failed}
        )
    else:
        accepted = len(ids) - len(rejected)
        print(f"accepted {accepted} of {len(ids)} jobs ({duplicates} duplicates)")
    if not rejected:
        return 0
    if args.json:
        return EXIT_ERROR  # the JSON on stdout names each line
    listing = "\n".join(f"line {n}: {describe(e)}" for n, e in rejected)
    raise EmqError(f"{len(rejected)} of {len(ids)} jobs not accepted:\n{listing}")


def _error_json(error: BaseException) -> dict[str, Any]:
    if not isinstance(error, EmqError):
        return {"code": "internal", "message": f"{type(error).__name__}: {error}"}
    field = getattr(error, "field", None)
    return {"code": error.code, "message": error.message} | ({"field": field} if field else {})


# ----------------------------------------------------------------------------- dead letters


def cmd_dlq_list(args: argparse.Namespace, settings: Settings) -> int:
    body = _run(
        args,
        settings,
        lambda c: c.dlq_list(args.tenant, args.topic, limit=args.limit, cursor=args.cursor),
    )
    if args.json:
        _print_json(body)
        return 0
    rows = [
        (
            d["id"],
            d["job_id"],
            d["priority"],
            d["attempts"],
            d["status"],
            _when(d["failed_at"]),
            d["error"],
        )
        for d in body["dead"]
    ]
    headers = ("ID", "JOB", "PRIORITY", "ATTEMPTS", "STATUS", "FAILED", "ERROR")
    _table(headers, rows, "no dead letters")
    if body.get("next_cursor"):
        print(f"(more: --cursor {body['next_cursor']})")
    return 0


def cmd_dlq_replay(args: argparse.Namespace, settings: Settings) -> int:
    body = _run(
        args,
        settings,
        lambda c: c.dlq_replay(args.tenant, args.topic, ids=args.id, limit=args.limit),
    )
    if args.json:
        _print_json(body)
    else:
        print(f"replayed {body['replayed']} dead letters (delivered again at the topic's quota)")
    return 0


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


def _command(
    sub: Subparsers,
    name: str,
    func: Callable[[argparse.Namespace, Settings], int],
    *,
    role: str,
    help: str,
    description: str,
    topic: bool = True,
) -> argparse.ArgumentParser:
    parent = _options(namespace=topic)
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=description, parents=[parent]
    )
    p.set_defaults(func=func, role=role, parser=p)
    return p


def _group(sub: Subparsers, name: str, help: str, description: str) -> Subparsers:
    p = sub.add_parser(name, help=help, description=description)
    return p.add_subparsers(dest="action", metavar="ACTION", required=True)


def _tenant_and_topic(p: argparse.ArgumentParser) -> None:
    p.add_argument("tenant", metavar="TENANT", help="tenant name")
    p.add_argument("topic", metavar="TOPIC", help="topic name")


def add_commands(sub: Subparsers) -> None:
    """Register ``tenant``, ``topic``, ``enqueue`` and ``dlq`` on ``emq``'s subparsers."""
    _add_tenant(sub)
    _add_topic(sub)
    _add_enqueue(sub)
    _add_dlq(sub)


def _add_tenant(sub: Subparsers) -> None:
    tenant = _group(
        sub,
        "tenant",
        "create and list tenants (admin)",
        "Tenants own topics and enqueue jobs with their own API token.",
    )
    create = _command(
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
    _command(
        tenant,
        "list",
        cmd_tenant_list,
        role="admin",
        topic=False,
        help="list tenants",
        description="List every tenant with its display name.",
    )


def _add_topic(sub: Subparsers) -> None:
    topic = _group(
        sub,
        "topic",
        "create, show and change topics",
        "A topic is a tenant's queue with a QPS quota, split into groups.",
    )
    create = _command(
        topic,
        "create",
        cmd_topic_create,
        role="admin",
        help="create a topic with a QPS quota (admin)",
        description="Create a topic; its groups follow from the quota (at most "
        "EMQ_MAX_GROUP_QPS each). Prints the topic with its webhook signing secret.",
    )
    _tenant_and_topic(create)
    create.add_argument("--qps", type=int, required=True, metavar="N", help="delivery quota")
    create.add_argument(
        "--max-attempts", type=int, metavar="N", help="delivery attempts before the DLQ (default 8)"
    )
    create.add_argument(
        "--endpoint-concurrency",
        type=int,
        metavar="N",
        help="concurrent requests per endpoint (default 32)",
    )
    create.add_argument(
        "--max-backlog",
        type=int,
        metavar="N",
        help="refuse jobs (429) above this many waiting (default 1000000)",
    )
    create.add_argument(
        "--priority-mode",
        choices=[m.value for m in PriorityMode],
        help="strict (high>medium>low) or weighted (default strict)",
    )
    _dlq_flags(create, "--dlq-")
    listing = _command(
        topic,
        "list",
        cmd_topic_list,
        role="tenant",
        help="list a tenant's topics",
        description="List a tenant's topics in one namespace with their quotas.",
    )
    listing.add_argument("tenant", metavar="TENANT", help="tenant name")
    show = _command(
        topic,
        "show",
        cmd_topic_show,
        role="tenant",
        help="show a topic's quota, groups and backlog",
        description="Show a topic: quota, groups, state and backlog per priority and per group.",
    )
    _tenant_and_topic(show)
    quota = _command(
        topic,
        "set-quota",
        cmd_topic_set_quota,
        role="admin",
        help="change a topic's QPS quota (admin)",
        description="Change a topic's QPS quota live; workers apply it within "
        "2 s. Groups are added when the quota needs more, never removed.",
    )
    _tenant_and_topic(quota)
    quota.add_argument("qps", metavar="QPS", type=int, help="the new quota")
    dlq = _command(
        topic,
        "set-dlq",
        cmd_topic_set_dlq,
        role="admin",
        help="change a topic's dead-letter retention (admin)",
        description="Change how many dead letters each group of a topic keeps and for how "
        "long; workers trim to it at the next dead letter or within a minute.",
    )
    _tenant_and_topic(dlq)
    _dlq_flags(dlq, "--")
    for name, func, verb in (
        ("pause", cmd_topic_pause, "Stop delivering"),
        ("resume", cmd_topic_resume, "Resume delivering"),
    ):
        p = _command(
            topic,
            name,
            func,
            role="admin",
            help=f"{name} a topic's deliveries (admin)",
            description=f"{verb} a topic's jobs; enqueueing is unaffected.",
        )
        _tenant_and_topic(p)


def _dlq_flags(p: argparse.ArgumentParser, prefix: str) -> None:
    p.add_argument(
        f"{prefix}max-entries",
        type=int,
        metavar="N",
        help=f"dead letters kept per group (default {DLQ_MAX_ENTRIES})",
    )
    p.add_argument(
        f"{prefix}max-age-s",
        type=int,
        metavar="S",
        help=f"seconds a dead letter is kept (default {DLQ_MAX_AGE_S}, 14 days)",
    )


def _add_enqueue(sub: Subparsers) -> None:
    p = _command(
        sub,
        "enqueue",
        cmd_enqueue,
        role="tenant",
        help="enqueue one job, or a JSON Lines file of jobs",
        description="Enqueue one job described by --url and its flags, or every job of a JSON "
        "Lines file (--file; '-' reads stdin): one job object per line, as in the API, sent in "
        "batches. The file is checked whole first: bad lines (all of them listed) send nothing. A "
        "request answered 503 or not at all is re-sent with backoff (--retry-for); every line "
        "still not accepted is listed with its reason, and the exit status is 1.",
    )
    _tenant_and_topic(p)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--url", help="the job's destination (http or https)")
    what.add_argument("--file", metavar="JOBS.jsonl", help="JSON Lines file of jobs ('-': stdin)")
    p.add_argument("--method", help="HTTP method (default POST)")
    p.add_argument(
        "--header",
        action="append",
        type=_header,
        metavar="'K: V'",
        help="a request header (repeatable)",
    )
    body = p.add_mutually_exclusive_group()
    body.add_argument("--body", metavar="TEXT", help="request body")
    body.add_argument("--body-file", metavar="F", help="read the request body from F ('-': stdin)")
    p.add_argument("--priority", choices=[q.value for q in Priority], help="default medium")
    p.add_argument("--key", metavar="K", help="same key: same group, order kept")
    p.add_argument("--idempotency-key", metavar="K", help="a repeat with this key is ignored")
    p.add_argument("--delay", type=float, metavar="S", help="deliver no sooner than S seconds")
    p.add_argument(
        "--retry-for",
        type=_seconds,
        metavar="S",
        help="keep re-sending a request answered 503 or not at all, with backoff, for up to S "
        "seconds (default EMQ_CLIENT_RETRY_S, 60); then each job not accepted is reported",
    )


def _seconds(text: str) -> float:
    """An argparse type: a number of seconds, at least 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds (at least 0), got {text!r}")
    return value


def _add_dlq(sub: Subparsers) -> None:
    dlq = _group(
        sub,
        "dlq",
        "list and replay dead letters",
        "Jobs that exhausted their attempts wait in their topic's dead-letter queue.",
    )
    listing = _command(
        dlq,
        "list",
        cmd_dlq_list,
        role="tenant",
        help="list a topic's dead letters",
        description="List dead letters with their last error, a page at a time.",
    )
    _tenant_and_topic(listing)
    listing.add_argument("--limit", type=int, metavar="N", help="page size (default 100)")
    listing.add_argument("--cursor", metavar="C", help="continue after a previous page")
    replay = _command(
        dlq,
        "replay",
        cmd_dlq_replay,
        role="tenant",
        help="deliver dead letters again",
        description="Put dead letters back on their topic (these --id ones, or up "
        "to --limit of them); they are delivered at the topic's quota.",
    )
    _tenant_and_topic(replay)
    replay.add_argument("--id", action="append", metavar="ID", help="a dead letter (repeatable)")
    replay.add_argument("--limit", type=int, metavar="N", help="replay at most N (default 1000)")
