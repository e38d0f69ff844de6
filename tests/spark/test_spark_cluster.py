"""The standalone-cluster rig (emq/rigs/spark_cluster.py) leaves nothing running when it fails.

The cluster at work is tested where it runs the plan job (tests/spark/test_cli.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from emq.core.errors import EmqError
from emq.rigs.spark_cluster import SparkCluster


def test_a_cluster_that_does_not_come_up_is_stopped(tmp_path: Path) -> None:
    cluster = SparkCluster(tmp_path, workers=2, start_timeout_s=0.0)
    with pytest.raises(EmqError, match="0/2 workers"), cluster:
        pass
    assert len(cluster.pids) == 3  # the master and two workers were launched ...
    for pid in cluster.pids:  # ... and their process groups are gone (and reaped)
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)
    assert "--- " in cluster.logs()
