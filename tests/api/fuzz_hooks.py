"""Schemathesis hooks for ``test_openapi_fuzz.py``: rules JSON Schema cannot state.

Before a generated request is sent, a body that breaks one of these rules is mended, so that
"valid by the schema" means "accepted by the server" (the ``positive_data_acceptance`` check;
schemathesis re-reads whether a mended body is valid). The server refuses each broken form with
422 naming the field, as ``tests/api/test_bad_input.py`` and ``tests/emq`` pin:

* a retry policy's ``max_delay_s`` must not be below its ``base_delay_s`` (swapped);
* header names are case-insensitive: ``X-A`` and ``x-a`` may not both be given (one dropped);
* a job's URL and callback URLs (a topic's too) must be ones the worker can send
  (``emq.core.outbound.push_url``: IDNA, port); an http(s) URL that is not is replaced by one
  that is;
* a transaction's ``check_url`` must be sendable, and not a private address (nothing is
  allowed in the fuzzed API's EMQ_PUSH_ALLOW_CIDRS): replaced by one that is;
* a paced replay (``.../dlq/replays``) takes ids or a time window, not both (the window
  dropped), ``since`` not after ``until`` (swapped), and ids of the topic's groups (the fuzzed
  topic has one: group 0);
* a schedule's cron expression and time zone must be ones cronsim and zoneinfo know (replaced
  by ``*/5 * * * *`` and ``UTC``), its ``end_at`` not before its ``start_at`` (swapped), and
  its job template is mended as a job is;
* a job search's or a redelivery's window must lie within what is retained
  (``emq.core.attempts.check_window``): a ``since`` older than a minute ago is moved to a
  minute ago (and an ``until`` before it dropped); a search names a key or an idempotency
  key, not both (the idempotency key dropped), and a cursor is one a search answered (a
  generated one dropped).
"""

from __future__ import annotations

import time
from typing import Any

import schemathesis

from emq.api.transactions import check_url
from emq.core.errors import InvalidInput
from emq.core.model import RetryPolicy
from emq.core.outbound import push_url
from emq.core.schedules import parse_cron, parse_zone

_RETRY = RetryPolicy()
_SENDABLE = "https://example.com/hook"


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _mend_retry(retry: object) -> None:
    if not isinstance(retry, dict):
        return
    base = retry.get("base_delay_s", _RETRY.base_delay_s)
    top = retry.get("max_delay_s", _RETRY.max_delay_s)
    # Swapped only when both are in range: a swap must not make an out-of-range value valid.
    if _number(base) and _number(top) and 0.01 <= top < base <= 86400:
        retry["base_delay_s"], retry["max_delay_s"] = top, base


def _mend_job(job: object) -> None:
    if not isinstance(job, dict):
        return
    headers = job.get("headers")
    if isinstance(headers, dict):
        seen: set[str] = set()
        for name in list(headers):
            if name.lower() in seen:
                del headers[name]
            seen.add(name.lower())
    for field in ("url", "callback_url", "failure_callback_url"):
        url = job.get(field)
        if isinstance(url, str) and url[:4].lower() == "http" and len(url) <= 2048:
            try:
                push_url(url)
            except InvalidInput:
                job[field] = _SENDABLE


def _mend_replay(body: dict[str, Any]) -> None:
    ids = body.get("ids")
    if isinstance(ids, list):
        body["ids"] = [
            "0:" + i.partition(":")[2] if isinstance(i, str) and ":" in i else i for i in ids
        ]
    since, until = body.get("since"), body.get("until")
    if ids is not None and ("since" in body or "until" in body):
        body.pop("since", None)
        body.pop("until", None)
    elif _number(since) and _number(until) and 0 <= until < since <= 4_102_444_800:
        body["since"], body["until"] = until, since


def _mend_check_url(body: dict[str, Any]) -> None:
    url = body.get("check_url")
    if isinstance(url, str) and url[:4].lower() == "http" and len(url) <= 2048:
        try:
            check_url(url, ())
        except InvalidInput:
            body["check_url"] = _SENDABLE


def _mend_schedule(body: dict[str, Any]) -> None:
    for name, parse, fallback in (("cron", parse_cron, "*/5 * * * *"), ("timezone", parse_zone,
                                                                          "UTC")):  # fmt: skip
        value = body.get(name)
        if isinstance(value, str) and 0 < len(value) <= (200 if name == "cron" else 64):
            try:
                parse(value)
            except InvalidInput:
                body[name] = fallback
    start, end = body.get("start_at"), body.get("end_at")
    if _number(start) and _number(end) and 0 <= end < start <= 4_102_444_800:
        body["start_at"], body["end_at"] = end, start
    _mend_job(body.get("job"))


def _mend_window(window: object) -> None:
    """A search's or a redelivery's fields (a query's are strings) as the server takes them."""
    if not isinstance(window, dict):
        return
    if "key" in window and "idempotency_key" in window:
        del window["idempotency_key"]
    window.pop("cursor", None)
    recent = time.time() - 60
    since, until = _seconds(window.get("since")), _seconds(window.get("until"))
    if since is not None and 0 <= since < recent:
        since = recent
        window["since"] = str(int(recent)) if isinstance(window["since"], str) else recent
    if since is not None and until is not None and until < since:
        del window["until"]


def _seconds(value: object) -> float | None:
    if isinstance(value, str) and _float(value):
        return float(value)
    return float(value) if _number(value) else None  # type: ignore[arg-type]


def _float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@schemathesis.hook
def before_call(ctx: Any, case: Any, kwargs: dict[str, Any]) -> None:
    if case.operation.path.endswith(("/jobs", "/redeliveries")):
        _mend_window(case.query)
        _mend_window(case.body)
    body = case.body
    if not isinstance(body, dict):
        return
    _mend_check_url(body)
    _mend_retry(body.get("retry"))
    _mend_replay(body)
    if "cron" in body or "timezone" in body or "job" in body:
        _mend_schedule(body)
    jobs = body.get("jobs")
    for job in jobs if isinstance(jobs, list) else [body]:
        _mend_job(job)
