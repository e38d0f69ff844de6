"""``emq bench replay``: live jobs' share of the quota while a DLQ replay of 100 000 runs.

Issue 16's target: a replay runs on its own budget, so live jobs keep >= 90% of the topic's
quota during a replay of 100 000 jobs. The bench starts the real parts on loopback
(:class:`emq.bench.rig.Rig`: Redis, ZooKeeper, the recording sink process, one ``emq worker``
process), fills the topic's DLQs with ``letters`` dead letters, keeps live jobs arriving at the
quota (two seconds of backlog first, so the topic is saturated), starts a paced replay (default
rate: 5% of the quota) and measures for ``duration_s`` what the sink saw: live deliveries in
every wall-clock second and in every sliding 1 s window (50 ms steps) from the first replayed
delivery on, the replayed ones, and the topic's busiest sliding second (the quota bounds both
kinds together). Then it cancels the replay and checks that nothing more moves.

At the default quota (1000/s) a replay of 100 000 letters would take 2000 s at 5%: the bench
measures ``duration_s`` of it (the share is steady once replayed jobs reach the head of the
queue) and reports how far it got; ``--duration-s`` runs it longer.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from emq.bench.machine import describe
from emq.bench.promises import busiest_window
from emq.bench.rig import BODY, Rig
from emq.compose import open_replays
from emq.core.interfaces import DeadLetter, PutItem
from emq.core.model import Envelope, Job, Priority, new_job_id
from emq.core.replays import Replay, ReplayState, default_rate, new_replay_id

TARGET_SHARE = 0.9
BATCH = 1000


async def _fill_dlq(rig: Rig, groups: int, letters: int) -> None:
    """``letters`` dead letters for the sink's ``replayed`` path, spread over the groups."""
    now = int(time.time() * 1000)
    job = Job(url=rig.url("replayed"), body=BODY)
    for g in range(groups):
        share = letters // groups + (1 if g < letters % groups else 0)
        for start in range(0, share, BATCH):
            batch = [
                DeadLetter("", Priority.MEDIUM, Envelope(new_job_id(), job, now).encode(),
                           "HTTP 500", 500, 8, now)
                for _ in range(min(BATCH, share - start))
            ]  # fmt: skip
            await rig.queues.dead_letter(rig.ref("live").group(g), 0, batch)


async def _feed(rig: Rig, groups: int, per_s: float, stop: asyncio.Event) -> None:
    """Live jobs at ``per_s``, every 100 ms, until ``stop``: stored straight into the groups'
    medium queues, round robin (the API's validation would cost this 2-core machine the CPU
    the worker needs; ``emq bench enqueue`` measures that path)."""
    started, sent = time.monotonic(), 0
    job = Job(url=rig.url("live"), body=BODY)
    ref = rig.ref("live")
    while not stop.is_set():
        due = int((time.monotonic() - started) * per_s) - sent
        if due > 0:
            now = int(time.time() * 1000)
            items = []
            for i in range(due):
                job_id = new_job_id()
                queue = ref.group((sent + i) % groups).queue(Priority.MEDIUM)
                items.append(PutItem(queue, job_id, Envelope(job_id, job, now).encode()))
            await rig.queues.put(items)
            sent += due
        await asyncio.sleep(0.1)


def fewest_in_a_window(times: Sequence[float], start: float, end: float) -> int:
    """The fewest of sorted ``times`` in any 1 s window starting in ``[start, end - 1]``."""
    counts, t = [], start
    while t + 1.0 <= end:
        counts.append(bisect.bisect_left(times, t + 1.0) - bisect.bisect_left(times, t))
        t += 0.05
    return min(counts) if counts else 0


