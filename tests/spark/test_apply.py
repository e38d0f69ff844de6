"""``emq plan apply`` against the real API (loopback test server over Redis and ZooKeeper)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from emq.cli.main import main
from emq.client import Client
from tests.api.conftest import Api, api  # noqa: F401  (the fixture)

TOKEN = "test-admin-token"


def _plan(path: Path, topics: list[tuple[str, str, int, int]]) -> Path:
    entries = [
        {"namespace": "online", "tenant": tenant, "topic": topic, "qps": qps, "groups": groups}
        for tenant, topic, qps, groups in topics
    ]
    path.write_text(json.dumps({"format": 1, "topics": entries}))
    return path


@pytest.fixture
async def live(api: Api, monkeypatch: pytest.MonkeyPatch) -> Client:  # noqa: F811
    await api.tenant("acme")
    for topic, qps in (("up", 100), ("down", 400), ("halve", 1000), ("same", 150)):
        await api.topic("acme", topic, qps)
    base = str(api.client.make_url("")).rstrip("/")
    monkeypatch.setenv("EMQ_API_URL", base)
    monkeypatch.setenv("EMQ_ADMIN_TOKEN", TOKEN)
    for name in ("EMQ_REDIS_URL", "EMQ_REDIS_KEY_PREFIX", "EMQ_ZK_HOSTS"):
        monkeypatch.delenv(name, raising=False)
    return Client(base, TOKEN)


async def _quotas(client: Client) -> dict[str, int]:
    return {t["topic"]: t["qps"] for t in await client.list_topics("acme")}


async def _apply(*argv: str) -> int:
    # The command runs its own event loop; the test server keeps serving on this one.
    return await asyncio.to_thread(main, ["plan", "apply", *argv])


PLANNED = [
    ("acme", "up", 300, 2),
    ("acme", "down", 300, 2),
    ("acme", "halve", 200, 2),  # 1000 -> 200: more than half lower
    ("acme", "same", 150, 1),
    ("acme", "ghost", 50, 1),  # no such topic
]


async def test_dry_run_shows_the_diff_and_changes_nothing(
    live: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with live:
        before = await _quotas(live)
        assert await _apply(str(_plan(tmp_path / "plan.json", PLANNED)), "--dry-run") == 0
        assert await _quotas(live) == before
    out, err = capsys.readouterr()
    lines = {line.split()[0]: line for line in out.splitlines()[1:] if line.startswith("online/")}
    assert "100" in lines["online/acme/up"] and "+200.0%" in lines["online/acme/up"]
    assert "-25.0%" in lines["online/acme/down"]
    assert "needs --force" in lines["online/acme/halve"]
    assert "unknown topic" in lines["online/acme/ghost"]
    assert "online/acme/same" not in lines  # unchanged rows only with --all
    assert "dry run: nothing applied" in err


async def test_a_big_decrease_needs_force_and_nothing_is_applied(
    live: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with live:
        before = await _quotas(live)
        assert await _apply(str(_plan(tmp_path / "plan.json", PLANNED))) == 1
        assert await _quotas(live) == before
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "emq: error: 1 quota(s) would drop by more than half: nothing applied "
        "(review them, then pass --force)"
    ]


async def test_force_applies_and_reports_the_unknown_topic(
    live: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(tmp_path / "plan.json", PLANNED)
    async with live:
        assert await _apply(str(plan), "--force", "--json") == 3
        after = await _quotas(live)
        shown = await live.get_topic("acme", "up")
    assert after == {"up": 300, "down": 300, "halve": 200, "same": 150}
    assert shown["groups"] == 2
    captured = capsys.readouterr()
    result: dict[str, Any] = json.loads(captured.out)
    outcome = {c["topic"]: (c["action"], c["result"]) for c in result["changes"]}
    assert outcome == {
        "up": ("raise", "applied"),
        "down": ("lower", "applied"),
        "halve": ("lower", "applied"),  # with --force
        "same": ("unchanged", None),
        "ghost": ("unknown", None),
    }
    assert "1 planned topic(s) not applied (1 unknown, 0 failed)" in captured.err


async def test_a_clean_plan_applies_with_exit_zero(
    live: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(tmp_path / "plan.json", [("acme", "up", 450, 3), ("acme", "same", 150, 1)])
    async with live:
        assert await _apply(str(plan)) == 0
        assert (await _quotas(live))["up"] == 450
    out = capsys.readouterr().out
    assert "1 to raise" in out and "1 applied, 0 failed" in out and "raised" in out


async def test_a_malformed_plan_is_one_line(
    live: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps({"topics": [{"namespace": "online", "tenant": "acme", "qps": 5}]}))
    assert await _apply(str(bad)) == 1
    err = capsys.readouterr().err
    assert err.startswith("emq: error:") and "topics[0].topic" in err and err.count("\n") == 1


async def test_a_plan_naming_a_topic_twice_is_refused(
    live: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(tmp_path / "plan.json", [("acme", "up", 200, 2), ("acme", "up", 300, 2)])
    assert await _apply(str(plan)) == 1
    assert "topics[1]: plans online/acme/up again (topics[0])" in capsys.readouterr().err


async def test_the_plan_reviewed_is_stored_for_the_console(
    live: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(tmp_path / "plan.json", PLANNED)
    async with live:
        assert await _apply(str(plan), "--dry-run") == 0
        shown = await live.latest_plan()
    assert shown["source"] == "dry-run" and shown["topics"] == len(PLANNED)
    counts = shown["diff"]["counts"]
    assert counts == {"raise": 1, "lower": 1, "needs-force": 1, "unchanged": 1, "unknown": 1}
    assert "not stored" not in capsys.readouterr().err
