"""``emq bench signals``: what each worker reads of the fleet's ready signals, per layout.

Two parts, one JSON document:

* **simulation** (no processes): ``workers`` members and ``groups`` groups (default 100 and
  60 000, the seed's 1M QPS scale) assigned by :func:`allocator.assign.assign`, one signal per
  group. Per layout, what one worker reads as a share of the fleet's signals, next to the share
  of groups it owns: ``shared`` (one stream for all, the old layout), ``hash-N`` (N shards by
  a hash of the group; a worker reads every shard holding a group it owns), ``owner`` (one
  inbox per worker, :mod:`emq.core.signals`, the layout chosen). Also how many streams a worker
  reads and over how many Cluster slots the layout's keys spread.
* **processes**: a real Redis, ``procs`` worker processes (default 10; each runs the store's
  ``wait_ready`` loop as a worker does, :mod:`emq.bench.signals_proc`) owning ``proc_groups``
  groups (default 10 000) by the same assignment, and one producer putting single jobs on random
  groups at ``rate`` per second for ``duration_s``, first with the shared layout, then addressed
  to owners. Per worker: the Redis commands it sent for signals per second (XREAD calls, and
  XADDs handing hints on), the group names it read per second, both as a share of the puts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from redis.crc import key_slot

from adapters.redis_queue import connect
from allocator.assign import assign
from emq.bench.machine import describe
from emq.core.interfaces import PutItem
from emq.core.model import GroupRef, Namespace, Priority, TopicRef
from emq.core.naming import RedisKeys
from emq.core.signals import SignalRoutes
from emq.stack import Service, free_port

SLOTS = 16_384  # Redis Cluster hash slots
HASH_SHARDS = (64, 1024)


def group_names(n: int, per_topic: int = 100) -> list[str]:
    """``n`` groups, ``per_topic`` to a topic (as a 15 000 QPS topic would have)."""
    return [
        str(TopicRef(Namespace.ONLINE, "bench", f"t{i // per_topic}").group(i % per_topic))
        for i in range(n)
    ]


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {
        "mean": round(sum(values) / len(values), 5),
        "min": round(min(values), 5),
        "max": round(max(values), 5),
    }


def _slot(key: str) -> int:
    return int(key_slot(key.encode()))


def simulate(workers: int, groups: int) -> dict[str, Any]:
    """Per-worker signal reads under each layout (see the module doc)."""
    names = group_names(groups)
    members = {f"w{i:03d}": 1 for i in range(workers)}
    owner = assign(names, members)
    owned: dict[str, list[str]] = {m: [] for m in members}
    for g, m in owner.items():
        owned[m].append(g)
    share = {m: len(gs) / groups for m, gs in owned.items()}
    layouts: dict[str, Any] = {
        "shared": _layout(share, lambda m: 1.0, lambda m: 1, 1),
    }
    for n in HASH_SHARDS:
        shard_of = {g: zlib.crc32(g.encode()) % n for g in names}
        per_shard = [0] * n
        for g in names:
            per_shard[shard_of[g]] += 1
        shards = {m: {shard_of[g] for g in gs} for m, gs in owned.items()}
        reads = {m: sum(per_shard[s] for s in ss) / groups for m, ss in shards.items()}
        slots = len({_slot(f"emq:ready:{{{s}}}") for s in range(n)})
        counts = {m: len(ss) for m, ss in shards.items()}
        layouts[f"hash-{n}"] = _layout(share, reads.__getitem__, counts.__getitem__, slots)
    keys = RedisKeys("emq")
    slots = len({_slot(keys.inbox(m)) for m in members})
    layouts["owner"] = _layout(share, share.__getitem__, lambda m: 2, slots)
    return {"workers": workers, "groups": groups, "owned_share": _spread(list(share.values())),
            "layouts": layouts}  # fmt: skip


def _layout(
    share: dict[str, float],
    reads: Callable[[str], float],
    streams: Callable[[str], int],
    slots: int,
) -> dict[str, Any]:
    """One layout's figures: read share, its ratio to the owned share, streams read, slots."""
    members = list(share)
    return {
        "read_share": _spread([reads(m) for m in members]),
        "read_over_owned": _spread([reads(m) / share[m] for m in members]),
        "streams_per_worker": _spread([float(streams(m)) for m in members]),
        "cluster_slots": slots,
    }


# --------------------------------------------------------------------------- processes


async def _produce(url: str, prefix: str, names: list[str], routes: SignalRoutes | None,
                   until: float, rate: float, concurrency: int = 8) -> int:  # fmt: skip
    """Single-job puts on random groups at ``rate`` per second until ``until``; how many."""
    opts: dict[str, Any] = {"routes": routes} if routes is not None else {}
    producer = await connect(url, cluster=False, prefix=prefix, **opts)
    refs = [_group_ref(n) for n in names]
    done = 0

    async def loop(seed: int) -> None:
        nonlocal done
        rng, step, due = random.Random(seed), concurrency / rate, time.time()
        while due < until:
            g = rng.choice(refs)
            await producer.put([PutItem(g.queue(Priority.MEDIUM), "j", b"{}")])
            done += 1
            due += step  # paced: both layouts see the same offered rate
            await asyncio.sleep(max(0.0, due - time.time()))

    try:
        await asyncio.gather(*(loop(i) for i in range(concurrency)))
    finally:
        await producer.aclose()
    return done


