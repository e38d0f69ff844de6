"""The Grafana dashboard (deploy/grafana/emq.json) is built only on metrics EMQ exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from emq.api.metrics import ApiMetrics, TopicGauges
from emq.core.model import Namespace
from worker.metrics import WorkerMetrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "emq.json"
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported() -> set[str]:
    """Every sample name a worker's and the API's /metrics can carry."""
    api = ApiMetrics()
    api.registry.register(TopicGauges(None, None, None, Namespace.ONLINE))  # type: ignore[arg-type]
    names: set[str] = set()
    for registry in (WorkerMetrics().registry, api.registry):
        for family in registry.collect():
            names.update(family.name + s for s in _SUFFIXES[family.type])
    return names


def expressions(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return exprs


def test_every_expression_references_metrics_that_exist() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    names = exported()
    exprs = expressions(dashboard)
    assert len(exprs) >= 14
    used = set()
    for expr in exprs:
        found = set(re.findall(r"\bemq_[a-z0-9_]+", expr))
        assert found, expr
        assert found <= names, (expr, found - names)
        used |= found
    for wanted in (
        "emq_topic_backlog_jobs",
        "emq_topic_quota_qps",
        "emq_jobs_delivered_total",
        "emq_topic_throttled_jobs",
        "emq_topic_oldest_job_age_seconds",
        "emq_delivery_latency_seconds_bucket",
        "emq_push_duration_seconds_bucket",
        "emq_jobs_failed_total",
        "emq_push_attempts_failed_total",
        "emq_worker_groups",
        "emq_worker_buffer_bytes",
        "emq_worker_send_limit",
        "emq_worker_event_loop_lag_seconds",
    ):
        assert wanted in used, wanted


def test_panels_are_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for p in dashboard["panels"]:
        assert p["targets"] and p["datasource"]["uid"] == "${datasource}"
        assert {"x", "y", "w", "h"} <= set(p["gridPos"])
