"""``emq enqueue``: one job described by flags, or a JSON Lines file of jobs.

A file is checked whole (each line as the API checks a job) before anything is sent; it is sent
through a :class:`emq.client.Producer`, and every line not accepted is listed with its reason.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from emq.cli.common import EXIT_ERROR, CommandFailed, command, print_json, run, tenant_and_topic
from emq.core.errors import EmqError, InvalidInput
from emq.core.model import Job, Priority

if TYPE_CHECKING:
    from emq.cli.common import Subparsers
    from emq.client import Client
    from emq.core.settings import Settings


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
    import asyncio  # here, not with the parser: it imports ssl, which `emq --help` need not

    results: list[object] = list(await asyncio.gather(*futures, return_exceptions=True))
    return results, producer.duplicates


def cmd_enqueue(args: argparse.Namespace, settings: Settings) -> int:
    if args.file is None:
        job = _job(args)
        body = run(args, settings, lambda c: c.enqueue(args.tenant, args.topic, job))
        if args.json:
            print_json(body)
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
    results, duplicates = run(args, settings, lambda c: _produce(c, args, jobs))
    return _report_batch(args, [n for n, _ in jobs], results, duplicates)


def _report_batch(
    args: argparse.Namespace, lines: list[int], results: list[object], duplicates: int
) -> int:
    """Print what was accepted; every line that was not, with its reason, fails the command."""
    ids = [r if isinstance(r, str) else None for r in results]
    rejected = [(n, r) for n, r in zip(lines, results, strict=True) if isinstance(r, BaseException)]
    if args.json:
        failed = [{"line": n, "error": _error_json(e)} for n, e in rejected]
        print_json(
            {"ids": ids, "duplicates": duplicates, "failed": len(rejected), "rejected": failed}
        )
    else:
        accepted = len(ids) - len(rejected)
        print(f"accepted {accepted} of {len(ids)} jobs ({duplicates} duplicates)")
    if not rejected:
        return 0
    if args.json:
        return EXIT_ERROR  # the JSON on stdout names each line
    from emq.client import describe

    listing = "\n".join(f"line {n}: {describe(e)}" for n, e in rejected)
    raise EmqError(f"{len(rejected)} of {len(ids)} jobs not accepted:\n{listing}")


def _error_json(error: BaseException) -> dict[str, Any]:
    if not isinstance(error, EmqError):
        return {"code": "internal", "message": f"{type(error).__name__}: {error}"}
    field = getattr(error, "field", None)
    return {"code": error.code, "message": error.message} | ({"field": field} if field else {})


def add_commands(sub: Subparsers) -> None:
    """Register ``enqueue`` on ``emq``'s subparsers."""
    p = command(
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
    tenant_and_topic(p)
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
