"""A fault trial of ``emq bench faults``, shortened, on the real parts (Redis, ZooKeeper,
``emq worker`` and ``emq api`` processes, the recording sink): it runs its fault for real and the
test asserts the issue's target behaviour on the figures the trial reports. It also proves the
trial machinery that ``emq bench faults`` runs at full size (``--json`` for the document). It
judges no timing, so it runs in the parallel pass.

The other trials' faults have tests of their own in ``make test``, so their shortened trials
stay in ``emq bench faults``: a worker killed with SIGKILL (``tests/allocator/test_recovery.py``
and ``tests/allocator/test_fleet_e2e.py``, the quota across a kill in
``tests/bench/test_promises_random.py``), a Redis restart (``tests/worker/test_redis_restart.py``),
a ZooKeeper outage (``tests/allocator/test_zk_outage.py``), a worker stopped past its session
(``tests/allocator/test_fleet_e2e.py``), hanging and slow endpoints
(``tests/worker/test_hanging_endpoints.py``), a Redis Cluster failover
(``tests/adapters/test_cluster_failover.py``) and a ZooKeeper quorum lost and back
(``tests/adapters/test_zk_quorum.py``). The trials' arguments and reading: ``test_faults_cli``."""

from __future__ import annotations

from typing import Any

from emq.bench import faults


def trial(name: str, **params: Any) -> dict[str, Any]:
    doc = faults.run([name], **{name: params})
    assert doc["bench"] == "faults" and doc["machine"]["cores"] >= 1
    (result,) = doc["results"]
    assert "error" not in result, result.get("error")
    assert result["trial"] == name and set(result["pass"]) <= set(result["figures"])
    assert set(result["targets"]) == set(result["pass"])
    assert faults.summary(doc).count(f"| {name} |") >= len(result["pass"])
    return result["figures"]  # type: ignore[no-any-return]


def test_poison_jobs_go_to_the_dlq_and_no_worker_dies() -> None:
    f = trial("poison", healthy=2, jobs=300, qps=50, timeout_s=20.0)
    assert f["poison_jobs"] == len(faults.POISON) + 2
    assert f["workers_alive"] == 2, f["exit_codes"]
    assert f["poison_in_dlq"] == f["poison_jobs"]
    assert f["healthy_delivered_ratio"] == 1.0
