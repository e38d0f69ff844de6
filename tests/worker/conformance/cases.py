"""The hostile endpoints the push clients are held to (docs/design/push-client.md lists them
with what each client does).

A case scripts the endpoint (:mod:`tests.worker.conformance.hostile`) and says what the pushes
must end in beyond the invariants every case checks (no false delivered, every push ends, the
connection with stray bytes never reused, memory bounded): ``want`` "all" (every push
delivered), "none" (none delivered) or None (the invariants only); ``reason``, a text every
failed push's error contains (``None``: any readable error). A value may differ per client
(a dict keyed by client).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.worker.conformance.hostile import (
    CLOSE,
    HANG,
    RESET,
    Pause,
    Reply,
    Script,
    Step,
    Stray,
    Stream,
    Trickle,
)

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
E500 = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"
PARTIAL = b"HTTP/1.1 200 OK\r\nX-Smuggled: "  # the start of a second response
PROTOCOL = "protocol: "
TIMED_OUT = "timed out"
MIB = 1024 * 1024


@dataclass(frozen=True)
class Case:
    name: str
    script: Script
    pushes: int = 4
    settle: bool = False  # wait for each reply's late bytes before the next push
    want: str | dict[str, str | None] | None = None
    reason: str | dict[str, str | None] | None = None
    heavy: bool = False  # measure the client's memory
    # aiohttp reuses a connection whose stray bytes were a partial message (it drops them
    # when it builds the next response's parser: never an answer; docs/design/push-client.md)
    partial_stray: bool = False
    paths: tuple[str, ...] = ("/",)  # the pushes go round these (one endpoint each)
    tags: frozenset[str] = field(default_factory=frozenset)

    def of(self, value: str | dict[str, str | None] | None, client: str) -> str | None:
        return value.get(client) if isinstance(value, dict) else value


def always(steps: list[Step], ok: bool) -> Script:
    reply = Reply(steps, ok)
    return lambda conn, index, path: reply


def first_then(first: Reply, later: Reply) -> Script:
    """``first`` on a connection's first request, ``later`` on every other."""
    return lambda conn, index, path: first if index == 0 else later


def malformed(name: str, response: bytes, **extra: object) -> Case:
    return Case(name, always([response], False), want="none", reason=PROTOCOL, **extra)  # type: ignore[arg-type]


def by_path(replies: dict[str, Script]) -> Script:
    return lambda conn, index, path: replies[path](conn, index, path)


