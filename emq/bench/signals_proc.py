"""One worker's ready-signal listener for ``emq bench signals`` (a process of its own).

``python -m emq.bench.signals_proc SPEC.json``: connects to the store, addresses itself (with
``"addressed": true``) as a fleet worker does, takes its cursor, prints ``ready``, reads the
start time from stdin, then from that time for ``duration_s`` runs the store's ``wait_ready``
loop as :meth:`worker.fetch.Fetcher.listen` does. Prints one JSON line: the Redis commands it
sent for signals (one XREAD per call on a standalone server, plus the XADDs handing misaddressed
hints on) and the group names it read.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import uvloop

from adapters.redis_queue import connect


async def main(spec: dict[str, Any]) -> dict[str, Any]:
    queues = await connect(spec["url"], cluster=False, prefix=spec["prefix"])
    mine = set(spec["groups"])
    handed_on = 0

    def owns(name: str) -> bool:
        nonlocal handed_on
        if name in mine:
            return True
        handed_on += 1  # each stray name is handed on (one XADD per read at most)
        return False

    if spec["addressed"]:
        queues.address_to(spec["id"], owns)
    commands = names = 0
    try:
        cursor, _ = await queues.wait_ready(None, 0)
        print("ready", flush=True)
        start_at = float(await asyncio.to_thread(sys.stdin.readline))
        await asyncio.sleep(max(0.0, start_at - time.time()))
        until = start_at + spec["duration_s"]
        while (left := until - time.time()) > 0:
            before = handed_on
            cursor, got = await queues.wait_ready(cursor, min(1.0, left))
            commands += 1 + (handed_on > before)
            names += len(got)
    finally:
        await queues.aclose()
    return {"id": spec["id"], "groups": len(mine), "commands": commands, "names": names}


if __name__ == "__main__":
    print(json.dumps(uvloop.run(main(json.loads(Path(sys.argv[1]).read_text())))))
