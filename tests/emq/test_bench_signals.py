"""``emq bench signals``'s simulation: per-owner inboxes read a worker's own share, hash
shards under consistent hashing read (nearly) everything. Deterministic, no processes."""

from __future__ import annotations

from emq.bench.signals import simulate


def test_owner_inboxes_read_the_owned_share_and_hash_shards_do_not() -> None:
    doc = simulate(workers=10, groups=2000)
    layouts = doc["layouts"]
    assert layouts["shared"]["read_share"]["min"] == 1.0
    assert layouts["owner"]["read_over_owned"] == {"mean": 1.0, "min": 1.0, "max": 1.0}
    assert layouts["owner"]["cluster_slots"] == 10  # one slot per worker's inbox
    assert layouts["hash-64"]["read_share"]["min"] > 0.8  # a group in nearly every shard
    assert layouts["hash-1024"]["read_over_owned"]["mean"] > 2  # ~2.3 here, 45 at 100 workers
