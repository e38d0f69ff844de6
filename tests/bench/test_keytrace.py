"""W12's split of a key's cycle (emq.bench.keytrace.stages) on hand-made stamps: the stages of
consecutive jobs of a key add up to the cycle, and jobs not seen whole are left out."""

from __future__ import annotations

import pytest

from emq.bench.keytrace import STAGES, key_and_n, stages


def test_key_and_n_reads_keyed_bench_urls_only() -> None:
    assert key_and_n("http://127.0.0.1:1/t/w12?k=k3&n=17") == ("k3", 17)
    assert key_and_n("k=k3&n=17") == ("k3", 17)
    assert key_and_n("http://x/t/w12?k=None&n=1") is None
    assert key_and_n("http://x/t/w12") is None


def test_the_stages_of_consecutive_jobs_add_up_to_the_cycle() -> None:
    # [handed, pushed, read, released] per job n of key k0; the sink answered n at arrival.
    trace = {
        "k0": {
            "0": [0.0, 10.000, 10.004, 10.0041],
            "1": [10.0045, 10.0050, 10.0090, 10.0091],
            "2": [10.0095, 10.0100, 0.0, 0.0],  # its answer not read: no pair 2 -> 3
        }
    }
    arrivals = [(10.001, "k=k0&n=0"), (10.0052, "k=k0&n=1"), (10.0102, "k=k0&n=2")]
    out = stages(trace, arrivals)
    assert out["cycle"] == [pytest.approx(0.0042), pytest.approx(0.0050)]
    for i, cycle in enumerate(out["cycle"]):
        assert sum(out[s][i] for s in STAGES) == pytest.approx(cycle)
    assert out["released_to_handed"][0] == pytest.approx(0.0004)
    assert out["pushed_to_arrival"][1] == pytest.approx(0.0002)
