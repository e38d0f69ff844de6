"""What the lean client writes: a job's URL as a connection target and its request as bytes.

:func:`target_of` parses a job's URL exactly as the aiohttp executor does (:func:`emq.core
.outbound.push_url`, then the SSRF guard's check of an IP-literal host) and keeps what every
request to it needs: the pool key, the ``Host`` header, the request target. Parsing costs as
much as a tenth of a push, so targets are cached per URL text.

:func:`request_bytes` is the request head and body in one buffer (one ``transport.write``). What
HTTP cannot carry is refused *before* anything is sent, as :class:`~emq.core.errors
.Undeliverable`: a header name that is not a token, a value with a control character (RFC 9110:
no C0 control but HTAB, no DEL; the request-smuggling characters), a name the client itself
writes (``Host``, ``Content-Length``, ``Connection``, ... :data:`emq.core.model
.RESERVED_HEADERS`: the API refuses them at enqueue, only a job written straight into a queue
carries one), text that is not UTF-8. The checks are three regular-expression scans per request
(C speed), not a Python loop per header.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

from emq.core.errors import InvalidInput, Undeliverable
from emq.core.outbound import FIELD_VALUE_FORBIDDEN, push_url
from worker.ssrf import AddressPolicy

TARGET_CACHE_SIZE = 4096  # a topic's jobs mostly share a few URLs
DEFAULT_PORTS = {"http": 80, "https": 443}
# Methods whose request carries no Content-Length when it has no body (as aiohttp sends them).
NO_BODY_METHODS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS", "TRACE"})
_METHOD = re.compile(r"[A-Z]{1,20}")
# Header names joined by "\n": anything but token characters (and the joining "\n") is refused.
_NAME_FORBIDDEN = re.compile(r"[^!#$%&'*+\-.^_`|~0-9A-Za-z\n]|\n\n|^\n|\n$")
_VALUE_FORBIDDEN = re.compile(f"[{FIELD_VALUE_FORBIDDEN}]")
_RESERVED = re.compile(
    r"^(?:host|content-length|transfer-encoding|connection|keep-alive|upgrade|te|trailer"
    r"|proxy-connection|proxy-authorization)$",
    re.IGNORECASE | re.MULTILINE,
)


class Target(NamedTuple):
    """Where a URL's requests go and how their first lines read."""

    key: tuple[str, str, int]  # (scheme, host as resolved, port): one connection pool each
    host: str  # the host to resolve or connect to (IDNA-encoded, IPv6 without brackets)
    port: int
    tls: bool
    host_header: str  # "Host: ..." value: the host (bracketed if IPv6), ":port" if not default
    path: str  # the request target: path and query, percent-encoded


def target_of(text: str, policy: AddressPolicy) -> Target:
    """Parse a job's URL as the API checked it; refuse an IP-literal host the policy refuses."""
    try:
        url = push_url(text)
    except InvalidInput as e:  # a job that bypassed the API: it can never be sent
        raise Undeliverable(f"undeliverable: {e}") from None
    host = url.raw_host or ""
    policy.check_host(host)
    port = url.port or DEFAULT_PORTS[url.scheme]
    shown = f"[{host}]" if ":" in host else host
    if url.explicit_port is not None and url.explicit_port != DEFAULT_PORTS[url.scheme]:
        shown = f"{shown}:{port}"
    return Target(
        (url.scheme, host, port),
        host,
        port,
        url.scheme == "https",
        shown,
        url.raw_path_qs or "/",
    )


def check_headers(headers: Mapping[str, str]) -> None:
    """Refuse headers HTTP cannot carry or that the client writes itself (module docstring)."""
    if not headers:
        return
    names = "\n".join(headers)
    # (the count: a "\n" inside a name would pass for a separator)
    if _NAME_FORBIDDEN.search(names) or names.count("\n") != len(headers) - 1 or "" in headers:
        bad = next(n for n in headers if not n or "\n" in n or _NAME_FORBIDDEN.search(n))
        raise Undeliverable(f"undeliverable: header name {bad!r} is not a token")
    reserved = _RESERVED.search(names)
    if reserved:
        raise Undeliverable(f"undeliverable: header {reserved.group()!r} is set by the client")
    try:
        values = "".join(headers.values())
    except TypeError:
        raise Undeliverable("undeliverable: a header value is not text") from None
    if _VALUE_FORBIDDEN.search(values):
        raise Undeliverable(
            "undeliverable: a header value contains a control character (other than tab) or DEL"
        )


def request_bytes(
    method: str, target: Target, headers: Mapping[str, str], body: bytes | None
) -> bytes:
    """The request's head and body as sent (``Undeliverable`` for what cannot be sent)."""
    if not _METHOD.fullmatch(method):
        raise Undeliverable(f"undeliverable: method {method!r} is not an HTTP method")
    check_headers(headers)
    lines = "".join([f"{k}: {v}\r\n" for k, v in headers.items()])
    if body is None and method in NO_BODY_METHODS:
        length = ""
    else:
        length = f"Content-Length: {len(body) if body else 0}\r\n"
    head = f"{method} {target.path} HTTP/1.1\r\nHost: {target.host_header}\r\n{lines}{length}\r\n"
    try:
        data = head.encode()
    except UnicodeEncodeError as e:
        raise Undeliverable(f"undeliverable: a header is not valid text: {e.reason}") from None
    return data + body if body else data
