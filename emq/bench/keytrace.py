"""Where a key's cycle goes: the worker side of ``emq bench dispatch --workload W12``.

A key's *cycle* is the time from the sink answering job n of a key to job n+1 of that key
arriving there (at most one job of a key is in flight, so a topic with K keys delivers at most
K / cycle jobs a second). :class:`KeyTrace` stamps (wall clock, as the sink does) the moments in
between that happen inside the worker, per job of a keyed bench URL (``...?k=KEY&n=N``):

* ``handed``: the job is handed to a sender (``Worker._send`` from the dispatcher, or the key's
  release handing it straight to the sender that just finished: ``Dispatcher.keyed_done``);
* ``pushed``: its push begins (the push executor is called: signed, headers built);
* ``read``: the push executor returned the answer;
* ``released``: its key was released (``Dispatcher.keyed_done``, the outcome recorded before).

:func:`install` wraps those (class attributes, so only in the benchmark's own worker process,
before the worker is built); :func:`stages` joins them with the sink's arrival times. The
stamps cost a URL parse each: the figures are for where the time goes, not for its total.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from emq.core.interfaces import Pusher, PushRequest, PushResult

HANDED, PUSHED, READ, RELEASED = range(4)
STAGES = ("answer_to_read", "read_to_released", "released_to_handed", "handed_to_pushed",
          "pushed_to_arrival")  # fmt: skip


def key_and_n(url_or_query: str) -> tuple[str, int] | None:
    """``(key, n)`` of a keyed bench job's URL (or query), None for any other."""
    query = url_or_query.rpartition("?")[2]
    fields = dict(p.partition("=")[::2] for p in query.split("&"))
    key, n = fields.get("k"), fields.get("n", "")
    if not key or key == "None" or not n.isdigit():
        return None
    return key, int(n)


class KeyTrace:
    """Per key, per job n: the four stamps (0.0 while not seen)."""

    def __init__(self) -> None:
        self.rows: defaultdict[str, dict[int, list[float]]] = defaultdict(dict)

    def note(self, url: str, stage: int) -> None:
        found = key_and_n(url)
        if found is not None:
            key, n = found
            self.rows[key].setdefault(n, [0.0, 0.0, 0.0, 0.0])[stage] = time.time()

    def write(self, path: Path) -> None:
        rows = {key: {str(n): v for n, v in r.items()} for key, r in self.rows.items()}
        path.write_text(json.dumps(rows))


class TracingPusher(Pusher):
    """The push executor, with ``pushed`` and ``read`` stamped around each push."""

    def __init__(self, inner: Pusher, trace: KeyTrace) -> None:
        self.inner = inner
        self.trace = trace

    async def push(self, request: PushRequest) -> PushResult:
        self.trace.note(request.url, PUSHED)
        result = await self.inner.push(request)
        self.trace.note(request.url, READ)
        return result

    async def aclose(self) -> None:
        await self.inner.aclose()


def install(trace: KeyTrace) -> None:
    """Stamp ``handed`` and ``released`` in every worker built from now on in this process."""
    from worker.dispatch import Dispatcher
    from worker.groups import Buffered, GroupState
    from worker.runtime import Worker

    send, done = Worker._send, Dispatcher.keyed_done

    def traced_send(self: Worker, group: GroupState, item: Buffered) -> None:
        if item.key is not None:
            trace.note(item.read_url(), HANDED)
        send(self, group, item)

    def traced_done(self: Dispatcher, group: GroupState, item: Buffered) -> Any:
        trace.note(item.read_url(), RELEASED)
        nxt = done(self, group, item)
        if isinstance(nxt, Buffered):  # handed straight to the sender that just finished
            trace.note(nxt.read_url(), HANDED)
        return nxt

    Worker._send = traced_send  # type: ignore[method-assign]
    Dispatcher.keyed_done = traced_done  # type: ignore[method-assign]


def stages(
    trace: dict[str, dict[str, list[float]]], arrivals: Iterable[tuple[float, str]]
) -> dict[str, list[float]]:
    """Per consecutive jobs n, n+1 of a key (both seen whole): the cycle (``cycle``, sink
    arrival to sink arrival) and its :data:`STAGES`, in seconds. ``arrivals``: (arrival at the
    sink, the job's query) rows; the sink answers as it reads, so arrival is answer too."""
    at: dict[tuple[str, int], float] = {}
    for when, query in arrivals:
        found = key_and_n(query)
        if found is not None:
            at.setdefault(found, when)  # (the first arrival of a job)
    out: dict[str, list[float]] = {"cycle": [], **{s: [] for s in STAGES}}
    for key, rows in trace.items():
        for n_text, this in rows.items():
            n = int(n_text)
            nxt = rows.get(str(n + 1))
            a0, a1 = at.get((key, n)), at.get((key, n + 1))
            if nxt is None or a0 is None or a1 is None or not all(this[1:]) or not nxt[0]:
                continue
            out["cycle"].append(a1 - a0)
            out["answer_to_read"].append(this[READ] - a0)
            out["read_to_released"].append(this[RELEASED] - this[READ])
            out["released_to_handed"].append(nxt[HANDED] - this[RELEASED])
            out["handed_to_pushed"].append(nxt[PUSHED] - nxt[HANDED])
            out["pushed_to_arrival"].append(a1 - nxt[PUSHED])
    return out