def _group_ref(name: str) -> GroupRef:
    ns, tenant, topic, g = name.split("/")
    return TopicRef(Namespace(ns), tenant, topic).group(int(g[1:]))


async def _run_mode(url: str, tmp: Path, names: list[str], owner: dict[str, str],
                    addressed: bool, duration_s: float, rate: float) -> dict[str, Any]:  # fmt: skip
    prefix = f"sig-{'owner' if addressed else 'shared'}-{random.randrange(10**6)}"
    members = sorted(set(owner.values()))
    procs = []
    for m in members:
        spec = {"url": url, "prefix": prefix, "id": m, "addressed": addressed,
                "groups": [g for g, o in owner.items() if o == m],
                "duration_s": duration_s}  # fmt: skip
        path = tmp / f"{prefix}-{m}.json"
        path.write_text(json.dumps(spec))
        procs.append(
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "emq.bench.signals_proc",
                str(path),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
        )
    for p in procs:  # each has taken its cursor: nothing put from now on is missed
        assert p.stdout is not None
        if (await p.stdout.readline()).strip() != b"ready":
            raise RuntimeError("a signal listener did not start")
    start_at = time.time() + 0.2
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(f"{start_at}\n".encode())
        await p.stdin.drain()
    await asyncio.sleep(max(0.0, start_at - time.time()))
    routes = SignalRoutes(owner) if addressed else None
    puts = await _produce(url, prefix, names, routes, start_at + duration_s, rate)
    outs = [json.loads((await p.communicate())[0]) for p in procs]
    per_worker = []
    for out in outs:
        share = out["groups"] / len(names)
        per_worker.append({
            "id": out["id"], "owned_share": round(share, 4),
            "commands_per_s": round(out["commands"] / duration_s, 1),
            "names_per_s": round(out["names"] / duration_s, 1),
            "commands_over_puts": round(out["commands"] / max(1, puts), 4),
            "names_over_puts": round(out["names"] / max(1, puts), 4),
        })  # fmt: skip
    return {"puts_per_s": round(puts / duration_s, 1), "workers": per_worker}


async def processes(procs: int, groups: int, duration_s: float, rate: float) -> dict[str, Any]:
    names = group_names(groups)
    owner = assign(names, {f"w{i}": 1 for i in range(procs)})
    with tempfile.TemporaryDirectory(prefix="emq-bench-signals-") as tmp:
        redis = Service("redis", "redis.sh", Path(tmp) / "redis", free_port())
        redis.start()
        try:
            url = f"redis://{redis.address}/0"
            modes = {}
            for addressed in (False, True):
                label = "owner" if addressed else "shared"
                modes[label] = await _run_mode(
                    url, Path(tmp), names, owner, addressed, duration_s, rate
                )
        finally:
            with contextlib.suppress(Exception):
                redis.stop()
    return {"procs": procs, "groups": groups, "duration_s": duration_s, "offered_puts_per_s": rate,
            "modes": modes}  # fmt: skip


def run(workers: int = 100, groups: int = 60_000, procs: int = 10, proc_groups: int = 10_000,
        duration_s: float = 5.0, rate: float = 500.0) -> dict[str, Any]:  # fmt: skip
    import uvloop

    doc: dict[str, Any] = {"machine": describe(), "simulation": simulate(workers, groups)}
    doc["processes"] = uvloop.run(processes(procs, proc_groups, duration_s, rate))
    return doc


def summary(doc: dict[str, Any]) -> str:
    sim = doc["simulation"]
    lines = [f"simulation: {sim['workers']} workers, {sim['groups']} groups "
             f"(owned share mean {sim['owned_share']['mean']})"]  # fmt: skip
    for name, lay in sim["layouts"].items():
        lines.append(
            f"  {name:<10} read share {lay['read_share']['mean']:.4f} "
            f"(x{lay['read_over_owned']['mean']:.1f} its own), "
            f"{lay['streams_per_worker']['mean']:.0f} streams/worker, "
            f"{lay['cluster_slots']} slots"
        )
    p = doc["processes"]
    lines.append(f"processes: {p['procs']} workers, {p['groups']} groups, {p['duration_s']} s")
    for mode, m in p["modes"].items():
        ws = m["workers"]
        cmds = sum(w["commands_over_puts"] for w in ws) / len(ws)
        got = sum(w["names_over_puts"] for w in ws) / len(ws)
        lines.append(
            f"  {mode:<7} {m['puts_per_s']} puts/s; per worker: "
            f"{sum(w['commands_per_s'] for w in ws) / len(ws):.1f} commands/s "
            f"({cmds:.3f}/put), names/put {got:.3f} (owned share {1 / len(ws):.3f})"
        )
    return "\n".join(lines)
