"""Validation on the enqueue hot path: request bytes to checked jobs, in CPU time.

``python -m emq.bench.schema`` prints JSON: microseconds of CPU (best of 7 rounds) to decode and
validate a 1000-job batch of full jobs (headers, a JSON body, key, priority) and of URL-only
jobs, and one job of each. It times :func:`emq.api.jsonbody.decode` then
:func:`emq.api.enqueue.parse_body`, what the API runs for every enqueue request before it
places and stores the jobs. CPU time, not wall time, so that a
busy machine does not blur the comparison much.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from emq.api.enqueue import parse_body
from emq.api.jsonbody import decode
from emq.core.model import JobLimits

FULL = {
    "url": "https://example.com/hook",
    "headers": {"X-Trace": "abc"},
    "body": {"order": 1, "items": [1, 2, 3]},
    "priority": "high",
    "key": "user-1",
}
MINIMAL = {"url": "https://example.com/hook"}


def best_us(fn: Callable[[bytes], object], raw: bytes, n: int, rounds: int = 7) -> float:
    out = []
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(n):
            fn(raw)
        out.append((time.process_time() - start) / n * 1e6)
    return round(min(out), 1)


def run() -> dict[str, Any]:
    limits = JobLimits()

    def parse(raw: bytes) -> object:
        return parse_body(decode(raw), limits)

    batch = {name: json.dumps({"jobs": [job] * 1000}).encode() for name, job in _JOBS.items()}
    single = {name: json.dumps(job).encode() for name, job in _JOBS.items()}
    return {
        "batch1000_full_us": best_us(parse, batch["full"], 20),
        "batch1000_min_us": best_us(parse, batch["min"], 20),
        "single_full_us": best_us(parse, single["full"], 5000),
        "single_min_us": best_us(parse, single["min"], 5000),
    }


_JOBS = {"full": FULL, "min": MINIMAL}

if __name__ == "__main__":
    print(json.dumps(run()))
