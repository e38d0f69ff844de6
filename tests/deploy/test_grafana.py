"""The Grafana dashboard (deploy/grafana/emq.json) is built only on metrics EMQ exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from adapters.memory_config import MemoryConfigStore
from adapters.memory_queue import MemoryQueueBackend
from adapters.memory_rollouts import MemoryRolloutStore
from adapters.memory_transactions import MemoryTransactionStore
from emq.api import ApiSettings, make_app
from emq.api.app import API_KEY
from emq.core.model import Namespace
from emq.core.settings import Settings
from emq.scheduler.firer import SchedulerMetrics
from worker.push import PushExecutor
from worker.runtime import Worker
from worker.settings import WorkerSettings
from worker.ssrf import AddressPolicy
from worker.standalone import StandaloneAssignment

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "emq.json"
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def api_registry() -> CollectorRegistry:
    """The registry of an API built as ``emq api`` builds it, with every optional store (so
    every collector the API registers), and the schedule firer's metrics that
    ``emq.api.server.firing`` adds to it (``emq scheduler`` serves the same ones)."""
    config, queues = MemoryConfigStore(), MemoryQueueBackend()
    app = make_app(Settings(admin_token="t"), ApiSettings(), config, queues,
                   transaction_store=MemoryTransactionStore(queues),
                   rollout_store=MemoryRolloutStore())  # fmt: skip
    registry = app[API_KEY].metrics.registry
    SchedulerMetrics(registry)
    return registry


def worker_registry() -> CollectorRegistry:
    """The registry of a worker built as ``emq worker`` builds it (its HTTP client's protocol
    errors included)."""
    config, settings = MemoryConfigStore(), WorkerSettings()
    worker = Worker(
        "w", Namespace.ONLINE, settings, queues=MemoryQueueBackend(), config=config,
        assignment=StandaloneAssignment(config, Namespace.ONLINE),
        pusher=PushExecutor(settings, AddressPolicy()),
    )  # fmt: skip
    return worker.metrics.registry


def exported() -> set[str]:
    """Every sample name a worker's, the API's and the scheduler's /metrics can carry."""
    names: set[str] = set()
    for registry in (worker_registry(), api_registry()):
        for family in registry.collect():
            names.update(family.name + s for s in _SUFFIXES[family.type])
    return names


def expressions(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
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
        # schedules
        "emq_schedule_ticks_fired_total",
        "emq_schedule_ticks_late_total",
        "emq_schedule_ticks_skipped_total",
        "emq_schedule_lag_seconds_bucket",
        # transactions
        "emq_transaction_decisions_total",
        "emq_transaction_checks_total",
        "emq_topic_open_transactions",
        "emq_topic_prepared_jobs",
        # endpoint flow control
        "emq_endpoint_rate",
        "emq_endpoint_disabled",
        "emq_endpoint_parked_jobs",
        "emq_endpoint_throttled_total",
        # workers and the API
        "emq_topic_delayed_jobs",
        "emq_push_protocol_errors_total",
        "emq_quota_grants_moved_total",
        "emq_topic_tenant_share_qps",
        "emq_jobs_duplicate_total",
        "emq_worker_slow_pushes",
        "emq_api_requests_total",
        "emq_api_request_duration_seconds_bucket",
        # plans and changes
        "emq_rollouts_started_total",
        "emq_rollouts_ended_total",
        "emq_rollout_latest_state",
        "emq_changes_total",
        "emq_change_reverts_total",
    ):
        assert wanted in used, wanted


def test_every_collector_is_known() -> None:
    """exported() sees what the processes register, not a list kept by hand."""
    names = exported()
    for name in ("emq_schedule_lag_seconds_bucket", "emq_topic_open_transactions",
                 "emq_endpoint_throttled_total", "emq_push_protocol_errors_total",
                 "emq_rollout_latest_state", "emq_change_reverts_total"):  # fmt: skip
        assert name in names, name
    assert "emq_rollouts_ended" not in names  # a counter's samples end in _total


def test_expressions_are_balanced_and_use_the_variables() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    for expr in expressions(dashboard):
        for open_, close in ("()", "{}", "[]"):
            depth = 0
            for ch in expr:
                depth += (ch == open_) - (ch == close)
                assert depth >= 0, expr
            assert depth == 0, expr
        assert expr.count('"') % 2 == 0, expr
        assert set(re.findall(r"\$(\w+)", expr)) <= variables, expr


def test_panels_are_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in dashboard["panels"]:
        grid = p["gridPos"]
        assert {"x", "y", "w", "h"} <= set(grid) and grid["x"] + grid["w"] <= 24
        mine = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                for y in range(grid["y"], grid["y"] + grid["h"])}  # fmt: skip
        assert not mine & cells, p["title"]  # no panel hides another
        cells |= mine
        if p["type"] == "row":  # a feature's heading: a full-width line of its own
            assert grid["w"] == 24 and grid["h"] == 1 and p["title"] and "targets" not in p
            continue
        assert p["targets"] and p["datasource"]["uid"] == "${datasource}"
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"])
