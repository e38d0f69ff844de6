"""``emq bench enqueue --api-processes``: its figures from runs (deterministic), bad counts."""

from __future__ import annotations

from typing import Any

import pytest

from emq.bench import enqueue_scaling
from emq.core.errors import EmqError


def _run(processes: int, rps: float, api_cpu: float) -> dict[str, Any]:
    def load(batch: int) -> dict[str, Any]:
        return {
            "requests_per_s": rps / batch,
            "jobs_per_s": rps,
            "p99_ms": 9.0,
            "cpu_s_per_1000_requests": {"api": api_cpu, "load_generators": 0.3, "redis": 0.02},
            "requests_per_api_core_s": round(1000 / api_cpu, 1),
            "jobs_per_api_core_s": round(1000 * batch / api_cpu, 1),
        }

    return {"processes": processes, "single": load(1), "batch_1000": load(1000)}


def test_scaling_is_each_count_over_the_first() -> None:
    runs = [_run(1, 3000.0, 0.2), _run(2, 4500.0, 0.25)]
    figures = enqueue_scaling._scaling(runs)
    assert figures["single_scaling_measured"] == {1: 1.0, 2: 1.5}
    assert figures["single_requests_per_api_core_s"] == {1: 5000.0, 2: 4000.0}
    text = enqueue_scaling.summary({"runs": runs})
    assert text.splitlines()[1].startswith("2 process(es): single 4500.0 req/s")


@pytest.mark.parametrize("counts", [[], [0], [1, 65]])
def test_bad_counts_are_refused_before_anything_starts(counts: list[int]) -> None:
    with pytest.raises(EmqError, match="from 1 to 64"):
        enqueue_scaling.run(counts)
