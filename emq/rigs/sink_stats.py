"""What the sink counts and logs: :class:`Stats` (per topic per second, latencies, the delivery
log of ``--record``, the ``/fail/``, ``/busy/`` and ``/limit/`` state), and the header lookups on
a raw request head shared by the sink's HTTP side (:mod:`emq.rigs.sink`) and :class:`Sink`.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from typing import Any


class Stats:
    """What the sink saw since the last reset."""

    def __init__(self, record: bool = False, latency_header: str = "X-Bench-Sent") -> None:
        self.record = record
        self.latency_header = b"\r\n" + latency_header.lower().encode() + b":"
        self.reset()

    def reset(self) -> None:
        self.started = time.time()
        self.per_second: defaultdict[str, defaultdict[int, int]] = defaultdict(
            lambda: defaultdict(int)
        )
        self.latencies: defaultdict[str, list[float]] = defaultdict(list)
        self.requests = 0
        self.first_at = 0.0  # arrival of the first and the last counted request
        self.last_at = 0.0
        self.hung = 0
        self.slow = 0  # slow requests answered
        self.other = 0
        self.log: list[tuple[float, str, str, int, str]] = []
        self.attempts: defaultdict[bytes, int] = defaultdict(int)  # /fail/, /busy/: per id
        self.windows: defaultdict[str, deque[float]] = defaultdict(deque)  # /limit/: 200s
        self.throttled: defaultdict[str, int] = defaultdict(int)  # /limit/: 429s per topic

    def note(self, head: bytes, now: float, topic_path: bytes, status: int) -> None:
        """Append a delivery log row (when recording) for a request to ``topic_path``."""
        if not self.record:
            return
        topic, _, query = topic_path.partition(b"?")
        webhook_id = find_header(head, b"\r\nwebhook-id:") or b""
        self.log.append((now, topic.decode(), webhook_id.decode(), status, query.decode()))

    def log_from(self, start: int) -> dict[str, Any]:
        rows = self.log[start:]
        return {"next": start + len(rows), "log": rows}

    def to_dict(self) -> dict[str, Any]:
        return {
            "since": self.started,
            "now": time.time(),
            "requests": self.requests,
            "first_at": self.first_at,
            "last_at": self.last_at,
            "hung": self.hung,
            "throttled": dict(self.throttled),
            "slow": self.slow,
            "other": self.other,
            "per_second": {
                topic: {str(s): n for s, n in seconds.items()}
                for topic, seconds in self.per_second.items()
            },
            "latency_ms": {
                topic: [round(v * 1000, 3) for v in values]
                for topic, values in self.latencies.items()
            },
        }


def find_header(head: bytes, name: bytes) -> bytes | None:
    """The value of header ``name`` (given lower-case as ``b"\\r\\nname:"``), or None."""
    at = head.lower().find(name)
    if at < 0:
        return None
    start = at + len(name)
    end = head.find(b"\r\n", start)
    return (head[start:] if end < 0 else head[start:end]).strip()


def parse_headers(head: bytes) -> dict[str, str]:
    """The request's headers, names as sent (like ``dict(aiohttp_request.headers)``)."""
    out: dict[str, str] = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name:
            out[name.strip()] = value.strip()
    return out


def get_header(headers: dict[str, str], name: str) -> str:
    """A header's value by its name in any case ("" if absent)."""
    value = headers.get(name)
    if value is not None:
        return value
    lower = name.lower()
    return next((v for k, v in headers.items() if k.lower() == lower), "")