async def _measure(rig: Rig, qps: int, letters: int, rate: float, duration_s: float,
                   say: Callable[[str], None]) -> dict[str, Any]:  # fmt: skip
    topic = await rig.topic("live", qps)
    say(f"filling the DLQ: {letters} letters over {topic.groups} groups")
    await _fill_dlq(rig, topic.groups, letters)
    await rig.enqueue("live", 2 * qps)  # backlog: the topic is saturated from the start
    stop = asyncio.Event()
    feeding = asyncio.ensure_future(_feed(rig, topic.groups, qps, stop))
    replays = open_replays(rig.settings)
    try:
        rig.worker("w1", standalone=True)
        await _wait(_count(rig, "live", 1), 60, "the worker delivers nothing")
        replay = Replay(new_replay_id(), rig.ref("live"), topic.groups, rate,
                        created_at=time.time())  # fmt: skip
        replay = await replays.create(replay)
        say(f"replay {replay.id}: {replay.total} letters at {rate:g}/s; measuring {duration_s} s")
        began = time.time()
        await _wait(_count(rig, "replayed", 1), 30, "no replayed job was delivered")
        first = time.time()
        await asyncio.sleep(duration_s)
        end = time.time()
        progress = await replays.get(rig.ref("live"), replay.id)
        cancelled = await replays.cancel(rig.ref("live"), replay.id)
        await asyncio.sleep(2.0)
        after = await replays.get(rig.ref("live"), replay.id)
    finally:
        stop.set()
        await feeding
        await replays.aclose()
    log = await rig.deliveries()
    return _figures(log, qps, rate, letters, began, first, end, progress, cancelled, after)


def _figures(log: Sequence[Any], qps: int, rate: float, letters: int, began: float,
             first: float, end: float, progress: Any, cancelled: Any,
             after: Any) -> dict[str, Any]:  # fmt: skip
    live = sorted(d.at for d in log if d.topic == "live" and d.ok)
    replayed = sorted(d.at for d in log if d.topic == "replayed" and d.ok)
    seconds = Counter(int(t) for t in live if first <= t < end)
    full = [seconds[s] for s in range(int(first) + 1, int(end))]
    sliding = fewest_in_a_window(live, first, end)
    in_window = sum(1 for t in replayed if first <= t < end)
    target = TARGET_SHARE * qps
    return {
        "qps": qps,
        "letters": letters,
        "replay_rate": rate,
        "measured_s": round(end - first, 1),
        "live_per_s_min": min(full) if full else 0,
        "live_per_s_mean": round(sum(full) / len(full), 1) if full else 0,
        "live_sliding_1s_min": sliding,
        "live_share_min": round(min(min(full, default=0), sliding) / qps, 3),
        "replayed_delivered_per_s": round(in_window / (end - first), 1),
        "topic_delivered_per_s": round((sum(full) + in_window) / max(1, len(full)), 1),
        "live_share_of_delivered": round(sum(full) / max(1, sum(full) + in_window), 3),
        "replay_moved_per_s": round(progress.replayed / (end - began), 1),  # from its start
        "replayed": progress.replayed,
        "replay_total": progress.replay.total,
        "topic_busiest_1s": busiest_window(sorted([*live, *replayed])),
        "cancel_stopped_it": cancelled.replay.state is ReplayState.CANCELLED
        and after.replayed == cancelled.replayed,
        "target": f"live >= {TARGET_SHARE:.0%} of the quota ({target:g}/s) in every second "
        "and every sliding second during the replay",
        "met": bool(full) and min(full) >= target and sliding >= target,
    }


def _count(rig: Rig, topic: str, n: int) -> Callable[[], Any]:
    async def check() -> bool:
        return sum(1 for d in await rig.deliveries() if d.topic == topic and d.ok) >= n

    return check


async def _wait(check: Callable[[], Any], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"emq bench replay: {what} within {timeout_s:g} s")
        await asyncio.sleep(0.25)


def run(
    qps: int = 1000,
    letters: int = 100_000,
    rate: float | None = None,
    duration_s: float = 20.0,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """The bench (see the module docstring); its JSON document."""
    import uvloop

    chosen = default_rate(qps) if rate is None else rate

    async def main() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="emq-bench-replay-") as tmp:
            async with Rig.running(Path(tmp)) as rig:
                return await _measure(rig, qps, letters, chosen, duration_s, say)

    with contextlib.suppress(KeyboardInterrupt):
        figures = uvloop.run(main())
        return {"bench": "replay", **figures, "machine": describe()}
    raise SystemExit(130)


def summary(doc: dict[str, Any]) -> str:
    keys = (
        "qps", "letters", "replay_rate", "measured_s", "live_per_s_min", "live_per_s_mean",
        "live_sliding_1s_min", "live_share_min", "replayed_delivered_per_s",
        "topic_delivered_per_s", "live_share_of_delivered",
        "replay_moved_per_s", "topic_busiest_1s", "cancel_stopped_it", "target", "met",
    )  # fmt: skip
    return "\n".join(f"{k:<26} {doc[k]}" for k in keys)