STRAYS_AND_LIMITS = [
    # -------------------------------------------------------------- stray bytes (the issue's)
    Case(
        "leftover-partial-then-500",
        first_then(Reply([Stray(PARTIAL, OK)], True), Reply([E500], False)),
        want={"lean": "all", "aiohttp": None},
        partial_stray=True,
    ),
    Case(
        "leftover-partial-then-real-200",
        first_then(Reply([Stray(PARTIAL, OK)], True), Reply([OK], True)),
        want="all",
        partial_stray=True,
    ),
    Case(
        "leftover-across-tenants",  # /a lies, /b answers 500: /b's job is never delivered
        by_path(
            {
                "/a": always([Stray(PARTIAL, OK)], True),
                "/b": always([E500], False),
            }
        ),
        pushes=6,
        paths=("/a", "/b"),
        partial_stray=True,
    ),
    Case(
        "complete-duplicate-then-500",
        first_then(Reply([Stray(OK, OK)], True), Reply([E500], False)),
        want="all",
    ),
    Case(
        "content-length-shorter-than-body",  # the surplus: the start of a response
        first_then(
            Reply(
                [
                    Stray(
                        b"HTTP/1.1 200 OK\r\nContent-Le",
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                    )
                ],
                True,
            ),
            Reply([E500], False),
        ),
        want={"lean": "all", "aiohttp": None},
        partial_stray=True,
    ),
    Case(
        "duplicate-status-line-split-30ms",  # next push at once: the rest comes mid-request
        first_then(
            Reply([Stray(b"HTTP/1.1 2", OK), Pause(0.03), Stray(OK[10:])], True),
            Reply([E500], False),
        ),
        want={"lean": "all", "aiohttp": None},
        reason={"lean": None, "aiohttp": PROTOCOL},
        partial_stray=True,
    ),
    Case(
        "duplicate-status-line-split-30ms-idle",  # the rest comes while the connection idles
        first_then(
            Reply([Stray(b"HTTP/1.1 2", OK), Pause(0.03), Stray(OK[10:])], True),
            Reply([E500], False),
        ),
        settle=True,
        want="all",
    ),
    Case(
        "duplicate-on-idle",  # a whole second answer while the connection idles
        first_then(Reply([OK, Pause(0.01), Stray(OK)], True), Reply([E500], False)),
        settle=True,
        want="all",
    ),
    Case(
        "garbage-on-idle",
        first_then(Reply([OK, Pause(0.01), Stray(b"\x00\xff junk")], True), Reply([E500], False)),
        settle=True,
        want="all",
    ),
    Case(
        "empty-line-on-idle",  # a lone CRLF while idle: still a byte out of turn
        first_then(Reply([OK, Pause(0.01), Stray(b"\r\n")], True), Reply([OK], True)),
        settle=True,
        want="all",
        partial_stray=True,
    ),
    # -------------------------------------------------------------- unbounded heads and bodies
    Case(
        "endless-header-value",
        always([b"HTTP/1.1 200 OK\r\nX-Endless: ", Stream(b"a" * 65536, 256 * MIB)], False),
        pushes=2,
        want="none",
        reason=PROTOCOL,
        heavy=True,
    ),
    Case(
        "endless-header-name",
        always([b"HTTP/1.1 200 OK\r\nX-", Stream(b"a" * 65536, 256 * MIB)], False),
        pushes=2,
        want="none",
        reason=PROTOCOL,
        heavy=True,
    ),
    Case(
        "endless-status-line",
        always([b"HTTP/1.1 200 ", Stream(b"O" * 65536, 256 * MIB)], False),
        pushes=2,
        want="none",
        reason=PROTOCOL,
        heavy=True,
    ),
    Case(
        "many-headers",
        always(
            [b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 100_000 + b"Content-Length: 0\r\n\r\n"], False
        ),
        pushes=2,
        want="none",
        reason=PROTOCOL,
        heavy=True,
    ),
    Case(
        "endless-1xx",
        always([Stream(b"HTTP/1.1 100 Continue\r\n\r\n" * 2048, 256 * MIB)], False),
        pushes=2,
        want="none",
        reason={"lean": PROTOCOL, "aiohttp": None},
        heavy=True,
    ),
    Case(
        "huge-body",  # read up to max_response_bytes: the status stands, the connection closes
        always(
            [
                b"HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n",
                Stream(b"x" * 65536, 1 << 30),
            ],
            True,
        ),
        pushes=2,
        want="all",
        heavy=True,
    ),
    Case(
        "huge-chunked-body",
        always(
            [
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                Stream(b"10000\r\n" + b"x" * 65536 + b"\r\n", 1 << 30),
            ],
            True,
        ),
        pushes=2,
        want="all",
        heavy=True,
    ),
    # -------------------------------------------------------------- slow and silent
    Case(
        "trickled-head",
        always([Trickle(OK, 0.05)], False),
        pushes=2,
        want="none",
        reason=TIMED_OUT,
        tags=frozenset({"slow"}),
    ),
    Case(
        "trickled-body",
        always(
            [b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", Trickle(b"x" * 100, 0.05)], False
        ),
        pushes=2,
        want="none",
        reason=TIMED_OUT,
        tags=frozenset({"slow"}),
    ),
    Case(
        "accepts-never-answers",
        always([HANG], False),
        pushes=2,
        want="none",
        reason=TIMED_OUT,
        tags=frozenset({"slow"}),
    ),
]
FRAMING_AND_MALFORMED = [
    # -------------------------------------------------------------- framing that ends at a close
    Case(
        "connection-close",
        always(
            [b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", CLOSE], True
        ),
        want="all",
    ),
    Case(
        "http10-close-delimited", always([b"HTTP/1.0 200 OK\r\n\r\nbody", CLOSE], True), want="all"
    ),
    Case(
        "close-delimited-ended-by-reset",  # a reset is not the end of a body
        always([b"HTTP/1.0 200 OK\r\n\r\nbo", Pause(0.01), RESET], False),
        want="none",
    ),
    Case(
        "1xx-before-the-answer",
        always(
            [
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
                Pause(0.01),
                OK,
            ],
            True,
        ),
        want="all",
    ),
    Case(
        "1xx-then-500",
        always([b"HTTP/1.1 100 Continue\r\n\r\n", E500], False),
        want="none",
    ),
    # -------------------------------------------------------------- resets at every stage
    Case("reset-before-head", always([RESET], False), want="none"),
    Case(
        "reset-mid-head",
        always([b"HTTP/1.1 200 OK\r\nContent-Le", Pause(0.01), RESET], False),
        want="none",
    ),
    Case(
        "reset-mid-body",
        always([b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", Pause(0.01), RESET], False),
        want="none",
    ),
    Case(
        "close-mid-body",
        always([b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", Pause(0.01), CLOSE], False),
        want="none",
    ),
    Case(
        "close-mid-chunked-body",
        always(
            [
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
                Pause(0.01),
                CLOSE,
            ],
            False,
        ),
        want="none",
    ),
    # -------------------------------------------------------------- malformed heads and framing
    malformed(
        "header-without-colon", b"HTTP/1.1 200 OK\r\nX-No-Colon\r\nContent-Length: 0\r\n\r\n"
    ),
    malformed(
        "nul-in-header-value", b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 0\r\n\r\n"
    ),
    malformed("nul-in-status-code", b"HTTP/1.1 2\x0000 OK\r\nContent-Length: 0\r\n\r\n"),
    malformed("nul-in-version", b"HTTP/1\x00.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
    # The reason phrase is ignored (RFC 9112 4: a client should), whatever it holds.
    Case(
        "nul-in-reason-phrase",
        always([b"HTTP/1.1 200 O\x00K\x01\r\nContent-Length: 0\r\n\r\n"], True),
        want="all",
    ),
    malformed("negative-content-length", b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"),
    malformed(
        "duplicate-content-length",
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
    ),
    malformed(
        "conflicting-content-length",
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\nhello",
    ),
    malformed("content-length-list", b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok"),
    malformed(
        "bad-chunk-size",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n0\r\n\r\n",
    ),
    malformed(
        "negative-chunk-size",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\nok\r\n0\r\n\r\n",
    ),
    malformed("icy-status-line", b"ICY 200 OK\r\nContent-Length: 0\r\n\r\n"),
    malformed("not-http", b"SMTP ready\r\n\r\n"),
    malformed("status-code-four-digits", b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n"),
    malformed(
        "transfer-encoding-with-content-length",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n0\r\n\r\n",
    ),
    malformed("space-before-colon", b"HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n"),
    # RFC 9112 5.2: a client may unfold it (aiohttp does); llhttp's strict mode refuses it
    Case(
        "obsolete-line-folding",
        always([b"HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 0\r\n\r\n"], True),
        want={"lean": "none", "aiohttp": "all"},
        reason=PROTOCOL,
    ),
    # aiohttp's parser accepts a bare LF (llhttp's lenient flag, no public switch): see the docs
    Case(
        "bare-lf-head",
        always([b"HTTP/1.1 200 OK\nContent-Length: 0\n\n"], False),
        want={"lean": "none", "aiohttp": "all"},
        reason=PROTOCOL,
        tags=frozenset({"aiohttp-lenient"}),
    ),
]
CASES = STRAYS_AND_LIMITS + FRAMING_AND_MALFORMED
