"""A Redis Cluster master killed under load (issue 26 item 2), on the real parts: a Cluster with
a replica per master (``deploy/redis-cluster.sh ... 1``), ZooKeeper, a fleet of ``emq worker``
processes, ``emq api`` taking enqueues with idempotency keys, and the recording sink. It is the
``cluster_failover`` trial of ``emq bench faults`` with one kill and a small load (the bench
runs two kills at 800 jobs/s and judges the timing targets).

What must hold whatever the machine's speed: no process exits; every worker's ready-signal
listener resumes after its connection was closed by the dying node; the API answers 503, never
500; the shards that lost nothing keep delivering while the killed one has no master; nothing
accepted is lost; no worker delivers a job of a healthy shard twice (no worker crashed).
"""

from __future__ import annotations

from emq.bench import faults


def test_a_master_killed_under_load_stops_only_its_shard_and_no_process() -> None:
    params = {
        "workers": 2, "topics": 6, "qps": 20, "kills": 1, "between_s": 0.0, "tail_s": 1.0,
        "api_per_s": 6.0, "seed": 1, "backlog_s": 14.0,
    }  # fmt: skip
    doc = faults.run(["cluster_failover"], cluster_failover=params)
    (result,) = doc["results"]
    assert "error" not in result, result.get("error")
    f = result["figures"]
    (failover_s,) = f["failover_s"]
    assert failover_s is not None, "the replica never took over"
    assert f["workers_alive"] == 2 and f["api_alive"] == 1
    assert f["listeners_unresumed"] == 0
    assert f["api_500"] == 0 and set(f["api_5xx_by_code"]) <= {"503:unavailable"}, f
    assert f["lost"] == 0
    assert f["duplicates_healthy_shards"] == 0, f["duplicate_repeats"]
    # The healthy shards delivered while the killed one had no master (their longest gap is
    # shorter than the failover); the killed shard's own pause is the bench's to judge.
    assert f["healthy_shard_max_gap_s"] < failover_s, f
