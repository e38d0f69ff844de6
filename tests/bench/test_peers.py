"""``emq bench peers``: what is deterministic without npm or a network (the body, the figures,
the ratio, the best run, the installed version, the summary, refusals); the runs themselves need
Node and BullMQ and are not part of ``make test``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from emq.bench import peers
from emq.cli.main import build_parser, main
from emq.core.errors import EmqError


def test_the_body_is_200_bytes_of_json() -> None:
    assert len(peers.BODY.encode()) == 200
    assert json.loads(peers.BODY)["event"] == "order.created"
    assert len(peers.body_of(64)) == 64
    with pytest.raises(EmqError, match="too small"):
        peers.body_of(10)


def test_figures_are_jobs_over_wall_time_and_over_cpu() -> None:
    used = {"bullmq": 2.0, "redis": 2.0, "sink": 0.5, "wall_s": 3.0}
    assert peers.server_share(used, 1000) == {
        "redis_cpu_s_per_1000_jobs": 2.0, "sink_cpu_s_per_1000_jobs": 0.5,
        "jobs_per_cpu_s_with_redis": 250.0,
    }  # fmt: skip
    f = peers.figures(10_000, 2.5, 3.0)
    assert f["jobs_per_s"] == 4000.0
    assert f["cpu_s_per_1000_jobs"] == 0.3
    assert f["jobs_per_cpu_s"] == 3333.3
    assert f["cpu_pct_of_core"] == 120.0
    with pytest.raises(EmqError, match="no figures"):
        peers.figures(10, 0.0, 1.0)


def test_the_ratio_is_jobs_per_core_and_judged_against_1_5() -> None:
    emq = peers.figures(10_000, 1.0, 1.0)  # 10 000 jobs/s, 10 000 jobs per CPU-s
    bull = peers.figures(10_000, 2.0, 5.0)  # 5 000 jobs/s, 2 000 jobs per CPU-s
    emq["jobs_per_cpu_s_with_redis"], bull["jobs_per_cpu_s_with_redis"] = 8000.0, 1000.0
    c = peers.compare(emq, bull)
    assert c == {"jobs_per_core_ratio": 5.0, "jobs_per_core_with_redis_ratio": 8.0,
                 "jobs_per_s_ratio": 2.0, "target": ">= 1.5", "pass": True}  # fmt: skip
    assert not peers.compare(bull, emq)["pass"]


def test_the_best_run_is_the_fastest_that_did_not_fail() -> None:
    runs: list[dict[str, Any]] = [
        {"jobs_per_s": 900.0, "concurrency_per_worker": 8},
        {"error": "BullMQ's worker did not start", "concurrency_per_worker": 32},
        {"jobs_per_s": 1200.0, "concurrency_per_worker": 128},
    ]
    assert peers.best(runs)["concurrency_per_worker"] == 128
    for r, cpu_rate in zip(runs[::2], (3000.0, 2500.0), strict=True):
        r["jobs_per_cpu_s"] = cpu_rate
    assert peers.leanest_ratio({"jobs_per_cpu_s": 9000.0}, runs) == 3.0  # c=8: the leanest
    with pytest.raises(EmqError, match="no run succeeded"):
        peers.best([runs[1]])


def test_the_installed_versions_are_read_from_the_cache(tmp_path: Path) -> None:
    assert peers.npm_version(tmp_path) is None
    for name, version in (("bullmq", "5.81.5"), ("undici", "6.29.1")):
        meta = tmp_path / "node_modules" / name / "package.json"
        meta.parent.mkdir(parents=True)
        meta.write_text(json.dumps({"name": name, "version": version}))
    assert peers.npm_version(tmp_path) == "5.81.5"
    assert peers.install_bullmq(lambda s: None, tmp_path) == {"bullmq": "5.81.5",
                                                             "undici": "6.29.1"}  # fmt: skip


def test_without_node_the_install_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda tool: None)
    with pytest.raises(EmqError, match="node is not on PATH"):
        peers.install_bullmq(lambda s: None)


def test_the_summary_names_both_and_the_verdict() -> None:
    doc: dict[str, Any] = {
        "tenants": 10, "jobs_per_tenant": 100, "body_bytes": 200,
        "npm_versions": {"bullmq": "5.81.5"}, "emq": peers.figures(1000, 0.1, 0.08),
        "bullmq": {**peers.figures(1000, 1.0, 0.9), "client": "fetch",
                   "concurrency_per_worker": 8},
    }  # fmt: skip
    doc["emq_over_bullmq"] = peers.compare(doc["emq"], doc["bullmq"])
    lines = peers.summary(doc).splitlines()
    assert lines[1].startswith("EMQ") and "12500.0 jobs/CPU-s" in lines[1]
    assert lines[2].startswith("BullMQ 5.81.5 (fetch c=8)")
    assert "target >= 1.5: pass" in lines[3]
    del doc["bullmq"], doc["emq_over_bullmq"]
    assert "BullMQ not measured: every run failed" in peers.summary(doc)


def test_the_node_script_ships_with_the_package() -> None:
    assert peers.SCRIPT.is_file()
    assert "new Worker(" in peers.SCRIPT.read_text()


def test_the_command_is_registered_and_refuses_a_bad_duration(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = build_parser().parse_args(["bench", "peers", "--duration-s", "2", "--json"])
    assert (args.name, args.duration_s, args.json) == ("peers", 2.0, True)
    assert main(["bench", "peers", "--duration-s", "-1"]) != 0
    assert "--duration-s must be greater than 0" in capsys.readouterr().err
