"""``emq history export`` from a real Redis: rows of several sources become one row each."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from emq.cli.main import main
from emq.compose import open_history
from emq.core.interfaces import HistoryRow
from emq.core.settings import Settings
from spark.history import MARKER
from tests.spark.conftest import MONDAY


def _sources(start: int, interval_s: int = 10, backlog: int = 5) -> list[HistoryRow]:
    """What the API and two workers record for one topic in one interval."""
    common = {"interval_start": start, "interval_s": interval_s, "namespace": "online"}
    common |= {"tenant": "acme", "topic": "orders", "quota": 300, "groups": 2}
    return [
        HistoryRow(source="api", enqueued=1000, **common),
        HistoryRow(
            source="w1",
            delivered=600,
            p50_ms=10.0,
            p99_ms=40.0,
            throttled_backlog=backlog,
            failed=3,
            retried=2,
            dead_lettered=1,
            **common,
        ),
        HistoryRow(
            source="w2", delivered=200, p50_ms=50.0, p99_ms=90.0, throttled_backlog=7, **common
        ),
    ]


def _record(settings: Settings, rows: list[HistoryRow]) -> None:
    async def write() -> None:
        async with open_history(settings) as store:
            await store.record(rows)

    asyncio.run(write())


@pytest.fixture
def env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("EMQ_REDIS_URL", settings.redis_url)
    monkeypatch.setenv("EMQ_REDIS_KEY_PREFIX", settings.redis_key_prefix)
    return settings


def _export(out: Path, *extra: str, capsys: pytest.CaptureFixture[str]) -> dict:
    assert main(["history", "export", "--out", str(out), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_export_adds_up_the_sources(env: Settings, tmp_path: Path, capsys) -> None:
    _record(env, _sources(MONDAY) + _sources(MONDAY + 10) + _sources(MONDAY + 86_400))
    result = _export(tmp_path / "h", capsys=capsys)
    assert (result["read"], result["rows"], result["topics"]) == (9, 3, 1)
    assert sorted(p.name for p in (tmp_path / "h").glob("date=*")) == [
        "date=2025-01-06",
        "date=2025-01-07",
    ]
    rows = pq.read_table(tmp_path / "h").to_pylist()
    first = min(rows, key=lambda r: r["interval_start"])
    assert first["interval_start"] == MONDAY and first["interval_s"] == 10
    assert (first["enqueued"], first["delivered"], first["failed"]) == (1000, 800, 3)
    assert (first["retried"], first["dead_lettered"]) == (2, 1)
    assert first["throttled_backlog"] == 12  # both workers' buffers at the interval's end
    assert first["p50_ms"] == 20.0  # (10 x 600 + 50 x 200) / 800: delivered-weighted
    assert first["p99_ms"] == 90.0  # the largest
    assert (first["quota"], first["groups"]) == (300, 2)
    assert json.loads((tmp_path / "h" / MARKER).read_text())["aggregated"] is True


def test_repeated_exports_continue_where_the_last_stopped(
    env: Settings, tmp_path: Path, capsys
) -> None:
    _record(env, _sources(MONDAY))
    assert _export(tmp_path / "h", capsys=capsys)["rows"] == 1
    assert _export(tmp_path / "h", capsys=capsys)["rows"] == 0  # nothing new
    _record(env, _sources(MONDAY + 20))
    assert _export(tmp_path / "h", capsys=capsys)["rows"] == 1
    table = pq.read_table(tmp_path / "h")
    assert sorted(table.column("interval_start").to_pylist()) == [MONDAY, MONDAY + 20]
    # Going back over what this directory holds would count it twice: refused.
    assert main(["history", "export", "--out", str(tmp_path / "h"), "--since", str(MONDAY)]) == 1
    assert "already holds" in capsys.readouterr().err


def test_open_intervals_wait_for_the_next_export(env: Settings, tmp_path: Path, capsys) -> None:
    now = int(time.time()) // 10 * 10
    _record(env, _sources(MONDAY) + _sources(now))
    result = _export(tmp_path / "h", capsys=capsys)
    assert result["rows"] == 1 and result["next_since"] == now  # the open interval, next time


def test_export_can_coarsen_intervals(env: Settings, tmp_path: Path, capsys) -> None:
    rows = [r for i in range(6) for r in _sources(MONDAY + 10 * i, backlog=5 + i)]
    _record(env, rows)
    result = _export(tmp_path / "h", "--interval-s", "60", capsys=capsys)
    assert result["rows"] == 1
    (row,) = pq.read_table(tmp_path / "h").to_pylist()
    assert (row["interval_s"], row["enqueued"], row["delivered"]) == (60, 6000, 4800)
    assert row["throttled_backlog"] == 17  # the largest end-of-interval backlog (10 + 7), no sum
    # The next minute goes into the next export; the first minute is not exported twice.
    _record(env, [r for i in range(6, 12) for r in _sources(MONDAY + 10 * i)])
    assert _export(tmp_path / "h", "--interval-s", "60", capsys=capsys)["rows"] == 1
    starts = pq.read_table(tmp_path / "h").column("interval_start").to_pylist()
    assert sorted(starts) == [MONDAY, MONDAY + 60]
    # Another interval length into the same directory would mix them: refused.
    assert main(["history", "export", "--out", str(tmp_path / "h"), "--interval-s", "30"]) == 1
    assert "keep them" in capsys.readouterr().err


def test_export_refuses_a_synthetic_directory(env: Settings, tmp_path: Path, capsys) -> None:
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / MARKER).write_text(json.dumps({"source": "synth", "aggregated": True}))
    assert main(["history", "export", "--out", str(tmp_path / "h")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("emq: error:") and "synth" in err and err.count("\n") == 1


def test_an_export_plans(env: Settings, spark, tmp_path: Path, capsys) -> None:
    """What ``emq demo`` does at its end: export, then plan on the export."""
    _record(env, [r for i in range(360) for r in _sources(MONDAY + 10 * i)])  # an hour
    _export(tmp_path / "h", capsys=capsys)
    out = tmp_path / "plan"
    assert (
        main(["plan", "run", "--history", str(tmp_path / "h"), "--out", str(out), "--quiet"]) == 0
    )
    (topic,) = json.loads((out / "plan.json").read_text())["topics"]
    assert (topic["tenant"], topic["topic"], topic["rate_source"]) == ("acme", "orders", "enqueued")
    assert topic["rates"]["p99"] == 100  # 1000 jobs enqueued per 10 s
    assert (topic["qps"], topic["groups"]) == (120, 1)  # x 1.2 headroom
    assert topic["observed"]["p50_ms"] == 20 and topic["observed"]["max_throttled_backlog"] == 12
