"""``emq bench promises --redis-rtt-ms`` on the real parts: one short seed of the mixed, hostile
workload (steady keyed topics, a failing and a 503-shedding endpoint, a flood, a live quota
change) with the worker and the API reaching Redis only through the delaying proxy
(:mod:`emq.rigs.netdelay` at 2 ms), judged by the promise checker. What is asserted is what no
speed of the machine excuses: the verdicts came out, nothing accepted was lost or repeated, no
topic went over its quota, and the worker and the API held connections to the proxy and none
to Redis (read from ``/proc``: the socket inodes a process holds, and the TCP tables)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from emq.bench import mixed, promises
from emq.bench.rig import Rig


def remote_ports(pid: int) -> set[int]:
    """The remote ports of the established TCP connections process ``pid`` holds."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # (a descriptor closed meanwhile)
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as fh:
            next(fh)
            for line in fh:
                fields = line.split()
                if fields[3] == "01" and fields[9] in inodes:  # 01: ESTABLISHED
                    ports.add(int(fields[2].rsplit(":", 1)[1], 16))
    return ports


async def test_a_mixed_seed_behind_the_delaying_proxy_keeps_its_promises(tmp_path: Path) -> None:
    spec = mixed.make_spec(1, duration_s=2.0, max_qps=20)  # one worker, five kinds of topic
    async with Rig.running(tmp_path, redis_rtt_ms=2.0) as rig:
        result = await mixed.run_seed(rig, spec)
        assert rig.link is not None
        hop, redis = rig.link.port, rig.redis.port
        peers = {p.name: remote_ports(p.pid) for p in rig.procs if p.alive}
    assert set(peers) == {"api", "w0"}, peers
    for name, ports in peers.items():
        assert hop in ports and redis not in ports, (name, ports, hop, redis)
    assert rig.link.connections is not None and rig.link.connections >= 2
    assert set(result["pass"]) == set(promises.BOUNDS)
    figures, detail = result["figures"], result["detail"]
    assert detail["accepted"] > 0 and figures["lost"] == 0, detail["lost_sample"]
    assert figures["duplicates_before_fault"] == 0
    assert figures["window_over_quota_topics"] == 0, detail["quota_exceeded"]
